/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: programs and kernels (HAL 1.2). Every device answers the format checks; the rest
 * runs where the device loads the suite's kernels: the host shared object built from
 * conformance/fixtures/kernels.c (HAL_PROGRAM_FORMAT_HOST_ELF), or, on GPUs, the PTX (and cubin
 * and fatbin) nvcc built from conformance/fixtures/kernels.cu, with the same kernels; all are
 * read from the fixture directory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cts.h"

static bool loads(const cts_ctx_t *ctx, hal_program_format_t format)
{
    return (ctx->props.capabilities & HAL_DEVICE_CAP_PROGRAMS) &&
           (ctx->props.program_formats & (1u << format));
}

/* The format the suite's kernels are loaded in on this device, or NONE. */
static hal_program_format_t kernel_format(const cts_ctx_t *ctx)
{
    if (loads(ctx, HAL_PROGRAM_FORMAT_HOST_ELF))
        return HAL_PROGRAM_FORMAT_HOST_ELF;
    if (loads(ctx, HAL_PROGRAM_FORMAT_PTX))
        return HAL_PROGRAM_FORMAT_PTX;
    return HAL_PROGRAM_FORMAT_NONE;
}

#define SKIP_UNLESS_KERNELS(ctx)                                                               \
    do {                                                                                       \
        CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");                         \
        if (kernel_format(ctx) == HAL_PROGRAM_FORMAT_NONE)                                     \
            return cts_skip((ctx), "the device loads neither HAL_PROGRAM_FORMAT_HOST_ELF nor " \
                                   "HAL_PROGRAM_FORMAT_PTX (the suite's kernels)");            \
    } while (0)

/* For bodies that need what only host kernels do (report an error from a block, run in a
 * forked child). */
#define SKIP_UNLESS_HOST_ELF(ctx, why)                                                           \
    do {                                                                                         \
        CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");                           \
        if (!loads(ctx, HAL_PROGRAM_FORMAT_HOST_ELF))                                            \
            return cts_skip((ctx), "the device does not load HAL_PROGRAM_FORMAT_HOST_ELF " why); \
    } while (0)

/* The device's default stream (NULL if it cannot be had: the calls given it then fail). */
static hal_stream_t default_stream(const cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_device_get_default_stream(ctx->device, &s);
    return s;
}

/* The bytes of the suite's kernels in a format (cts_calloc'd), or NULL with *result set. */
static void *read_image(cts_ctx_t *ctx, hal_program_format_t format, size_t *size, int *result)
{
    if (ctx->fixture_dir == NULL) {
        *result = CTS_FAIL;
        fprintf(stderr, "the fixture libraries were not found (HAL_CTS_FIXTURE_DIR)\n");
        return NULL;
    }
    const char *file = format == HAL_PROGRAM_FORMAT_HOST_ELF ? "libcts_kernels.so"
                       : format == HAL_PROGRAM_FORMAT_PTX    ? "cts_kernels.ptx"
                       : format == HAL_PROGRAM_FORMAT_CUBIN  ? "cts_kernels.cubin"
                                                             : "cts_kernels.fatbin";
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", ctx->fixture_dir, file);
    void *image = cts_read_file(ctx, path, size);
    if (!image) {
        *result = CTS_FAIL;
        if (format != HAL_PROGRAM_FORMAT_HOST_ELF)
            fprintf(stderr, "(GPU images are built where the CUDA toolkit's nvcc is found)\n");
    }
    return image;
}

static void *read_kernels(cts_ctx_t *ctx, size_t *size, int *result)
{
    return read_image(ctx, kernel_format(ctx), size, result);
}

/* Loads the kernels; returns CTS_PASS with *program set. */
static int load_kernels(cts_ctx_t *ctx, hal_program_t *program)
{
    size_t size = 0;
    int result = CTS_PASS;
    void *image = read_kernels(ctx, &size, &result);
    if (!image)
        return result;
    CTS_CHECK_OK(hal_program_create(ctx->device, kernel_format(ctx), image, size, program));
    return CTS_PASS;
}

#define LOAD(ctx, program, kernel, name)                                  \
    hal_program_t program = NULL;                                         \
    hal_kernel_t kernel = NULL;                                           \
    do {                                                                  \
        int loaded_ = load_kernels((ctx), &program);                      \
        if (loaded_ != CTS_PASS)                                          \
            return loaded_;                                               \
        CTS_CHECK_OK(hal_program_get_kernel(program, (name), &(kernel))); \
    } while (0)

int cts_program_formats_property(cts_ctx_t *ctx)
{
    bool programs = (ctx->props.capabilities & HAL_DEVICE_CAP_PROGRAMS) != 0;
    CTS_CHECK(programs || ctx->props.program_formats == 0);
    CTS_CHECK(!programs || ctx->props.program_formats != 0);
    /* Known formats and the vendor range (since 1.3) only; never bit 0 (NONE). */
    uint32_t vendor = 0xffffffffu << HAL_PROGRAM_FORMAT_VENDOR_FIRST;
    CTS_CHECK((ctx->props.program_formats & ~(((1u << HAL_PROGRAM_FORMAT_COUNT) - 2u) | vendor)) ==
              0);
    CTS_CHECK(strcmp(hal_program_format_name(HAL_PROGRAM_FORMAT_PTX), "ptx") == 0);
    CTS_CHECK(strcmp(hal_program_format_name((hal_program_format_t)99), "unknown") == 0);
    return CTS_PASS;
}

/* A format the device does not list is refused before the backend sees the image. */
int cts_program_unlisted_format_unsupported(cts_ctx_t *ctx)
{
    static const char junk[] = "not an image";
    hal_program_t p = NULL;
    for (int f = 1; f < HAL_PROGRAM_FORMAT_COUNT; f++) {
        if (ctx->props.program_formats & (1u << f))
            continue;
        CTS_CHECK_STATUS(
            hal_program_create(ctx->device, (hal_program_format_t)f, junk, sizeof(junk), &p),
            HAL_ERROR_UNSUPPORTED);
        CTS_CHECK(p == NULL);
        CTS_CHECK(strstr(hal_last_error_message(), hal_program_format_name(f)) != NULL);
    }
    CTS_CHECK_STATUS(
        hal_program_create(ctx->device, (hal_program_format_t)77, junk, sizeof(junk), &p),
        HAL_ERROR_UNSUPPORTED);
    CTS_CHECK_STATUS(
        hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_NONE, junk, sizeof(junk), &p),
        HAL_ERROR_UNSUPPORTED);
    CTS_CHECK(p == NULL);
    return CTS_PASS;
}

int cts_program_create_invalid(cts_ctx_t *ctx)
{
    static const char junk[] = "x";
    hal_program_t p = NULL;
    CTS_CHECK_STATUS(hal_program_create(NULL, HAL_PROGRAM_FORMAT_HOST_ELF, junk, 1, &p),
                     HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_HOST_ELF, NULL, 1, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_HOST_ELF, junk, 0, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_HOST_ELF, junk, 1, NULL),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(p == NULL);
    CTS_CHECK_OK(hal_program_destroy(NULL));
    CTS_CHECK_STATUS(hal_program_destroy((hal_program_t)ctx->device), HAL_ERROR_INVALID_HANDLE);
    return CTS_PASS;
}

/* Images that are not programs of the format are refused with a message, and nothing leaks. */
int cts_program_corrupt_image(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    size_t size = 0;
    int result = CTS_PASS;
    unsigned char *image = read_kernels(ctx, &size, &result);
    if (!image)
        return result;
    hal_program_t p = NULL;
    static const char text[] = "#!/bin/sh\necho not a program\n";
    CTS_CHECK_STATUS(hal_program_create(ctx->device, kernel_format(ctx), text, sizeof(text), &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(strstr(hal_last_error_message(), "hal_program_create") != NULL);
    /* A valid header over a truncated body: the loader itself refuses it. */
    CTS_CHECK_STATUS(hal_program_create(ctx->device, kernel_format(ctx), image, size / 8, &p),
                     HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(p == NULL);
    return CTS_PASS;
}

/* Runs cts_add from a program of the given format; returns CTS_PASS. */
static int run_add_from(cts_ctx_t *ctx, hal_program_format_t format, const void *image, size_t size)
{
    hal_program_t p = NULL;
    hal_kernel_t add = NULL;
    CTS_CHECK_OK(hal_program_create(ctx->device, format, image, size, &p));
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_add", &add));
    enum { N = 1000 };
    uint64_t *buf = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 8, 0, (void **)&buf));
    CTS_CHECK_OK(cts_memset_sync(buf, 0, N * 8, default_stream(ctx)));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(3, 1, 1);
    cfg.block[0] = 32;
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(buf, N * 8), HAL_KERNEL_ARG_U64(N),
                                 HAL_KERNEL_ARG_U64(5) };
    CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3));
    uint64_t *host = cts_calloc(ctx, N * 8);
    CTS_CHECK(host != NULL);
    CTS_CHECK_OK(cts_copy_sync(host, buf, N * 8, default_stream(ctx)));
    for (int i = 0; i < N; i++)
        CTS_CHECKF(host[i] == 5, "%s: element %d is %llu", hal_program_format_name(format), i,
                   (unsigned long long)host[i]);
    CTS_CHECK_OK(hal_mem_free(buf));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* The compiled GPU formats (cubin, fatbin) a device lists load and run the same kernels, with
 * threads in a block; a cubin for another architecture is refused as an image. */
int cts_program_gpu_binary_formats(cts_ctx_t *ctx)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");
    if (!loads(ctx, HAL_PROGRAM_FORMAT_CUBIN) && !loads(ctx, HAL_PROGRAM_FORMAT_FATBIN))
        return cts_skip(ctx, "the device loads neither HAL_PROGRAM_FORMAT_CUBIN nor _FATBIN");
    const hal_program_format_t formats[] = { HAL_PROGRAM_FORMAT_FATBIN, HAL_PROGRAM_FORMAT_CUBIN };
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
        if (!loads(ctx, formats[f]))
            continue;
        size_t size = 0;
        int result = CTS_PASS;
        void *image = read_image(ctx, formats[f], &size, &result);
        if (!image)
            return result;
        if (formats[f] == HAL_PROGRAM_FORMAT_CUBIN) {
            /* The fixture cubin is for sm_90 only. */
            hal_program_t p = NULL;
            hal_status_t st = hal_program_create(ctx->device, formats[f], image, size, &p);
            if (st == HAL_ERROR_INVALID_ARGUMENT) {
                CTS_CHECKF(strstr(hal_last_error_message(), "NoKernelImageForDevice") != NULL,
                           "a refused sm_90 cubin: %s", hal_last_error_message());
                CTS_CHECK(p == NULL);
                continue;
            }
            CTS_CHECK_OK(st);
            CTS_CHECK_OK(hal_program_destroy(p));
        }
        int r = run_add_from(ctx, formats[f], image, size);
        if (r != CTS_PASS)
            return r;
        /* Truncated, the image is refused before the runtime reads past its end. */
        hal_program_t p = NULL;
        CTS_CHECK_STATUS(hal_program_create(ctx->device, formats[f], image, size - 1, &p),
                         HAL_ERROR_INVALID_ARGUMENT);
        CTS_CHECK(p == NULL);
    }
    return CTS_PASS;
}

