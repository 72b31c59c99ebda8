/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: programs on devices that load NEFF (HAL_PROGRAM_FORMAT_NEFF, trainium). A NEFF
 * has one kernel, "main", whose arguments are its tensors, each a device pointer.
 *
 * The images: with HAL_CTS_NEFF_DIR set, <dir>/add.neff (inputs a and b, output out, float32
 * [1024] each, out = a + b) and <dir>/fail.neff (one input and one output of 4096 bytes; its
 * execution fails), compiled for the device; without it, the libnrt emulator's own test
 * container (hal_backends/trainium/emulator/README.md, "Programs"), which a real Neuron runtime
 * refuses. No compiled NEFF is in this repository: the Neuron compiler is not available to it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cts.h"

enum { N = 1024, BYTES = N * 4 };

static const char emulator_add[] = "NRT-EMU-PROGRAM 1\n"
                                   "input a 4096\n"
                                   "input b 4096\n"
                                   "output out 4096\n"
                                   "op add_f32 out a b\n";
static const char emulator_fail[] = "NRT-EMU-PROGRAM 1\n"
                                    "input a 4096\n"
                                    "output out 4096\n"
                                    "op fail 1002\n";

#define SKIP_UNLESS_NEFF(ctx)                                                           \
    do {                                                                                \
        CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");                  \
        if (!((ctx)->props.program_formats & (1u << HAL_PROGRAM_FORMAT_NEFF)))          \
            return cts_skip((ctx), "the device does not load HAL_PROGRAM_FORMAT_NEFF"); \
    } while (0)

/* The image named `name` (see the top of the file), or NULL with *result set. */
static const void *neff_image(cts_ctx_t *ctx, const char *name, size_t *size, int *result)
{
    const char *dir = getenv("HAL_CTS_NEFF_DIR");
    if (dir == NULL || dir[0] == '\0') {
        const char *text = strcmp(name, "add") == 0 ? emulator_add : emulator_fail;
        *size = strlen(text);
        return text;
    }
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s.neff", dir, name);
    void *image = cts_read_file(ctx, path, size);
    if (!image)
        *result = CTS_FAIL;
    return image;
}

#define LOAD_NEFF(ctx, program, kernel, name)                                                  \
    hal_program_t program = NULL;                                                              \
    hal_kernel_t kernel = NULL;                                                                \
    do {                                                                                       \
        size_t size_ = 0;                                                                      \
        int result_ = CTS_PASS;                                                                \
        const void *image_ = neff_image((ctx), (name), &size_, &result_);                      \
        if (!image_)                                                                           \
            return result_;                                                                    \
        CTS_CHECK_OK(hal_program_create((ctx)->device, HAL_PROGRAM_FORMAT_NEFF, image_, size_, \
                                        &(program)));                                          \
        CTS_CHECK_OK(hal_program_get_kernel((program), "main", &(kernel)));                    \
    } while (0)

static hal_stream_t default_stream(const cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_device_t d = ctx->device;
    hal_device_get_default_stream(d, &s);
    return s;
}

static const hal_launch_config_t ONE = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);

/* Three device buffers of BYTES, a[i] = i and b[i] = 1 (on `s`); CTS_PASS or CTS_FAIL. */
static int alloc_inputs(cts_ctx_t *ctx, hal_stream_t s, float *buf[3])
{
    static _Thread_local float ha[N], hb[N]; /* read by the queued copies */
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = 1.0f;
    }
    for (int i = 0; i < 3; i++)
        CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, BYTES, 0, (void **)&buf[i]));
    CTS_CHECK_OK(hal_memcpy_async(buf[0], ha, BYTES, s));
    CTS_CHECK_OK(hal_memcpy_async(buf[1], hb, BYTES, s));
    return CTS_PASS;
}

/* The arguments of the add kernel: out = a + b. */
static void add_args(hal_kernel_arg_t args[3], float *a, float *b, float *out)
{
    args[0] = HAL_KERNEL_ARG_PTR(a, BYTES);
    args[1] = HAL_KERNEL_ARG_PTR(b, BYTES);
    args[2] = HAL_KERNEL_ARG_PTR(out, BYTES);
}

/* Whether host[i] == i + added for every i. */
static int check_sum(const float *host, float added)
{
    for (int i = 0; i < N; i++)
        CTS_CHECKF(host[i] == (float)i + added, "element %d is %g, expected %g", i, (double)host[i],
                   (double)((float)i + added));
    return CTS_PASS;
}

