/* SPDX-License-Identifier: Apache-2.0 */
/* StableHLO modules loaded in place of a NEFF: nrt_load compiles them with XLA's CPU backend in
 * the executor process, nrt_get_model_tensor_info lists input0.. / output0.. with their types
 * and shapes, nrt_execute runs them on the tensors of the sets. Also the executor's failures
 * (no interpreter, no jaxlib, death), threads, fork and nrt_close. Emulator-only (a real libnrt
 * runs NEFF); skipped where python3 cannot import jax. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

static nrt_api_t api;

static const char add_module[] =
    "module @m {\n"
    "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static const char two_results_module[] =
    "module @two {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xf32>) {\n"
    "    %0 = stablehlo.multiply %arg0, %arg0 : tensor<2x3xf32>\n"
    "    %1 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
    "    return %0, %1 : tensor<2x3xf32>, tensor<3x2xf32>\n"
    "  }\n"
    "}\n";

static const char compare_module[] =
    "module @cmp {\n"
    "  func.func public @main(%arg0: tensor<5xi32>, %arg1: tensor<5xi32>, %arg2: tensor<5xi1>)\n"
    "      -> (tensor<5xi1>, tensor<5xi32>, tensor<5xi1>) {\n"
    "    %0 = stablehlo.compare GT, %arg0, %arg1, SIGNED\n"
    "        : (tensor<5xi32>, tensor<5xi32>) -> tensor<5xi1>\n"
    "    %1 = stablehlo.select %0, %arg0, %arg1 : tensor<5xi1>, tensor<5xi32>\n"
    "    %2 = stablehlo.not %arg2 : tensor<5xi1>\n"
    "    return %0, %1, %2 : tensor<5xi1>, tensor<5xi32>, tensor<5xi1>\n"
    "  }\n"
    "}\n";

static const char reduce_module[] =
    "// row sums\n"
    "#loc = loc(unknown)\n"
    "module @sum {\n"
    "  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2xf32> {\n"
    "    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
    "    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1]\n"
    "        : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n"
    "    return %0 : tensor<2xf32>\n"
    "  }\n"
    "}\n";

/* Every element type, returned as given (f32 as a scalar). */
static const char types_module[] =
    "module @types {\n"
    "  func.func public @main(%a: tensor<2xf16>, %b: tensor<2xbf16>, %c: tensor<2xi8>,\n"
    "      %d: tensor<2xui8>, %e: tensor<2xi16>, %f: tensor<2xui16>, %g: tensor<2xui32>,\n"
    "      %h: tensor<2xi64>, %i: tensor<2xui64>, %j: tensor<f32>)\n"
    "      -> (tensor<2xf16>, tensor<2xbf16>, tensor<2xi8>, tensor<2xui8>, tensor<2xi16>,\n"
    "          tensor<2xui16>, tensor<2xui32>, tensor<2xi64>, tensor<2xui64>, tensor<f32>) {\n"
    "    return %a, %b, %c, %d, %e, %f, %g, %h, %i, %j : tensor<2xf16>, tensor<2xbf16>,\n"
    "        tensor<2xi8>, tensor<2xui8>, tensor<2xi16>, tensor<2xui16>, tensor<2xui32>,\n"
    "        tensor<2xi64>, tensor<2xui64>, tensor<f32>\n"
    "  }\n"
    "}\n";

/* module @sub { main(%arg0: tensor<3xi32>, %arg1: tensor<3xi32>) -> tensor<3xi32>: arg0 - arg1 }
 * as MLIR bytecode (jaxlib 0.10.2's write_bytecode). */
static const char sub_bytecode[] = "\x4d\x4c\xef\x52\x0d\x4d\x4c\x49\x52\x32\x33\x2e\x30\x2e\x30"
                                   "\x67\x69\x74\x00\x01\x1f\x07\x01\x05"
                                   "\x09\x09\x01\x03\x0f\x03\x05\x07\x13\x05\x03\x17\x03\x29\x17"
                                   "\x07\x01\x17\x0b\x0b\x13\x0b\x0b\x0b"
                                   "\x13\x13\x13\x13\x13\x01\x07\x13\x1b\x0f\x02\x5f\x05\x0d\x05"
                                   "\x0f\x17\x01\x03\x03\x0d\x03\x05\x11"
                                   "\x05\x13\x17\x01\x05\x07\x17\x01\x05\x35\x17\x01\x05\x61\x17"
                                   "\x01\x07\x15\x17\x01\x09\x0b\x1b\x03"
                                   "\x0d\x05\x05\x05\x01\x01\x03\x01\x01\x02\x02\x04\x51\x05\x01"
                                   "\x50\x05\x01\x07\x04\x41\x03\x01\x05"
                                   "\x03\x50\x0d\x03\x07\x04\x2d\x03\x07\x0b\x05\x03\x0f\x03\x11"
                                   "\x00\x07\x06\x13\x03\x01\x05\x01\x03"
                                   "\x05\x04\x15\x03\x05\x06\x03\x01\x05\x01\x00\x97\x15\x0f\x0b"
                                   "\x09\x05\x13\x0f\x0f\x15\x0b\x11\x62"
                                   "\x75\x69\x6c\x74\x69\x6e\x00\x66\x75\x6e\x63\x00\x73\x74\x61"
                                   "\x62\x6c\x65\x68\x6c\x6f\x00\x6d\x6f"
                                   "\x64\x75\x6c\x65\x00\x72\x65\x74\x75\x72\x6e\x00\x73\x75\x62"
                                   "\x74\x72\x61\x63\x74\x00\x2d\x00\x73"
                                   "\x75\x62\x00\x6d\x61\x69\x6e\x00\x70\x75\x62\x6c\x69\x63\x00"
                                   "\x08\x17\x05\x05\x07\x01\x0d\x01\x07"
                                   "\x01\x01\x09\x17";