/* What tools/triton_aot.py says of a Triton cubin (its <name>.launch file). */
typedef struct triton_launch {
    char kernel[HAL_KERNEL_NAME_MAX];
    char arch[16];
    uint32_t threads, shared, block_elements, nargs, scratch;
    char args[HAL_KERNEL_ARGS_MAX]; /* 'p' or a scalar's size in bytes, as a digit */
} triton_launch_t;

/* Parses a .launch file; returns 0, or -1 naming the line it could not read. */
static int parse_triton_launch(const char *text, triton_launch_t *out)
{
    memset(out, 0, sizeof(*out));
    for (const char *line = text; line != NULL && *line != '\0'; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        char key[32] = "";
        int used = 0;
        if (sscanf(line, "%31s %n", key, &used) != 1)
            break;
        const char *rest = line + used;
        if (strcmp(key, "kernel") == 0) {
            sscanf(rest, "%255s", out->kernel);
        } else if (strcmp(key, "arch") == 0) {
            sscanf(rest, "%15s", out->arch);
        } else if (strcmp(key, "threads") == 0) {
            sscanf(rest, "%u", &out->threads);
        } else if (strcmp(key, "shared") == 0) {
            sscanf(rest, "%u", &out->shared);
        } else if (strcmp(key, "scratch") == 0) {
            sscanf(rest, "%u", &out->scratch);
        } else if (strcmp(key, "constexpr") == 0 && strncmp(rest, "BLOCK ", 6) == 0) {
            sscanf(rest + 6, "%u", &out->block_elements);
        } else if (strcmp(key, "args") == 0) {
            for (const char *c = rest; *c && *c != '\n' && out->nargs < HAL_KERNEL_ARGS_MAX; c++)
                if (*c == 'p' || (*c >= '1' && *c <= '8'))
                    out->args[out->nargs++] = *c;
        }
    }
    bool complete = out->kernel[0] && out->threads && out->block_elements && out->nargs;
    return complete ? 0 : -1;
}