/* Copies `from` back on s, checks that it holds i + added, and frees the three buffers. */
static int expect_sum_and_free(float *from, hal_stream_t s, float added, float *buf[3])
{
    static _Thread_local float host[N];
    CTS_CHECK_OK(cts_copy_sync(host, from, BYTES, s));
    if (check_sum(host, added) != CTS_PASS)
        return CTS_FAIL;
    for (int i = 0; i < 3; i++)
        CTS_CHECK_OK(hal_mem_free(buf[i]));
    return CTS_PASS;
}

/* The kernel's signature is the model's tensors; a launch is ordered after the copies before it
 * on its stream and, through an event, before a launch on another stream. */
int cts_program_neff_launch_ordering(cts_ctx_t *ctx)
{
    SKIP_UNLESS_NEFF(ctx);
    LOAD_NEFF(ctx, p, k, "add");
    hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_info(k, &info));
    CTS_CHECK(strcmp(info.name, "main") == 0);
    CTS_CHECK(info.nargs == 3);
    /* A NEFF's arguments are pointers, not tensors (StableHLO programs take tensors). */
    hal_kernel_tensor_info_t tensors = HAL_KERNEL_TENSOR_INFO_INIT;
    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(k, &tensors), HAL_ERROR_UNSUPPORTED);
    for (int i = 0; i < 3; i++)
        CTS_CHECK(info.args[i].kind == HAL_KERNEL_ARG_POINTER);
    float *buf[3];
    hal_stream_t s = default_stream(ctx), other = NULL;
    if (alloc_inputs(ctx, s, buf) != CTS_PASS)
        return CTS_FAIL;
    hal_event_t ev = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &other));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &ev));
    hal_kernel_arg_t first[3];
    add_args(first, buf[0], buf[1], buf[2]);
    hal_kernel_arg_t second[3];
    add_args(second, buf[2], buf[1], buf[0]);
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, first, 3)); /* out = a + 1 */
    CTS_CHECK_OK(hal_event_record(ev, s));
    CTS_CHECK_OK(hal_stream_wait_event(other, ev));
    CTS_CHECK_OK(hal_kernel_launch(other, k, &ONE, second, 3)); /* a = out + 1 */
    if (expect_sum_and_free(buf[0], other, 2.0f, buf) != CTS_PASS)
        return CTS_FAIL;
    CTS_CHECK_OK(hal_event_destroy(ev));
    CTS_CHECK_OK(hal_stream_destroy(other));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* A failing execution latches on the stream, naming the runtime's call. */
int cts_program_neff_execution_error_latches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_NEFF(ctx);
    LOAD_NEFF(ctx, p, k, "fail");
    float *a = NULL, *out = NULL;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, BYTES, 0, (void **)&a));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, BYTES, 0, (void **)&out));
    hal_stream_t s = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &s));
    hal_kernel_arg_t args[2] = { HAL_KERNEL_ARG_PTR(a, BYTES), HAL_KERNEL_ARG_PTR(out, BYTES) };
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 2));
    hal_status_t st = hal_stream_synchronize(s);
    CTS_CHECK(st != HAL_OK);
    CTS_CHECKF(strstr(hal_last_error_message(), "nrt_execute") != NULL, "message: %s",
               hal_last_error_message());
    CTS_CHECK_STATUS(hal_kernel_launch(s, k, &ONE, args, 2), st); /* sticky */
    CTS_CHECK_STATUS(hal_stream_destroy(s), st);
    CTS_CHECK_OK(hal_mem_free(a));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Destroying a program with launches still queued: they run, the handles die at once. */
int cts_program_neff_destroy_with_pending_launches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_NEFF(ctx);
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_HOST_CALLBACKS, "host callbacks");
    LOAD_NEFF(ctx, p, k, "add");
    float *buf[3];
    hal_stream_t s = default_stream(ctx);
    if (alloc_inputs(ctx, s, buf) != CTS_PASS)
        return CTS_FAIL;
    cts_gate_t *gate = cts_gate_new(ctx);
    CTS_CHECK(gate != NULL);
    CTS_CHECK_OK(cts_gate_enqueue(gate, s));
    hal_kernel_arg_t args[3];
    add_args(args, buf[0], buf[1], buf[2]);
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 3));
    CTS_CHECK_OK(hal_program_destroy(p));
    CTS_CHECK_STATUS(hal_kernel_launch(s, k, &ONE, args, 3), HAL_ERROR_INVALID_HANDLE);
    cts_gate_open(gate);
    return expect_sum_and_free(buf[2], s, 1.0f, buf);
}