/* Whether the executor can run here; a missing jax skips the test (reason in skip). */
static bool executor_ready(char *skip, size_t size)
{
    char why[512] = "";
    if (api.emu_stablehlo_status(why, sizeof(why)) == NRT_SUCCESS)
        return true;
    snprintf(skip, size, "the StableHLO executor cannot run: %s", why);
    return false;
}

/* Opens and initialises the emulator on core 0; another libnrt, or no jax, skips the test. */
#define OPEN_EMULATOR()                                                              \
    do {                                                                             \
        CTEST_CHECK(nrt_test_open(&api));                                            \
        if (!nrt_test_is_emulator(&api)) {                                           \
            nrt_test_close(&api);                                                    \
            CTEST_SKIP("StableHLO in place of a NEFF is the emulator's");            \
        }                                                                            \
        CTEST_CHECK(api.emu_stablehlo_status != NULL);                               \
        setenv("NEURON_RT_VISIBLE_CORES", "0", 1);                                   \
        CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);                             \
        char skip_[512];                                                             \
        if (!executor_ready(skip_, sizeof(skip_))) {                                 \
            nrt_test_close(&api);                                                    \
            if (strstr(skip_, "cannot import") != NULL)                              \
                CTEST_SKIP("%.200s", skip_);                                         \
            fprintf(stderr, "%s\n", skip_);                                          \
            CTEST_CHECK(!"the StableHLO executor starts where jax can be imported"); \
        }                                                                            \
    } while (0)

/* nrt_load of an image on core 0; the model, or NULL with *rc. */
static nrt_model_t *load_bytes(const void *bytes, size_t size, NRT_STATUS *rc)
{
    nrt_model_t *m = NULL;
    *rc = api.load(bytes, size, 0, -1, &m);
    return *rc == NRT_SUCCESS ? m : NULL;
}

/* nrt_load of MLIR text. */
static nrt_model_t *load_text(const char *text, NRT_STATUS *rc)
{
    return load_bytes(text, strlen(text), rc);
}

/* A device tensor on core 0 holding size bytes of data (zeros if data is NULL). */
static nrt_tensor_t *tensor(size_t size, const void *data)
{
    nrt_tensor_t *t = NULL;
    if (api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, size, "t", &t) != NRT_SUCCESS)
        return NULL;
    if (data != NULL && api.tensor_write(t, data, 0, size) != NRT_SUCCESS)
        api.tensor_free(&t);
    return t;
}

/* Executes m with inputs in[0..nin) as input0.. and outputs out[0..nout) as output0... */
static NRT_STATUS run(nrt_model_t *m, nrt_tensor_t **in, int nin, nrt_tensor_t **out, int nout)
{
    nrt_tensor_set_t *ins = NULL, *outs = NULL;
    if (api.allocate_tensor_set(&ins) != NRT_SUCCESS ||
        api.allocate_tensor_set(&outs) != NRT_SUCCESS)
        return NRT_RESOURCE;
    char name[32];
    for (int i = 0; i < nin; i++) {
        snprintf(name, sizeof(name), "input%d", i);
        api.add_tensor_to_tensor_set(ins, name, in[i]);
    }
    for (int i = 0; i < nout; i++) {
        snprintf(name, sizeof(name), "output%d", i);
        api.add_tensor_to_tensor_set(outs, name, out[i]);
    }
    NRT_STATUS rc = api.execute(m, ins, outs);
    api.destroy_tensor_set(&ins);
    api.destroy_tensor_set(&outs);
    return rc;
}

/* The executor's pid, from nrt_emu_stablehlo_status (0 if it does not run). */
static long executor_pid(void)
{
    char why[512] = "";
    if (api.emu_stablehlo_status(why, sizeof(why)) != NRT_SUCCESS)
        return 0;
    const char *p = strstr(why, "pid ");
    return p != NULL ? strtol(p + 4, NULL, 10) : 0;
}