/* A Triton kernel compiled ahead of time for sm_90 (tools/triton_aot.py, from
 * conformance/fixtures/triton_kernels.py; make gpu-bundle builds it): what torch.compile's
 * Inductor emits for CUDA devices, loaded and launched through the program API with Triton's
 * calling convention (its scratch-buffer pointers NULL). */
int cts_program_triton_cubin(cts_ctx_t *ctx)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");
    if (!loads(ctx, HAL_PROGRAM_FORMAT_CUBIN))
        return cts_skip(ctx, "the device does not load HAL_PROGRAM_FORMAT_CUBIN");
    if (ctx->fixture_dir == NULL) {
        fprintf(stderr, "the fixture directory was not found (HAL_CTS_FIXTURE_DIR)\n");
        return CTS_FAIL;
    }
    char path[2048];
    size_t size = 0, text_size = 0;
    snprintf(path, sizeof(path), "%s/cts_triton_add.launch", ctx->fixture_dir);
    char *text = cts_read_file(ctx, path, &text_size);
    snprintf(path, sizeof(path), "%s/cts_triton_add.cubin", ctx->fixture_dir);
    void *image = text ? cts_read_file(ctx, path, &size) : NULL;
    if (!image) {
        fprintf(stderr, "(the Triton cubin is built by make gpu-bundle, with the triton "
                        "package: tools/triton_aot.py)\n");
        return CTS_FAIL;
    }
    char *terminated = cts_calloc(ctx, text_size + 1);
    CTS_CHECK(terminated != NULL);
    memcpy(terminated, text, text_size);
    triton_launch_t launch;
    CTS_CHECKF(parse_triton_launch(terminated, &launch) == 0, "%s is incomplete", path);
    CTS_CHECK(launch.nargs == 6 && memcmp(launch.args, "ppp4pp", 6) == 0);

    hal_program_t p = NULL;
    hal_status_t st = hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_CUBIN, image, size, &p);
    if (st == HAL_ERROR_INVALID_ARGUMENT &&
        strstr(hal_last_error_message(), "NoKernelImageForDevice") != NULL) {
        CTS_CHECK(p == NULL);
        return cts_skip(ctx, "the Triton cubin is for sm_90; the device is another architecture");
    }
    CTS_CHECK_OK(st);
    hal_kernel_t add = NULL;
    CTS_CHECK_OK(hal_program_get_kernel(p, launch.kernel, &add));

    enum { N = 1000 };
    float *x = NULL, *y = NULL, *out = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 4, 0, (void **)&x));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 4, 0, (void **)&y));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 4, 0, (void **)&out));
    float *hx = cts_calloc(ctx, N * 4), *hy = cts_calloc(ctx, N * 4), *ho = cts_calloc(ctx, N * 4);
    CTS_CHECK(hx && hy && ho);
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i * 0.5f;
        hy[i] = (float)(N - i);
    }
    hal_stream_t s = default_stream(ctx);
    CTS_CHECK_OK(cts_copy_sync(x, hx, N * 4, s));
    CTS_CHECK_OK(cts_copy_sync(y, hy, N * 4, s));
    CTS_CHECK_OK(cts_memset_sync(out, 0xff, N * 4, s));
    hal_launch_config_t cfg =
        HAL_LAUNCH_CONFIG_INIT((N + launch.block_elements - 1) / launch.block_elements, 1, 1);
    cfg.block[0] = launch.threads;
    cfg.shared_bytes = launch.shared;
    hal_kernel_arg_t args[6] = { HAL_KERNEL_ARG_PTR(x, N * 4),   HAL_KERNEL_ARG_PTR(y, N * 4),
                                 HAL_KERNEL_ARG_PTR(out, N * 4), HAL_KERNEL_ARG_I32(N),
                                 HAL_KERNEL_ARG_PTR(NULL, 0),    HAL_KERNEL_ARG_PTR(NULL, 0) };
    CTS_CHECK_OK(hal_kernel_launch(s, add, &cfg, args, 6));
    CTS_CHECK_OK(cts_copy_sync(ho, out, N * 4, s));
    for (int i = 0; i < N; i++)
        CTS_CHECKF(ho[i] == hx[i] + hy[i], "element %d is %g, expected %g", i, (double)ho[i],
                   (double)(hx[i] + hy[i]));
    /* Without Triton's scratch pointers the launch is refused before anything runs. */
    CTS_CHECK_STATUS(hal_kernel_launch(s, add, &cfg, args, 4), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_mem_free(x));
    CTS_CHECK_OK(hal_mem_free(y));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