typedef struct neff_launcher {
    cts_ctx_t *ctx;
    hal_kernel_t kernel;
    hal_status_t status;
    int result;
} neff_launcher_t;

enum { NEFF_LAUNCHERS = 4, NEFF_ROUNDS = 10 };

/* On a stream of its own: a = a + 1 twice per round, through out; then checks a. */
static void *neff_launch_thread(void *arg)
{
    neff_launcher_t *l = arg;
    hal_stream_t s = NULL;
    float *buf[3] = { NULL, NULL, NULL };
    l->result = CTS_FAIL;
    l->status = hal_stream_create(l->ctx->device, 0, &s);
    if (l->status != HAL_OK)
        return NULL;
    if (alloc_inputs(l->ctx, s, buf) == CTS_PASS) {
        hal_kernel_arg_t forth[3];
        add_args(forth, buf[0], buf[1], buf[2]);
        hal_kernel_arg_t back[3];
        add_args(back, buf[2], buf[1], buf[0]);
        for (int r = 0; r < NEFF_ROUNDS && l->status == HAL_OK; r++) {
            l->status = hal_kernel_launch(s, l->kernel, &ONE, forth, 3);
            if (l->status == HAL_OK)
                l->status = hal_kernel_launch(s, l->kernel, &ONE, back, 3);
        }
        static _Thread_local float host[N];
        if (l->status == HAL_OK)
            l->status = cts_copy_sync(host, buf[0], BYTES, s);
        if (l->status == HAL_OK)
            l->result = check_sum(host, 2.0f * NEFF_ROUNDS);
    }
    for (int i = 0; i < 3; i++)
        if (buf[i])
            hal_mem_free(buf[i]);
    hal_stream_destroy(s);
    return NULL;
}

/* Threads launching one kernel on streams of their own at once. */
int cts_program_neff_concurrent_launches(cts_ctx_t *ctx)
{
    SKIP_UNLESS_NEFF(ctx);
    LOAD_NEFF(ctx, p, k, "add");
    neff_launcher_t l[NEFF_LAUNCHERS];
    pthread_t t[NEFF_LAUNCHERS];
    for (int i = 0; i < NEFF_LAUNCHERS; i++) {
        l[i] = (neff_launcher_t){ .ctx = ctx, .kernel = k };
        CTS_CHECK(pthread_create(&t[i], NULL, neff_launch_thread, &l[i]) == 0);
    }
    for (int i = 0; i < NEFF_LAUNCHERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NEFF_LAUNCHERS; i++) {
        CTS_CHECK_OK(l[i].status);
        CTS_CHECKF(l[i].result == CTS_PASS, "thread %d computed a wrong sum", i);
    }
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* In a forked child the parent's program and stream are refused (not run or hung on); the
 * parent's program keeps working. (The child does not open the backend again: the Neuron
 * runtime is initialised once per process.) */
int cts_program_neff_fork_safety(cts_ctx_t *ctx)
{
    SKIP_UNLESS_NEFF(ctx);
    LOAD_NEFF(ctx, p, k, "add");
    float *buf[3];
    hal_stream_t s = default_stream(ctx);
    if (alloc_inputs(ctx, s, buf) != CTS_PASS)
        return CTS_FAIL;
    hal_kernel_arg_t args[3];
    add_args(args, buf[0], buf[1], buf[2]);
    CTS_CHECK_OK(hal_stream_synchronize(s));
    fflush(NULL);
    pid_t pid = fork();
    CTS_CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60); /* a hang is a failure, not a stuck suite */
        hal_status_t st = hal_kernel_launch(s, k, &ONE, args, 3);
        bool names_fork = strstr(hal_last_error_message(), "fork") != NULL;
        hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
        _exit(st != HAL_ERROR_INVALID_HANDLE                              ? 1
              : !names_fork                                               ? 2
              : hal_stream_synchronize(s) != HAL_ERROR_INVALID_HANDLE     ? 3
              : hal_kernel_get_info(k, &info) != HAL_ERROR_INVALID_HANDLE ? 4
                                                                          : 0);
    }
    int wstatus = 0;
    CTS_CHECK(waitpid(pid, &wstatus, 0) == pid);
    CTS_CHECKF(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
               "the forked child %s %d (1: launch not refused, 2: no fork() in the message, "
               "3: synchronize, 4: kernel info)",
               WIFEXITED(wstatus) ? "exited with" : "was killed by signal",
               WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 3));
    if (expect_sum_and_free(buf[2], s, 1.0f, buf) != CTS_PASS)
        return CTS_FAIL;
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}