/* Threads of process pid still listed in /proc (0 once it is gone). */
static int threads_of(long pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

/* Waits until process pid has ended: gone, or a zombie whose threads have all exited (so its
 * descriptors are closed); false after 10 s. */
static bool wait_ended(long pid)
{
    for (int i = 0; i < 1000; i++) {
        char path[64], stat[256] = "";
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return true;
        size_t n = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *state = strrchr(stat, ')');
        if (state != NULL && (state[2] == 'Z' || state[2] == 'X') && threads_of(pid) <= 1)
            return true;
        usleep(10000);
    }
    return false;
}

/* f32[4] + f32[4]: tensor info (names, usage, sizes, dtype, shape), repeated executions. */
CTEST(nrt_stablehlo, add_lists_its_tensors_and_runs)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(add_module, &rc);
    CTEST_CHECK(rc == NRT_SUCCESS && m != NULL);
    nrt_tensor_info_array_t *info = NULL;
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_SUCCESS);
    CTEST_CHECK(info->tensor_count == 3);
    static const char *const names[3] = { "input0", "input1", "output0" };
    for (int i = 0; i < 3; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        CTEST_CHECK(strcmp(t->name, names[i]) == 0);
        CTEST_CHECK(t->usage == (i < 2 ? NRT_TENSOR_USAGE_INPUT : NRT_TENSOR_USAGE_OUTPUT));
        CTEST_CHECK(t->size == 16 && t->dtype == NRT_DTYPE_FLOAT32);
        CTEST_CHECK(t->ndim == 1 && t->shape != NULL && t->shape[0] == 4);
    }
    CTEST_CHECK(api.free_model_tensor_info(info) == NRT_SUCCESS);
    /* Slices of one allocation, as the backend binds them. */
    nrt_tensor_t *whole = tensor(48, NULL), *t[3] = { NULL };
    CTEST_CHECK(whole != NULL);
    for (int i = 0; i < 3; i++)
        CTEST_CHECK(api.tensor_allocate_slice(whole, 16u * (unsigned)i, 16, names[i], &t[i]) ==
                    NRT_SUCCESS);
    float a[4] = { 1, 2, 3, 4 }, b[4] = { 10, 20, 30, 40.5f }, out[4];
    CTEST_CHECK(api.tensor_write(t[0], a, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(t[1], b, 0, 16) == NRT_SUCCESS);
    for (int round = 0; round < 3; round++) { /* compiled once, executed again */
        CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
        CTEST_CHECK(api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS);
        for (int i = 0; i < 4; i++)
            CTEST_CHECK(out[i] == a[i] + b[i]);
        a[round] = -a[round];
        CTEST_CHECK(api.tensor_write(t[0], a, 0, 16) == NRT_SUCCESS);
    }
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    api.tensor_free(&whole);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    CTEST_CHECK(api.unload(m) == NRT_INVALID_HANDLE);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Two results of different shapes; a reduction after comment and #loc lines. */
CTEST(nrt_stablehlo, two_results_and_a_reduction)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(two_results_module, &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_info_array_t *info = NULL;
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_SUCCESS);
    CTEST_CHECK(info->tensor_count == 3);
    const nrt_tensor_info_t *o1 = &info->tensor_array[2];
    CTEST_CHECK(strcmp(info->tensor_array[1].name, "output0") == 0);
    CTEST_CHECK(strcmp(o1->name, "output1") == 0 && o1->usage == NRT_TENSOR_USAGE_OUTPUT);
    CTEST_CHECK(o1->ndim == 2 && o1->shape[0] == 3 && o1->shape[1] == 2 && o1->size == 24);
    CTEST_CHECK(info->tensor_array[0].shape[0] == 2 && info->tensor_array[0].shape[1] == 3);
    api.free_model_tensor_info(info);
    float x[6] = { 1, 2, 3, 4, 5, 6 }, sq[6], tr[6];
    nrt_tensor_t *in = tensor(24, x), *out[2] = { tensor(24, NULL), tensor(24, NULL) };
    CTEST_CHECK(run(m, &in, 1, out, 2) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(out[0], sq, 0, 24) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(out[1], tr, 0, 24) == NRT_SUCCESS);
    static const float want_tr[6] = { 1, 4, 2, 5, 3, 6 };
    for (int i = 0; i < 6; i++)
        CTEST_CHECK(sq[i] == x[i] * x[i] && tr[i] == want_tr[i]);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);

    /* Comments and #loc lines before the module; a reduction to f32[2]. */
    m = load_text(reduce_module, &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_t *sums = tensor(8, NULL);
    CTEST_CHECK(run(m, &in, 1, &sums, 1) == NRT_SUCCESS);
    float s[2];
    CTEST_CHECK(api.tensor_read(sums, s, 0, 8) == NRT_SUCCESS);
    CTEST_CHECK(s[0] == 6 && s[1] == 15);
    api.tensor_free(&sums);
    api.tensor_free(&in);
    api.tensor_free(&out[0]);
    api.tensor_free(&out[1]);
    /* Left loaded: nrt_close frees it. */
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* i32 and i1 (bool, one byte) tensors, in and out; a second execution reads the inputs anew
 * (the executor converts bool inputs for each one). */
CTEST(nrt_stablehlo, bool_and_i32)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(compare_module, &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_info_array_t *info = NULL;
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_SUCCESS);
    CTEST_CHECK(info->tensor_count == 6);
    static const nrt_dtype_t dtypes[6] = { NRT_DTYPE_INT32, NRT_DTYPE_INT32, NRT_DTYPE_UINT8,
                                           NRT_DTYPE_UINT8, NRT_DTYPE_INT32, NRT_DTYPE_UINT8 };
    static const size_t sizes[6] = { 20, 20, 5, 5, 20, 5 };
    for (int i = 0; i < 6; i++)
        CTEST_CHECK(info->tensor_array[i].dtype == dtypes[i] &&
                    info->tensor_array[i].size == sizes[i]);
    api.free_model_tensor_info(info);
    int32_t a[5] = { 1, -7, 3, 100000, 0 }, b[5] = { 2, -8, 3, -100000, 0 }, max[5];
    uint8_t p[5] = { 1, 0, 2, 1, 0 }, gt[5], notp[5]; /* any nonzero byte is true */
    nrt_tensor_t *in[3] = { tensor(20, a), tensor(20, b), tensor(5, p) };
    nrt_tensor_t *out[3] = { tensor(5, NULL), tensor(20, NULL), tensor(5, NULL) };
    for (int round = 0; round < 2; round++) {
        CTEST_CHECK(run(m, in, 3, out, 3) == NRT_SUCCESS);
        CTEST_CHECK(api.tensor_read(out[0], gt, 0, 5) == NRT_SUCCESS);
        CTEST_CHECK(api.tensor_read(out[1], max, 0, 20) == NRT_SUCCESS);
        CTEST_CHECK(api.tensor_read(out[2], notp, 0, 5) == NRT_SUCCESS);
        for (int i = 0; i < 5; i++) {
            CTEST_CHECK(gt[i] == (a[i] > b[i] ? 1 : 0));
            CTEST_CHECK(max[i] == (a[i] > b[i] ? a[i] : b[i]));
            CTEST_CHECK(notp[i] == (p[i] ? 0 : 1));
        }
        for (int i = 0; i < 5; i++) {
            a[i] = -a[i];
            p[i] = p[i] ? 0 : 3;
        }
        CTEST_CHECK(api.tensor_write(in[0], a, 0, 20) == NRT_SUCCESS);
        CTEST_CHECK(api.tensor_write(in[2], p, 0, 5) == NRT_SUCCESS);
    }
    for (int i = 0; i < 3; i++) {
        api.tensor_free(&in[i]);
        api.tensor_free(&out[i]);
    }
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* A model run again after a larger one grew the region shared with the executor (which maps
 * it anew) reads its new inputs and writes its outputs where they now are. */
CTEST(nrt_stablehlo, runs_again_after_the_region_grew)
{
    OPEN_EMULATOR();
    enum { BIG = 1 << 19 }; /* f32 elements: three tensors of 2 MiB outgrow the first region */
    static const char big_module[] =
        "module @big {\n"
        "  func.func public @main(%arg0: tensor<524288xf32>, %arg1: tensor<524288xf32>)\n"
        "      -> tensor<524288xf32> {\n"
        "    %0 = stablehlo.subtract %arg0, %arg1 : tensor<524288xf32>\n"
        "    return %0 : tensor<524288xf32>\n"
        "  }\n"
        "}\n";
    NRT_STATUS rc;
    nrt_model_t *small = load_text(add_module, &rc), *big = load_text(big_module, &rc);
    CTEST_CHECK(small != NULL && big != NULL);
    float a[4] = { 1, 2, 3, 4 }, b[4] = { 10, 20, 30, 40 }, out[4];
    nrt_tensor_t *t[3] = { tensor(16, a), tensor(16, b), tensor(16, NULL) };
    float *x = calloc(BIG, sizeof(float)), *y = calloc(BIG, sizeof(float));
    CTEST_CHECK(x != NULL && y != NULL);
    for (int i = 0; i < BIG; i++) {
        x[i] = (float)i;
        y[i] = (float)(i % 7);
    }
    nrt_tensor_t *bt[3] = { tensor(BIG * 4u, x), tensor(BIG * 4u, y), tensor(BIG * 4u, NULL) };
    CTEST_CHECK(bt[0] != NULL && bt[1] != NULL && bt[2] != NULL);
    CTEST_CHECK(run(small, t, 2, &t[2], 1) == NRT_SUCCESS);
    CTEST_CHECK(run(big, bt, 2, &bt[2], 1) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(bt[2], x, 0, BIG * 4u) == NRT_SUCCESS);
    bool big_right = true;
    for (int i = 0; i < BIG; i++)
        big_right = big_right && x[i] == (float)i - (float)(i % 7);
    CTEST_CHECK(big_right);
    a[0] = 100;
    CTEST_CHECK(api.tensor_write(t[0], a, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(run(small, t, 2, &t[2], 1) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS);
    for (int i = 0; i < 4; i++)
        CTEST_CHECK(out[i] == a[i] + b[i]);
    free(x);
    free(y);
    for (int i = 0; i < 3; i++) {
        api.tensor_free(&t[i]);
        api.tensor_free(&bt[i]);
    }
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Every supported element type maps to its nrt_dtype_t and travels bit for bit; MLIR
 * bytecode loads like text. */
CTEST(nrt_stablehlo, every_element_type_and_bytecode)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(types_module, &rc);
    CTEST_CHECK(m != NULL);
    static const nrt_dtype_t dtypes[10] = {
        NRT_DTYPE_FLOAT16, NRT_DTYPE_BFLOAT16, NRT_DTYPE_INT8,  NRT_DTYPE_UINT8,  NRT_DTYPE_INT16,
        NRT_DTYPE_UINT16,  NRT_DTYPE_UINT32,   NRT_DTYPE_INT64, NRT_DTYPE_UINT64, NRT_DTYPE_FLOAT32,
    };
    static const size_t sizes[10] = { 4, 4, 2, 2, 4, 4, 8, 16, 16, 4 };
    nrt_tensor_info_array_t *info = NULL;
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_SUCCESS);
    CTEST_CHECK(info->tensor_count == 20);
    nrt_tensor_t *in[10], *out[10];
    unsigned char data[10][16], got[16];
    for (int i = 0; i < 20; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        CTEST_CHECK(t->dtype == dtypes[i % 10] && t->size == sizes[i % 10]);
        CTEST_CHECK(t->ndim == (i % 10 == 9 ? 0u : 1u));
    }
    api.free_model_tensor_info(info);
    for (int i = 0; i < 10; i++) {
        nrt_test_pattern(data[i], sizes[i], (unsigned)i + 1);
        if (dtypes[i] == NRT_DTYPE_FLOAT16 || dtypes[i] == NRT_DTYPE_BFLOAT16)
            for (size_t k = 1; k < sizes[i]; k += 2)
                data[i][k] &= 0x3f; /* finite numbers, bit for bit */
        if (dtypes[i] == NRT_DTYPE_FLOAT32)
            memcpy(data[i], &(float){ -2.75f }, 4);
        in[i] = tensor(sizes[i], data[i]);
        out[i] = tensor(sizes[i], NULL);
    }
    CTEST_CHECK(run(m, in, 10, out, 10) == NRT_SUCCESS);
    for (int i = 0; i < 10; i++) {
        CTEST_CHECK(api.tensor_read(out[i], got, 0, sizes[i]) == NRT_SUCCESS);
        CTEST_CHECK(memcmp(got, data[i], sizes[i]) == 0);
        api.tensor_free(&in[i]);
        api.tensor_free(&out[i]);
    }
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);

    /* MLIR bytecode: i32[3] subtraction. */
    m = load_bytes(sub_bytecode, sizeof(sub_bytecode) - 1, &rc);
    CTEST_CHECK(rc == NRT_SUCCESS && m != NULL);
    int32_t a[3] = { 5, -1, 1 << 30 }, b[3] = { 7, -1, -(1 << 30) }, d[3];
    nrt_tensor_t *ab[2] = { tensor(12, a), tensor(12, b) }, *diff = tensor(12, NULL);
    CTEST_CHECK(run(m, ab, 2, &diff, 1) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(diff, d, 0, 12) == NRT_SUCCESS);
    for (int i = 0; i < 3; i++)
        CTEST_CHECK(d[i] == (int32_t)((uint32_t)a[i] - (uint32_t)b[i]));
    api.tensor_free(&ab[0]);
    api.tensor_free(&ab[1]);
    api.tensor_free(&diff);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Modules that do not parse, have no main, or have types Neuron does not take: NRT_INVALID
 * with the reason in the log. */
CTEST(nrt_stablehlo, bad_modules_are_refused_at_load)
{
    OPEN_EMULATOR();
    static const struct {
        const char *text, *says;
    } bad[] = {
        { "module { func.func public @main( }", "does not load" },
        { "module { func.func public @other() { return } }", "no function @main" },
        { "module { func.func public @main(%a: tensor<2xf64>) -> tensor<2xf64> {\n"
          "  return %a : tensor<2xf64> } }",
          "f64" },
        { "module { func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
          "  return %a : tensor<?xf32> } }",
          "dynamic" },
        { "module { func.func public @main(%a: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {"
          "\n  return %a : tensor<2xcomplex<f32>> } }",
          "complex<f32>" },
        { "module { func.func public @main(%a: tensor<0xf32>) -> tensor<0xf32> {\n"
          "  return %a : tensor<0xf32> } }",
          "no elements" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        NRT_STATUS rc;
        nrt_test_stderr_begin();
        nrt_model_t *m = load_text(bad[i].text, &rc);
        const char *log = nrt_test_stderr_end();
        CTEST_CHECK(m == NULL && rc == NRT_INVALID);
        CTEST_CHECK(strstr(log, "nrt_load") != NULL && strstr(log, bad[i].says) != NULL);
    }
    /* Not MLIR at all: still not a NEFF this emulator runs. */
    NRT_STATUS rc;
    CTEST_CHECK(load_text("NEFF binary", &rc) == NULL && rc == NRT_UNSUPPORTED_NEFF_VERSION);
    /* The executor survives its refusals. */
    nrt_model_t *m = load_text(add_module, &rc);
    CTEST_CHECK(m != NULL);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Binding is by name and size, as for the container. */
CTEST(nrt_stablehlo, tensors_bind_by_name_and_size)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(add_module, &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_t *t[3] = { tensor(16, NULL), tensor(16, NULL), tensor(32, NULL) };
    CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_INVALID); /* output0 is 32 bytes, not 16 */
    CTEST_CHECK(run(m, t, 1, &t[2], 1) == NRT_INVALID); /* input1 is missing */
    api.tensor_free(&t[2]);
    t[2] = tensor(16, NULL);
    CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

typedef struct worker {
    int index;
    int failures;
} worker_t;

/* Loads its own copy of the add module and runs it with numbers of its own. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    NRT_STATUS rc;
    nrt_model_t *m = load_text(add_module, &rc);
    nrt_tensor_t *t[3] = { tensor(16, NULL), tensor(16, NULL), tensor(16, NULL) };
    if (m == NULL || t[0] == NULL || t[1] == NULL || t[2] == NULL)
        w->failures++;
    for (int round = 0; m != NULL && round < 20; round++) {
        float a[4], b[4], out[4];
        for (int i = 0; i < 4; i++) {
            a[i] = (float)(w->index * 1000 + round);
            b[i] = (float)i;
        }
        api.tensor_write(t[0], a, 0, 16);
        api.tensor_write(t[1], b, 0, 16);
        if (run(m, t, 2, &t[2], 1) != NRT_SUCCESS ||
            api.tensor_read(t[2], out, 0, 16) != NRT_SUCCESS) {
            w->failures++;
            continue;
        }
        for (int i = 0; i < 4; i++)
            w->failures += out[i] != a[i] + b[i];
    }
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    if (m != NULL && api.unload(m) != NRT_SUCCESS)
        w->failures++;
    return NULL;
}

/* Threads load and execute models of their own at the same time. */
CTEST(nrt_stablehlo, threads_load_and_execute_at_once)
{
    OPEN_EMULATOR();
    enum { N = 4 };
    pthread_t threads[N];
    worker_t workers[N];
    for (int i = 0; i < N; i++) {
        workers[i] = (worker_t){ .index = i };
        CTEST_CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
    }
    int failures = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(threads[i], NULL);
        failures += workers[i].failures;
    }
    CTEST_CHECK(failures == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* No interpreter, no script, no jaxlib: NRT_FAILURE with the reason, at once. */
CTEST(nrt_stablehlo, no_executor_is_an_error_not_a_hang)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("StableHLO in place of a NEFF is the emulator's");
    }
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    char why[512];
    /* No interpreter. */
    setenv("NEURON_EMU_PYTHON", "/nonexistent/python3", 1);
    time_t start = time(NULL);
    CTEST_CHECK(api.emu_stablehlo_status(why, sizeof(why)) == NRT_FAILURE);
    CTEST_CHECK(strstr(why, "NEURON_EMU_PYTHON=/nonexistent/python3") != NULL);
    NRT_STATUS rc;
    nrt_test_stderr_begin();
    CTEST_CHECK(load_text(add_module, &rc) == NULL);
    const char *log = nrt_test_stderr_end();
    CTEST_CHECK(rc == NRT_FAILURE);
    CTEST_CHECK(strstr(log, "nrt_load") != NULL && strstr(log, "NEURON_EMU_PYTHON") != NULL);
    CTEST_CHECK(time(NULL) - start < 10);
    unsetenv("NEURON_EMU_PYTHON");
    /* No executor script. */
    setenv("NEURON_EMU_EXECUTOR", "/nonexistent/stablehlo_executor.py", 1);
    CTEST_CHECK(api.emu_stablehlo_status(why, sizeof(why)) == NRT_FAILURE);
    CTEST_CHECK(strstr(why, "NEURON_EMU_EXECUTOR=/nonexistent") != NULL);
    unsetenv("NEURON_EMU_EXECUTOR");
    /* A python3 that cannot import jaxlib: a package of that name that fails to import. */
    const char *tmp = getenv("TEST_TMPDIR");
    char dir[512], file[600];
    snprintf(dir, sizeof(dir), "%s/fake-site", tmp != NULL ? tmp : "/tmp");
    snprintf(file, sizeof(file), "%s/jaxlib", dir);
    mkdir(dir, 0700);
    mkdir(file, 0700);
    snprintf(file, sizeof(file), "%s/jaxlib/__init__.py", dir);
    FILE *f = fopen(file, "w");
    CTEST_CHECK(f != NULL);
    fputs("raise ImportError('this jaxlib is a test double', name='jaxlib')\n", f);
    fclose(f);
    const char *old = getenv("PYTHONPATH");
    char *saved = old != NULL ? strdup(old) : NULL;
    setenv("PYTHONPATH", dir, 1);
    NRT_STATUS st = api.emu_stablehlo_status(why, sizeof(why));
    if (saved != NULL)
        setenv("PYTHONPATH", saved, 1);
    else
        unsetenv("PYTHONPATH");
    free(saved);
    CTEST_CHECK(st == NRT_FAILURE);
    CTEST_CHECK(strstr(why, "cannot import jaxlib") != NULL);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* An executor killed while idle is replaced; one that dies during a request fails it. */
CTEST(nrt_stablehlo, an_executor_that_dies_fails_the_call_and_is_replaced)
{
    OPEN_EMULATOR();
    api.close(); /* again with warnings logged */
    setenv("NEURON_RT_LOG_LEVEL", "WARN", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    NRT_STATUS rc;
    nrt_model_t *m = load_text(add_module, &rc);
    CTEST_CHECK(m != NULL);
    float a[4] = { 1, 2, 3, 4 }, out[4];
    nrt_tensor_t *t[3] = { tensor(16, a), tensor(16, a), tensor(16, NULL) };
    CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
    /* Killed while idle: the next execution starts a new executor and compiles there again
     * (or, if the executor's end was not visible yet, fails saying so, and the one after that
     * does). */
    long pid = executor_pid();
    CTEST_CHECK(pid > 0 && kill((pid_t)pid, SIGKILL) == 0 && wait_ended(pid));
    nrt_test_stderr_begin();
    rc = run(m, t, 2, &t[2], 1);
    const char *log = nrt_test_stderr_end();
    CTEST_CHECK(strstr(log, "killed by signal 9") != NULL);
    CTEST_CHECK(rc == NRT_SUCCESS || (rc == NRT_FAILURE && strstr(log, "while executing") != NULL));
    if (rc != NRT_SUCCESS)
        CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS && out[3] == 8);
    long second = executor_pid();
    CTEST_CHECK(second > 0 && second != pid);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    api.close();

    /* Dying during a request: an executor that says READY, then exits at the first request. */
    const char *tmp = getenv("TEST_TMPDIR");
    char script[512];
    snprintf(script, sizeof(script), "%s/dying_executor.py", tmp != NULL ? tmp : "/tmp");
    FILE *f = fopen(script, "w");
    CTEST_CHECK(f != NULL);
    fputs("import os, struct\n"
          "os.write(3, struct.pack('=IIQQQ', 0x3158454E, 19, 0, 0, 4) + b'test')\n"
          "os.read(3, 32)\n"
          "os._exit(3)\n",
          f);
    fclose(f);
    setenv("NEURON_EMU_EXECUTOR", script, 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_test_stderr_begin();
    CTEST_CHECK(load_text(add_module, &rc) == NULL);
    log = nrt_test_stderr_end();
    unsetenv("NEURON_EMU_EXECUTOR");
    CTEST_CHECK(rc == NRT_FAILURE);
    CTEST_CHECK(strstr(log, "exited with status 3 while compiling a module") != NULL);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* The child of the fork test: its own runtime on core 1, its own executor. */
static int child_main(void *arg)
{
    long parent_executor = *(const long *)arg;
    setenv("NEURON_RT_VISIBLE_CORES", "1", 1);
    if (nrt_test_init(&api) != NRT_SUCCESS)
        return 10;
    long mine = executor_pid();
    if (mine <= 0 || mine == parent_executor)
        return 11;
    NRT_STATUS rc;
    nrt_model_t *m = NULL;
    if (api.load(add_module, strlen(add_module), 0, -1, &m) != NRT_SUCCESS)
        return 12;
    float a[4] = { 1, 2, 3, 4 }, out[4] = { 0 };
    nrt_tensor_t *t[3] = { tensor(16, a), tensor(16, a), tensor(16, NULL) };
    rc = run(m, t, 2, &t[2], 1);
    if (rc != NRT_SUCCESS || api.tensor_read(t[2], out, 0, 16) != NRT_SUCCESS || out[2] != 6)
        return 13;
    api.close(); /* stops the child's executor */
    return wait_ended(mine) ? 0 : 14;
}

/* A forked child uses an executor of its own; the parent's keeps working; nrt_close stops
 * it. */
CTEST(nrt_stablehlo, a_forked_child_starts_its_own_executor)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(add_module, &rc);
    CTEST_CHECK(m != NULL);
    float a[4] = { 1, 2, 3, 4 }, out[4];
    nrt_tensor_t *t[3] = { tensor(16, a), tensor(16, a), tensor(16, NULL) };
    CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
    long pid = executor_pid();
    CTEST_CHECK(pid > 0);
    CTEST_CHECK(nrt_test_in_child(child_main, &pid) == 0);
    /* The parent's executor and channel are untouched. */
    CTEST_CHECK(executor_pid() == pid);
    a[0] = 100;
    CTEST_CHECK(api.tensor_write(t[0], a, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(run(m, t, 2, &t[2], 1) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS && out[0] == 101);
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    /* nrt_close stops the executor (and reaps it). */
    api.close();
    CTEST_CHECK(kill((pid_t)pid, 0) != 0 && errno == ESRCH);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static const char multiply_module[] =
    "module @mul {\n"
    "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %0 = stablehlo.multiply %arg0, %arg1 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static const char subtract_module[] =
    "module @sub {\n"
    "  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %0 = stablehlo.subtract %arg0, %arg1 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

/* The entries of the executable cache in dir (<2 hex digits>/<key>.xla): how many, the paths of
 * up to max of them in paths. */
static int cache_entries(const char *dir, char (*paths)[1024], int max)
{
    int n = 0;
    DIR *top = opendir(dir);
    for (struct dirent *e; top != NULL && (e = readdir(top)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char sub[1024];
        int k = snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        if (k < 0 || (size_t)k >= sizeof(sub))
            continue;
        DIR *d = opendir(sub);
        for (struct dirent *f; d != NULL && (f = readdir(d)) != NULL;) {
            size_t len = strlen(f->d_name);
            if (len < 4 || strcmp(f->d_name + len - 4, ".xla") != 0)
                continue;
            if (n < max && snprintf(paths[n], sizeof(paths[n]), "%s/%s", sub, f->d_name) >=
                               (int)sizeof(paths[n]))
                continue;
            n++;
        }
        if (d != NULL)
            closedir(d);
    }
    if (top != NULL)
        closedir(top);
    return n;
}

/* Copies the file src to dst (replacing it); false on any failure. */
static bool copy_file(const char *src, const char *dst)
{
    static char buf[1 << 20];
    FILE *in = fopen(src, "rb");
    if (in == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof(buf), in);
    fclose(in);
    FILE *out = fopen(dst, "wb");
    bool ok = out != NULL && fwrite(buf, 1, n, out) == n;
    if (out != NULL)
        ok = fclose(out) == 0 && ok;
    return ok && n < sizeof(buf);
}

/* Loads text on core 0 and runs it on a = {1, 2, 3, 4}, b = {10, 20, 30, 40}; out gets the result.
 * False if any step fails. */
static bool load_and_run(const char *text, float out[4])
{
    NRT_STATUS rc;
    nrt_model_t *m = load_text(text, &rc);
    if (m == NULL)
        return false;
    float a[4] = { 1, 2, 3, 4 }, b[4] = { 10, 20, 30, 40 };
    nrt_tensor_t *t[3] = { tensor(16, a), tensor(16, b), tensor(16, NULL) };
    bool ok = t[0] != NULL && t[1] != NULL && t[2] != NULL &&
              run(m, t, 2, &t[2], 1) == NRT_SUCCESS &&
              api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS;
    for (int i = 0; i < 3; i++)
        api.tensor_free(&t[i]);
    return api.unload(m) == NRT_SUCCESS && ok;
}

/* The executor's executable cache (NEURON_EMU_XLA_CACHE): the first load of a module writes one
 * entry; a later executor loads the entry instead of compiling (shown by planting the multiply
 * module's executable under the add module's name); a corrupt entry is compiled again and
 * replaced; "0" turns the cache off. */
CTEST(nrt_stablehlo, executables_are_cached_on_disk)
{
    const char *tmp = getenv("TEST_TMPDIR");
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/xla-cache-XXXXXX", tmp != NULL ? tmp : "/tmp");
    CTEST_CHECK(mkdtemp(dir) != NULL);
    setenv("NEURON_EMU_XLA_CACHE", dir, 1);
    OPEN_EMULATOR();
    static char paths[4][1024];
    float out[4];
    CTEST_CHECK(load_and_run(add_module, out) && out[3] == 44);
    CTEST_CHECK(cache_entries(dir, paths, 4) == 1);
    char add_entry[1024];
    snprintf(add_entry, sizeof(add_entry), "%s", paths[0]);
    CTEST_CHECK(load_and_run(multiply_module, out) && out[3] == 160);
    CTEST_CHECK(cache_entries(dir, paths, 4) == 2);
    const char *mul_entry = strcmp(paths[0], add_entry) != 0 ? paths[0] : paths[1];

    /* A new executor (nrt_close stops this one) takes what the entry holds. */
    api.close();
    CTEST_CHECK(copy_file(mul_entry, add_entry));
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(load_and_run(add_module, out) && out[3] == 160);

    /* A corrupt entry: compiled again, and the entry rewritten. */
    api.close();
    FILE *f = fopen(add_entry, "wb");
    CTEST_CHECK(f != NULL && fputs("not an executable", f) >= 0 && fclose(f) == 0);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(load_and_run(add_module, out) && out[3] == 44);
    struct stat st;
    CTEST_CHECK(stat(add_entry, &st) == 0 && st.st_size > (off_t)strlen("not an executable"));
    CTEST_CHECK(cache_entries(dir, paths, 4) == 2);

    /* "0": nothing read, nothing written. */
    api.close();
    setenv("NEURON_EMU_XLA_CACHE", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(copy_file(mul_entry, add_entry));
    CTEST_CHECK(load_and_run(add_module, out) && out[3] == 44);
    CTEST_CHECK(load_and_run(subtract_module, out) && out[3] == -36);
    CTEST_CHECK(cache_entries(dir, paths, 4) == 2);
    unsetenv("NEURON_EMU_XLA_CACHE");
    nrt_test_close(&api);
    return CTEST_PASS;
}