int cts_program_get_kernel(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, add, "cts_add");
    hal_kernel_t again = NULL, other = NULL;
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_add", &again));
    CTS_CHECK(again == add);
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_count_blocks", &other));
    CTS_CHECK(other != add);
    hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_info(add, &info));
    CTS_CHECK(strcmp(info.name, "cts_add") == 0);
    CTS_CHECK(info.nargs == 3);
    CTS_CHECK(info.args[0].kind == HAL_KERNEL_ARG_POINTER);
    CTS_CHECK(info.args[1].kind == HAL_KERNEL_ARG_SCALAR && info.args[1].size == 8);
    CTS_CHECK(info.args[2].kind == HAL_KERNEL_ARG_SCALAR && info.args[2].size == 8);
    hal_kernel_t unsigned_kernel = NULL;
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_unsigned", &unsigned_kernel));
    CTS_CHECK_OK(hal_kernel_get_info(unsigned_kernel, &info));
    CTS_CHECK(info.nargs == UINT32_MAX);
    /* Pointer and scalar arguments are not tensors: nothing to describe, nothing written. */
    hal_kernel_tensor_info_t tensors = HAL_KERNEL_TENSOR_INFO_INIT;
    tensors.ninputs = 77;
    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(add, &tensors), HAL_ERROR_UNSUPPORTED);
    CTS_CHECK(tensors.ninputs == 77);
    CTS_CHECK(strstr(hal_last_error_message(), "cts_add") != NULL);
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

int cts_program_get_kernel_invalid(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, k, "cts_add");
    hal_kernel_t none = NULL;
    CTS_CHECK_STATUS(hal_program_get_kernel(p, "no_such_kernel", &none), HAL_ERROR_NOT_FOUND);
    CTS_CHECK(strstr(hal_last_error_message(), "no_such_kernel") != NULL);
    CTS_CHECK(none == NULL);
    CTS_CHECK_STATUS(hal_program_get_kernel(p, NULL, &none), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_get_kernel(p, "cts_add", NULL), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_get_kernel(p, "", &none), HAL_ERROR_INVALID_ARGUMENT);
    char long_name[HAL_KERNEL_NAME_MAX + 1];
    memset(long_name, 'k', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    CTS_CHECK_STATUS(hal_program_get_kernel(p, long_name, &none), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_get_kernel(NULL, "cts_add", &none), HAL_ERROR_INVALID_HANDLE);
    hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
    CTS_CHECK_STATUS(hal_kernel_get_info(k, NULL), HAL_ERROR_INVALID_ARGUMENT);
    info.struct_size = 8;
    CTS_CHECK_STATUS(hal_kernel_get_info(k, &info), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_kernel_get_info(NULL, &info), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Every block of a 3-D grid runs exactly once, and the launch is done when the stream is. */
int cts_program_launch_runs_every_block(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, k, "cts_count_blocks");
    enum { GX = 5, GY = 3, GZ = 2, N = GX * GY * GZ };
    uint32_t *out = NULL;
    CTS_CHECK_OK(
        hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * sizeof(uint32_t), 0, (void **)&out));
    CTS_CHECK_OK(cts_memset_sync(out, 0, N * sizeof(uint32_t), default_stream(ctx)));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(GX, GY, GZ);
    hal_kernel_arg_t arg = HAL_KERNEL_ARG_PTR(out, N * sizeof(uint32_t));
    CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), k, &cfg, &arg, 1));
    uint32_t host[N];
    CTS_CHECK_OK(cts_copy_sync(host, out, sizeof(host), default_stream(ctx)));
    for (uint32_t b = 0; b < N; b++)
        CTS_CHECKF(host[b] == b + 1, "block %u ran %u times", b, host[b] / (b + 1));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Launches are stream-ordered against copies and other launches, and across streams through
 * events. */
int cts_program_launch_ordering(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, add, "cts_add");
    enum { N = 4096 };
    uint64_t *buf = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 8, 0, (void **)&buf));
    uint64_t *host = cts_calloc(ctx, N * 8);
    CTS_CHECK(host != NULL);
    for (uint64_t i = 0; i < N; i++)
        host[i] = i;
    hal_stream_t other = NULL;
    hal_event_t ev = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &other));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &ev));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(7, 1, 1);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(buf, N * 8), HAL_KERNEL_ARG_U64(N),
                                 HAL_KERNEL_ARG_U64(10) };
    CTS_CHECK_OK(hal_memcpy_async(buf, host, N * 8, default_stream(ctx)));
    for (int r = 0; r < 5; r++)
        CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3));
    CTS_CHECK_OK(hal_event_record(ev, default_stream(ctx)));
    CTS_CHECK_OK(hal_stream_wait_event(other, ev));
    args[2] = HAL_KERNEL_ARG_U64(1000);
    CTS_CHECK_OK(hal_kernel_launch(other, add, &cfg, args, 3));
    CTS_CHECK_OK(hal_memcpy_async(host, buf, N * 8, other));
    CTS_CHECK_OK(hal_stream_synchronize(other));
    for (uint64_t i = 0; i < N; i++)
        CTS_CHECKF(host[i] == i + 1050, "element %llu is %llu", (unsigned long long)i,
                   (unsigned long long)host[i]);
    CTS_CHECK_OK(hal_event_destroy(ev));
    CTS_CHECK_OK(hal_stream_destroy(other));
    CTS_CHECK_OK(hal_mem_free(buf));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Every malformed launch is refused at enqueue with nothing run. */
int cts_program_launch_invalid(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, add, "cts_add");
    hal_kernel_t unsigned_kernel = NULL;
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_unsigned", &unsigned_kernel));
    uint64_t *buf = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 64, 0, (void **)&buf));
    CTS_CHECK_OK(cts_memset_sync(buf, 0, 64, default_stream(ctx)));
    uint64_t pageable[8] = { 0 };
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
    hal_kernel_arg_t ok[3] = { HAL_KERNEL_ARG_PTR(buf, 64), HAL_KERNEL_ARG_U64(8),
                               HAL_KERNEL_ARG_U64(1) };
    hal_kernel_arg_t bad[3];
#define EXPECT_REFUSED(stream, kernel, config, args, n)                            \
    CTS_CHECK_STATUS(hal_kernel_launch((stream), (kernel), (config), (args), (n)), \
                     HAL_ERROR_INVALID_ARGUMENT);                                  \
    CTS_CHECK(strstr(hal_last_error_message(), "hal_kernel_launch") != NULL)
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, ok, 2); /* too few for the signature */
    EXPECT_REFUSED(default_stream(ctx), add, NULL, ok, 3);
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, NULL, 3);
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, ok, HAL_KERNEL_ARGS_MAX + 1);
    hal_launch_config_t zero = HAL_LAUNCH_CONFIG_INIT(1, 0, 1);
    EXPECT_REFUSED(default_stream(ctx), add, &zero, ok, 3);
    hal_launch_config_t small = cfg;
    small.struct_size = 8;
    EXPECT_REFUSED(default_stream(ctx), add, &small, ok, 3);
    memcpy(bad, ok, sizeof(bad));
    bad[1] = HAL_KERNEL_ARG_I32(8); /* 4 bytes where 8 are declared */
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, bad, 3);
    memcpy(bad, ok, sizeof(bad));
    bad[0] = HAL_KERNEL_ARG_U64(0); /* a scalar where a pointer is declared */
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, bad, 3);
    memcpy(bad, ok, sizeof(bad));
    bad[0] = HAL_KERNEL_ARG_PTR(pageable, sizeof(pageable)); /* not HAL memory */
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, bad, 3);
    memcpy(bad, ok, sizeof(bad));
    bad[0] = HAL_KERNEL_ARG_PTR(buf + 4, 64); /* runs past the allocation */
    EXPECT_REFUSED(default_stream(ctx), add, &cfg, bad, 3);
    memcpy(bad, ok, sizeof(bad));
    bad[1].size = 0;
    EXPECT_REFUSED(default_stream(ctx), unsigned_kernel, &cfg, bad, 3);
    bad[1].size = HAL_KERNEL_SCALAR_MAX + 1;
    EXPECT_REFUSED(default_stream(ctx), unsigned_kernel, &cfg, bad, 3);
    bad[1].kind = (hal_kernel_arg_kind_t)9;
    EXPECT_REFUSED(default_stream(ctx), unsigned_kernel, &cfg, bad, 3);
#undef EXPECT_REFUSED
    hal_device_t other = cts_other_device(ctx);
    if (other) {
        hal_stream_t s = NULL;
        CTS_CHECK_OK(hal_device_get_default_stream(other, &s));
        CTS_CHECK_STATUS(hal_kernel_launch(s, add, &cfg, ok, 3), HAL_ERROR_INVALID_ARGUMENT);
    }
    CTS_CHECK_STATUS(hal_kernel_launch(NULL, add, &cfg, ok, 3), HAL_ERROR_INVALID_HANDLE);
    CTS_CHECK_STATUS(hal_kernel_launch(default_stream(ctx), NULL, &cfg, ok, 3),
                     HAL_ERROR_INVALID_HANDLE);
    /* Nothing ran, and a launch without a signature takes what it is given. */
    CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), unsigned_kernel, &cfg, ok, 3));
    uint64_t host[8];
    CTS_CHECK_OK(cts_copy_sync(host, buf, sizeof(host), default_stream(ctx)));
    CTS_CHECK(cts_bytes_find_other(host, sizeof(host), 0) == sizeof(host));
    CTS_CHECK_OK(hal_mem_free(buf));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* A block that fails latches its error, with its detail, on the stream. */
int cts_program_kernel_error_latches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_HOST_ELF(ctx, "(a GPU kernel can only fail by trapping, which leaves the device "
                              "unusable for the rest of the process)");
    LOAD(ctx, p, fail, "cts_fail");
    hal_stream_t s = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(8, 1, 1);
    hal_kernel_arg_t none_fails = HAL_KERNEL_ARG_I32(100), third = HAL_KERNEL_ARG_I32(3);
    CTS_CHECK_OK(hal_kernel_launch(s, fail, &cfg, &none_fails, 1));
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(hal_kernel_launch(s, fail, &cfg, &third, 1));
    CTS_CHECK_STATUS(hal_stream_synchronize(s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECKF(strstr(hal_last_error_message(), "deliberate failure in block 3") != NULL,
               "message: %s", hal_last_error_message());
    /* Sticky: later launches are refused with the same error. */
    CTS_CHECK_STATUS(hal_kernel_launch(s, fail, &cfg, &none_fails, 1), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_stream_destroy(s), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Destroying a program with launches still queued: they run, the handles die at once. */
int cts_program_destroy_with_pending_launches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    LOAD(ctx, p, add, "cts_add");
    enum { N = 256 };
    uint64_t *buf = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 8, 0, (void **)&buf));
    CTS_CHECK_OK(cts_memset_sync(buf, 0, N * 8, default_stream(ctx)));
    cts_gate_t *gate = cts_gate_new(ctx);
    CTS_CHECK(gate != NULL);
    CTS_CHECK_OK(cts_gate_enqueue(gate, default_stream(ctx)));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(3, 1, 1);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(buf, N * 8), HAL_KERNEL_ARG_U64(N),
                                 HAL_KERNEL_ARG_U64(7) };
    for (int r = 0; r < 3; r++)
        CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3));
    CTS_CHECK_OK(hal_program_destroy(p));
    CTS_CHECK_STATUS(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3),
                     HAL_ERROR_INVALID_HANDLE);
    cts_gate_open(gate);
    uint64_t host[N];
    CTS_CHECK_OK(cts_copy_sync(host, buf, sizeof(host), default_stream(ctx)));
    for (int i = 0; i < N; i++)
        CTS_CHECKF(host[i] == 21, "element %d is %llu", i, (unsigned long long)host[i]);
    CTS_CHECK_OK(hal_mem_free(buf));
    return CTS_PASS;
}

typedef struct launcher {
    hal_device_t device;
    hal_kernel_t kernel;
    uint64_t *buf;
    hal_status_t status;
    uint64_t result;
} launcher_t;

enum { LAUNCHERS = 4, LAUNCHES = 50, LAUNCH_N = 64 };

static void *launch_thread(void *arg)
{
    launcher_t *l = arg;
    hal_stream_t s = NULL;
    l->status = hal_stream_create(l->device, 0, &s);
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(2, 2, 1);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(l->buf, LAUNCH_N * 8),
                                 HAL_KERNEL_ARG_U64(LAUNCH_N), HAL_KERNEL_ARG_U64(1) };
    if (l->status == HAL_OK)
        l->status = hal_memset_async(l->buf, 0, LAUNCH_N * 8, s);
    for (int r = 0; r < LAUNCHES && l->status == HAL_OK; r++)
        l->status = hal_kernel_launch(s, l->kernel, &cfg, args, 3);
    uint64_t host[LAUNCH_N];
    if (l->status == HAL_OK)
        l->status = cts_copy_sync(host, l->buf, sizeof(host), s);
    if (l->status == HAL_OK) {
        l->result = host[0];
        for (int i = 1; i < LAUNCH_N; i++)
            if (host[i] != host[0])
                l->result = UINT64_MAX;
    }
    if (s)
        hal_stream_destroy(s);
    return NULL;
}

/* Threads launching one kernel on streams of their own at once. */
int cts_program_concurrent_launches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    LOAD(ctx, p, add, "cts_add");
    launcher_t l[LAUNCHERS];
    pthread_t t[LAUNCHERS];
    for (int i = 0; i < LAUNCHERS; i++) {
        l[i] = (launcher_t){ .device = ctx->device, .kernel = add };
        CTS_CHECK_OK(
            hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, LAUNCH_N * 8, 0, (void **)&l[i].buf));
    }
    for (int i = 0; i < LAUNCHERS; i++)
        CTS_CHECK(pthread_create(&t[i], NULL, launch_thread, &l[i]) == 0);
    for (int i = 0; i < LAUNCHERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < LAUNCHERS; i++) {
        CTS_CHECK_OK(l[i].status);
        CTS_CHECKF(l[i].result == LAUNCHES, "thread %d: %llu", i, (unsigned long long)l[i].result);
        CTS_CHECK_OK(hal_mem_free(l[i].buf));
    }
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* A program left alive is destroyed when the backend closes. */
int cts_program_left_at_close(cts_ctx_t *ctx)
{
    SKIP_UNLESS_KERNELS(ctx);
    hal_program_t p = NULL;
    int loaded = load_kernels(ctx, &p);
    if (loaded != CTS_PASS)
        return loaded;
    ctx->expected_leaks = 1; /* the program, reported by the validation layer */
    CTS_CHECK_OK(cts_backend_close_fully(ctx));
    CTS_CHECK_OK(cts_backend_reopen(ctx));
    hal_kernel_t k = NULL;
    CTS_CHECK_STATUS(hal_program_get_kernel(p, "cts_add", &k), HAL_ERROR_INVALID_HANDLE);
    return CTS_PASS;
}

#if defined(__SANITIZE_THREAD__)
#define CTS_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CTS_UNDER_TSAN 1
#endif
#endif
#ifndef CTS_UNDER_TSAN
#define CTS_UNDER_TSAN 0
#endif

/* In a forked child (the backend's threads are gone there) the parent's programs and kernels
 * are refused, not run or hung on, and a backend opened afresh in the child loads and runs the
 * same kernels; the parent's program keeps working. Returns the child's exit status: 0 when
 * every check held, else the number of the first that failed. */
static int forked_child(const cts_ctx_t *ctx, hal_kernel_t parent_kernel, hal_stream_t parent,
                        uint64_t *parent_buf, const void *image, size_t size)
{
    alarm(60); /* a hang is a failure, not a stuck suite */
    enum { N = 64 };
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
    uint64_t dummy[N];
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(parent_buf, sizeof(dummy)),
                                 HAL_KERNEL_ARG_U64(N), HAL_KERNEL_ARG_U64(1) };
    hal_status_t st = hal_kernel_launch(parent, parent_kernel, &cfg, args, 3);
    if (st != HAL_ERROR_INVALID_HANDLE) {
        fprintf(stderr, "forked child: launch of the parent's kernel: %s (%s)\n",
                hal_status_string(st), hal_last_error_message());
        return 1;
    }
    if (strstr(hal_last_error_message(), "fork") == NULL) {
        fprintf(stderr, "forked child: the refusal does not name fork(): %s\n",
                hal_last_error_message());
        return 9;
    }
    hal_stream_t parent_default = NULL;
    if (hal_device_get_default_stream(ctx->device, &parent_default) != HAL_ERROR_INVALID_HANDLE ||
        hal_stream_synchronize(parent) != HAL_ERROR_INVALID_HANDLE ||
        hal_kernel_get_info(parent_kernel, &(hal_kernel_info_t){ 0 }) != HAL_ERROR_INVALID_HANDLE)
        return 10;
#if CTS_UNDER_TSAN
    /* TSan cannot follow threads started in a child forked from a process with threads ("dup
     * thread with used id"): under it the child checks the refusals only. */
    (void)image;
    (void)size;
    return 0;
#endif
    hal_backend_t backend = NULL;
    hal_device_t device = NULL;
    hal_program_t program = NULL;
    hal_kernel_t add = NULL;
    hal_stream_t stream = NULL;
    uint64_t *buf = NULL;
    if (hal_backend_open(ctx->backend_name, &backend) != HAL_OK)
        return 2;
    if (hal_device_get(backend, ctx->device_index, &device) != HAL_OK ||
        hal_device_get_default_stream(device, &stream) != HAL_OK)
        return 3;
    if (hal_program_create(device, HAL_PROGRAM_FORMAT_HOST_ELF, image, size, &program) != HAL_OK ||
        hal_program_get_kernel(program, "cts_add", &add) != HAL_OK)
        return 4;
    if (hal_mem_alloc(device, HAL_MEM_KIND_DEVICE, sizeof(dummy), 0, (void **)&buf) != HAL_OK)
        return 5;
    for (uint64_t i = 0; i < N; i++)
        dummy[i] = i;
    args[0] = HAL_KERNEL_ARG_PTR(buf, sizeof(dummy));
    args[2] = HAL_KERNEL_ARG_U64(7);
    if (hal_memcpy_async(buf, dummy, sizeof(dummy), stream) != HAL_OK ||
        hal_kernel_launch(stream, add, &cfg, args, 3) != HAL_OK ||
        hal_memcpy_async(dummy, buf, sizeof(dummy), stream) != HAL_OK ||
        hal_stream_synchronize(stream) != HAL_OK)
        return 6;
    for (uint64_t i = 0; i < N; i++)
        if (dummy[i] != i + 7)
            return 7;
    if (hal_mem_free(buf) != HAL_OK || hal_program_destroy(program) != HAL_OK ||
        hal_backend_close(backend) != HAL_OK)
        return 8;
    return 0;
}

int cts_program_fork_safety(cts_ctx_t *ctx)
{
    SKIP_UNLESS_HOST_ELF(
        ctx, "(the child opens the backend afresh, which CUDA does not allow after fork)");
    size_t size = 0;
    int result = CTS_PASS;
    void *image = read_kernels(ctx, &size, &result);
    if (!image)
        return result;
    hal_program_t p = NULL;
    hal_kernel_t add = NULL;
    CTS_CHECK_OK(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_HOST_ELF, image, size, &p));
    CTS_CHECK_OK(hal_program_get_kernel(p, "cts_add", &add));
    enum { N = 256 };
    uint64_t *buf = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, N * 8, 0, (void **)&buf));
    CTS_CHECK_OK(cts_memset_sync(buf, 0, N * 8, default_stream(ctx)));
    hal_launch_config_t cfg = HAL_LAUNCH_CONFIG_INIT(4, 1, 1);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(buf, N * 8), HAL_KERNEL_ARG_U64(N),
                                 HAL_KERNEL_ARG_U64(2) };
    CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3));
    CTS_CHECK_OK(hal_stream_synchronize(default_stream(ctx)));

    hal_stream_t stream = default_stream(ctx); /* in the child the device is the parent's */
    fflush(NULL);
    pid_t pid = fork();
    CTS_CHECK(pid >= 0);
    if (pid == 0)
        _exit(forked_child(ctx, add, stream, buf, image, size));
    int wstatus = 0;
    CTS_CHECK(waitpid(pid, &wstatus, 0) == pid);
    CTS_CHECKF(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
               "the forked child %s %d (exit codes: see forked_child)",
               WIFEXITED(wstatus) ? "exited with" : "was killed by signal",
               WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));

    CTS_CHECK_OK(hal_kernel_launch(default_stream(ctx), add, &cfg, args, 3));
    uint64_t host[N];
    CTS_CHECK_OK(cts_copy_sync(host, buf, sizeof(host), default_stream(ctx)));
    for (uint64_t i = 0; i < N; i++)
        CTS_CHECKF(host[i] == 4, "element %llu is %llu", (unsigned long long)i,
                   (unsigned long long)host[i]);
    CTS_CHECK_OK(hal_mem_free(buf));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}
