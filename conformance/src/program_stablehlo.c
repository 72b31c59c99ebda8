/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance: StableHLO programs (HAL_PROGRAM_FORMAT_STABLEHLO, since 1.3) on devices that list
 * the format, and the vendor format range on every device that loads programs.
 *
 * A StableHLO program has one kernel, "main", whose arguments are its parameters and then its
 * results, each a HAL_KERNEL_ARG_TENSOR with a descriptor. The modules below are MLIR text with
 * one public function `main`; each was compiled and run with XLA's CPU compiler (jaxlib) on the
 * inputs the bodies give it and computes what the bodies expect, and XLA refuses the malformed
 * ones too. Inputs are small integers and quarters, so every result is exact whatever order a
 * compiler sums in (even through bf16 for the matrix product) and is compared bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

#define SKIP_UNLESS_STABLEHLO(ctx)                                                           \
    do {                                                                                     \
        CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");                       \
        if (!((ctx)->props.program_formats & (1u << HAL_PROGRAM_FORMAT_STABLEHLO)))          \
            return cts_skip((ctx), "the device does not load HAL_PROGRAM_FORMAT_STABLEHLO"); \
    } while (0)

/* ---- The modules ------------------------------------------------------------------------------
 * out = a + b * 2 over f32[1024]. */
static const char elementwise_module[] =
    "module @cts_elementwise {\n"
    "  func.func public @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "    %two = stablehlo.constant dense<2.000000e+00> : tensor<1024xf32>\n"
    "    %0 = stablehlo.multiply %b, %two : tensor<1024xf32>\n"
    "    %1 = stablehlo.add %a, %0 : tensor<1024xf32>\n"
    "    return %1 : tensor<1024xf32>\n"
    "  }\n"
    "}\n";

/* out = t * u - t over f32[1024]: the consumer of elementwise_module's result. */
static const char consumer_module[] =
    "module @cts_consumer {\n"
    "  func.func public @main(%t: tensor<1024xf32>, %u: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "    %0 = stablehlo.multiply %t, %u : tensor<1024xf32>\n"
    "    %1 = stablehlo.subtract %0, %t : tensor<1024xf32>\n"
    "    return %1 : tensor<1024xf32>\n"
    "  }\n"
    "}\n";

/* Row sums of f32[64, 32] (axis 1) and column sums of i32[64, 32] (axis 0). */
static const char reduction_module[] =
    "module @cts_reduction {\n"
    "  func.func public @main(%x: tensor<64x32xf32>, %y: tensor<64x32xi32>)\n"
    "      -> (tensor<64xf32>, tensor<32xi32>) {\n"
    "    %zf = stablehlo.constant dense<0.000000e+00> : tensor<f32>\n"
    "    %s = stablehlo.reduce(%x init: %zf) applies stablehlo.add across dimensions = [1]\n"
    "        : (tensor<64x32xf32>, tensor<f32>) -> tensor<64xf32>\n"
    "    %zi = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %t = stablehlo.reduce(%y init: %zi) applies stablehlo.add across dimensions = [0]\n"
    "        : (tensor<64x32xi32>, tensor<i32>) -> tensor<32xi32>\n"
    "    return %s, %t : tensor<64xf32>, tensor<32xi32>\n"
    "  }\n"
    "}\n";

/* f32[16, 8] x f32[8, 4]. */
static const char matmul_module[] =
    "module @cts_matmul {\n"
    "  func.func public @main(%a: tensor<16x8xf32>, %b: tensor<8x4xf32>) -> tensor<16x4xf32> {\n"
    "    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]\n"
    "        : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>\n"
    "    return %0 : tensor<16x4xf32>\n"
    "  }\n"
    "}\n";

/* x += y in place: result 0 is written to parameter 0's buffer. */
static const char inplace_module[] =
    "module @cts_inplace {\n"
    "  func.func public @main(%arg0: tensor<256xf32> {tf.aliasing_output = 0 : i32},\n"
    "                         %arg1: tensor<256xf32>) -> tensor<256xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg1 : tensor<256xf32>\n"
    "    return %0 : tensor<256xf32>\n"
    "  }\n"
    "}\n";

/* The same, with the alias declared by the module (mhlo.input_output_alias, kind must_alias). */
static const char inplace_attribute_module[] =
    "module @cts_inplace_attribute attributes {mhlo.input_output_alias = [{\n"
    "    alias = {kind = \"must_alias\", parameter_number = 0 : i64,\n"
    "             parameter_index = array<i64>},\n"
    "    output_index = array<i64>}]} {\n"
    "  func.func public @main(%arg0: tensor<256xf32>,\n"
    "                         %arg1: tensor<256xf32>) -> tensor<256xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg1 : tensor<256xf32>\n"
    "    return %0 : tensor<256xf32>\n"
    "  }\n"
    "}\n";

/* Three parameters (one a scalar) and three results of different types and shapes: x * 2,
 * y transposed, and x > t as i1 (HAL_DTYPE_BOOL). */
static const char several_module[] =
    "module @cts_several {\n"
    "  func.func public @main(%x: tensor<8xf32>, %y: tensor<2x3xi32>, %t: tensor<f32>)\n"
    "      -> (tensor<8xf32>, tensor<3x2xi32>, tensor<8xi1>) {\n"
    "    %two = stablehlo.constant dense<2.000000e+00> : tensor<8xf32>\n"
    "    %0 = stablehlo.multiply %x, %two : tensor<8xf32>\n"
    "    %1 = stablehlo.transpose %y, dims = [1, 0] : (tensor<2x3xi32>) -> tensor<3x2xi32>\n"
    "    %tb = stablehlo.broadcast_in_dim %t, dims = [] : (tensor<f32>) -> tensor<8xf32>\n"
    "    %2 = stablehlo.compare GT, %x, %tb, FLOAT\n"
    "        : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>\n"
    "    return %0, %1, %2 : tensor<8xf32>, tensor<3x2xi32>, tensor<8xi1>\n"
    "  }\n"
    "}\n";

/* Well-formed, but its one public function is not `main`. */
static const char no_main_module[] =
    "module @cts_no_main {\n"
    "  func.func public @forward(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.add %a, %a : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

/* A dynamic dimension: a HAL tensor has static shapes only. */
static const char dynamic_module[] =
    "module @cts_dynamic {\n"
    "  func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
    "    %0 = stablehlo.add %a, %a : tensor<?xf32>\n"
    "    return %0 : tensor<?xf32>\n"
    "  }\n"
    "}\n";

/* ---- Helpers ------------------------------------------------------------------------------- */

enum { N = 1024, NBYTES = N * 4 };

static const hal_launch_config_t ONE = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);

static hal_stream_t default_stream(const cts_ctx_t *ctx)
{
    hal_stream_t s = NULL;
    hal_device_get_default_stream(ctx->device, &s);
    return s;
}

static hal_tensor_desc_t tensor(hal_dtype_t dtype, uint32_t rank, int64_t d0, int64_t d1)
{
    hal_tensor_desc_t t = { .dtype = dtype, .rank = rank };
    if (rank > 0)
        t.dims[0] = d0;
    if (rank > 1)
        t.dims[1] = d1;
    return t;
}

/* Creates a program from a module (its text, without the NUL) and looks up "main". */
static int load_module(cts_ctx_t *ctx, const char *text, hal_program_t *program,
                       hal_kernel_t *kernel)
{
    CTS_CHECK_OK(
        hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), program));
    CTS_CHECK_OK(hal_program_get_kernel(*program, "main", kernel));
    return CTS_PASS;
}

#define LOAD_MODULE(ctx, program, kernel, text)                        \
    hal_program_t program = NULL;                                      \
    hal_kernel_t kernel = NULL;                                        \
    do {                                                               \
        if (load_module((ctx), (text), &program, &kernel) != CTS_PASS) \
            return CTS_FAIL;                                           \
    } while (0)

/* A device buffer of `bytes` that receives host[0, bytes) in order on s (host must stay unchanged
 * until s reached the copy). */
static int upload(cts_ctx_t *ctx, hal_stream_t s, const void *host, size_t bytes, void **dev)
{
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, bytes, 0, dev));
    CTS_CHECK_OK(hal_memcpy_async(*dev, host, bytes, s));
    return CTS_PASS;
}

#define UPLOAD(ctx, s, host, bytes, dev)                                     \
    do {                                                                     \
        if (upload((ctx), (s), (host), (bytes), (void **)(dev)) != CTS_PASS) \
            return CTS_FAIL;                                                 \
    } while (0)

/* Host memory owned by the test (freed after its backend), for buffers queued copies use. */
#define HOST_ALLOC(ctx, ptr, bytes)         \
    do {                                    \
        (ptr) = cts_calloc((ctx), (bytes)); \
        CTS_CHECK((ptr) != NULL);           \
    } while (0)

/* Compares n 4-byte elements bit for bit (floats by their bits: -0 is not 0). */
static int expect_words(const void *got, const void *want, size_t n, const char *what, int is_f32)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, (const char *)got + 4 * i, 4);
        memcpy(&w, (const char *)want + 4 * i, 4);
        if (g == w)
            continue;
        if (is_f32) {
            float gf, wf;
            memcpy(&gf, &g, 4);
            memcpy(&wf, &w, 4);
            CTS_CHECKF(0, "%s: element %zu is %g (0x%08x), expected %g (0x%08x)", what, i,
                       (double)gf, g, (double)wf, w);
        }
        CTS_CHECKF(0, "%s: element %zu is %d, expected %d", what, i, (int32_t)g, (int32_t)w);
    }
    return CTS_PASS;
}

#define EXPECT_F32(got, want, n, what)                               \
    do {                                                             \
        if (expect_words((got), (want), (n), (what), 1) != CTS_PASS) \
            return CTS_FAIL;                                         \
    } while (0)
#define EXPECT_I32(got, want, n, what)                               \
    do {                                                             \
        if (expect_words((got), (want), (n), (what), 0) != CTS_PASS) \
            return CTS_FAIL;                                         \
    } while (0)

/* The inputs of elementwise_module in round r: a[i] = i - 512 + 3r, b[i] a quarter in
 * [-3.5, 3.5]; and what elementwise_module (t) and then consumer_module (out) make of them. */
static void elementwise_inputs(int r, float *a, float *b)
{
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i - 512 + 3 * r);
        b[i] = (float)((i + r) % 29 - 14) * 0.25f;
    }
}

static float elementwise_of(float a, float b)
{
    return a + b * 2.0f;
}

static float consumer_of(float t, float u)
{
    return t * u - t;
}

/* True if the last error message contains needle1 and, unless NULL, needle2. */
static int message_has(const char *needle1, const char *needle2)
{
    const char *m = hal_last_error_message();
    return strstr(m, needle1) != NULL && (needle2 == NULL || strstr(m, needle2) != NULL);
}

/* ---- Bodies -------------------------------------------------------------------------------- */

/* An element-wise module computes exactly what the host does; the image may carry a NUL. */
int cts_program_stablehlo_elementwise(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    hal_program_t p = NULL;
    hal_kernel_t k = NULL;
    /* "NUL terminator optional": this image includes it. */
    CTS_CHECK_OK(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_STABLEHLO, elementwise_module,
                                    sizeof(elementwise_module), &p));
    CTS_CHECK_OK(hal_program_get_kernel(p, "main", &k));
    hal_stream_t s = default_stream(ctx);
    float *ha, *hb, *hout, *want;
    HOST_ALLOC(ctx, ha, NBYTES);
    HOST_ALLOC(ctx, hb, NBYTES);
    HOST_ALLOC(ctx, hout, NBYTES);
    HOST_ALLOC(ctx, want, NBYTES);
    elementwise_inputs(0, ha, hb);
    for (int i = 0; i < N; i++)
        want[i] = elementwise_of(ha[i], hb[i]);
    float *a, *b, *out;
    UPLOAD(ctx, s, ha, NBYTES, &a);
    UPLOAD(ctx, s, hb, NBYTES, &b);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, (void **)&out));
    hal_tensor_desc_t t = tensor(HAL_DTYPE_F32, 1, N, 0);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_TENSOR_OF(a, &t), HAL_KERNEL_ARG_TENSOR_OF(b, &t),
                                 HAL_KERNEL_ARG_TENSOR_OF(out, &t) };
    args[2].size = NBYTES; /* the tensor's bytes are accepted as well as 0 */
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 3));
    CTS_CHECK_OK(cts_copy_sync(hout, out, NBYTES, s));
    EXPECT_F32(hout, want, N, "a + b * 2");
    /* Parameters are only read. */
    CTS_CHECK_OK(cts_copy_sync(hout, b, NBYTES, s));
    EXPECT_F32(hout, hb, N, "parameter b after the launch");
    CTS_CHECK_OK(hal_mem_free(a));
    CTS_CHECK_OK(hal_mem_free(b));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Reductions over either axis, in f32 and in i32 (the i32 sums are odd and above 2^24: no f32
 * holds them). */
int cts_program_stablehlo_reduction(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    enum { R = 64, C = 32 };
    LOAD_MODULE(ctx, p, k, reduction_module);
    hal_stream_t s = default_stream(ctx);
    float *hx, *hrows, *want_rows;
    int32_t *hy, *hcols, *want_cols;
    HOST_ALLOC(ctx, hx, R * C * 4);
    HOST_ALLOC(ctx, hy, R * C * 4);
    HOST_ALLOC(ctx, hrows, R * 4);
    HOST_ALLOC(ctx, hcols, C * 4);
    HOST_ALLOC(ctx, want_rows, R * 4);
    HOST_ALLOC(ctx, want_cols, C * 4);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            hx[r * C + c] = (float)((r * 7 + c * 3) % 17 - 8);
            hy[r * C + c] = r * 300007 + c * 7 - 3000000 + (r == R - 1);
            want_rows[r] += hx[r * C + c];
            want_cols[c] += hy[r * C + c];
        }
    void *x, *y, *rows, *cols;
    UPLOAD(ctx, s, hx, R * C * 4, &x);
    UPLOAD(ctx, s, hy, R * C * 4, &y);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, R * 4, 0, &rows));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, C * 4, 0, &cols));
    hal_tensor_desc_t tx = tensor(HAL_DTYPE_F32, 2, R, C), ty = tensor(HAL_DTYPE_I32, 2, R, C);
    hal_tensor_desc_t trows = tensor(HAL_DTYPE_F32, 1, R, 0),
                      tcols = tensor(HAL_DTYPE_I32, 1, C, 0);
    hal_kernel_arg_t args[4] = {
        HAL_KERNEL_ARG_TENSOR_OF(x, &tx),
        HAL_KERNEL_ARG_TENSOR_OF(y, &ty),
        HAL_KERNEL_ARG_TENSOR_OF(rows, &trows),
        HAL_KERNEL_ARG_TENSOR_OF(cols, &tcols),
    };
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 4));
    CTS_CHECK_OK(cts_copy_sync(hrows, rows, R * 4, s));
    CTS_CHECK_OK(cts_copy_sync(hcols, cols, C * 4, s));
    EXPECT_F32(hrows, want_rows, R, "f32 sum over axis 1");
    EXPECT_I32(hcols, want_cols, C, "i32 sum over axis 0");
    CTS_CHECK_OK(hal_mem_free(x));
    CTS_CHECK_OK(hal_mem_free(y));
    CTS_CHECK_OK(hal_mem_free(rows));
    CTS_CHECK_OK(hal_mem_free(cols));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* stablehlo.dot_general: a matrix product, row-major operands and result. */
int cts_program_stablehlo_matmul(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    enum { M = 16, K = 8, NC = 4 };
    LOAD_MODULE(ctx, p, k, matmul_module);
    hal_stream_t s = default_stream(ctx);
    float *ha, *hb, *hc, *want;
    HOST_ALLOC(ctx, ha, M * K * 4);
    HOST_ALLOC(ctx, hb, K * NC * 4);
    HOST_ALLOC(ctx, hc, M * NC * 4);
    HOST_ALLOC(ctx, want, M * NC * 4);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < K; j++)
            ha[i * K + j] = (float)((i + 2 * j * j + i * j) % 9 - 4);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < NC; j++)
            hb[i * NC + j] = (float)((i * 3 + j * 5) % 7 - 3);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NC; j++)
            for (int l = 0; l < K; l++)
                want[i * NC + j] += ha[i * K + l] * hb[l * NC + j];
    void *a, *b, *c;
    UPLOAD(ctx, s, ha, M * K * 4, &a);
    UPLOAD(ctx, s, hb, K * NC * 4, &b);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, M * NC * 4, 0, &c));
    hal_tensor_desc_t ta = tensor(HAL_DTYPE_F32, 2, M, K), tb = tensor(HAL_DTYPE_F32, 2, K, NC),
                      tc = tensor(HAL_DTYPE_F32, 2, M, NC);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_TENSOR_OF(a, &ta), HAL_KERNEL_ARG_TENSOR_OF(b, &tb),
                                 HAL_KERNEL_ARG_TENSOR_OF(c, &tc) };
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 3));
    CTS_CHECK_OK(cts_copy_sync(hc, c, M * NC * 4, s));
    EXPECT_F32(hc, want, M * NC, "f32[16, 8] x f32[8, 4]");
    CTS_CHECK_OK(hal_mem_free(a));
    CTS_CHECK_OK(hal_mem_free(b));
    CTS_CHECK_OK(hal_mem_free(c));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* A must-alias result is written to its parameter's buffer (in-place updates), the alias is
 * reported, and a launch that passes another buffer for it is refused with nothing run. `how`
 * names the module's declaration of the alias. */
static int run_inplace(cts_ctx_t *ctx, const char *module, const char *how)
{
    enum { M = 256, MB = M * 4, ROUNDS = 3 };
    LOAD_MODULE(ctx, p, k, module);
    hal_kernel_tensor_info_t info = HAL_KERNEL_TENSOR_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_tensor_info(k, &info));
    CTS_CHECK(info.ninputs == 2 && info.noutputs == 1);
    CTS_CHECKF(info.aliases[0] == 0,
               "the module declares result 0 must-alias parameter 0 (%s), "
               "hal_kernel_get_tensor_info reports aliases[0] = %d",
               how, (int)info.aliases[0]);
    hal_stream_t s = default_stream(ctx);
    float *hx, *hy, *host, *want;
    HOST_ALLOC(ctx, hx, MB);
    HOST_ALLOC(ctx, hy, MB);
    HOST_ALLOC(ctx, host, MB);
    HOST_ALLOC(ctx, want, MB);
    for (int i = 0; i < M; i++) {
        hx[i] = (float)(i - 100);
        hy[i] = (float)(i % 9 - 4) * 0.5f;
    }
    void *x, *y, *other;
    UPLOAD(ctx, s, hx, MB, &x);
    UPLOAD(ctx, s, hy, MB, &y);
    UPLOAD(ctx, s, hx, MB, &other);
    hal_tensor_desc_t t = tensor(HAL_DTYPE_F32, 1, M, 0);
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_TENSOR_OF(x, &t), HAL_KERNEL_ARG_TENSOR_OF(y, &t),
                                 HAL_KERNEL_ARG_TENSOR_OF(x, &t) };
    for (int r = 0; r < ROUNDS; r++)
        CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 3));
    CTS_CHECK_OK(cts_copy_sync(host, x, MB, s));
    for (int i = 0; i < M; i++)
        want[i] = hx[i] + hy[i] + hy[i] + hy[i];
    EXPECT_F32(host, want, M, "x after three in-place x += y");
    CTS_CHECK_OK(cts_copy_sync(host, y, MB, s));
    EXPECT_F32(host, hy, M, "parameter y (not aliased) after the launches");
    /* Another buffer for the aliased result: refused, naming the result; nothing ran. */
    args[2] = HAL_KERNEL_ARG_TENSOR_OF(other, &t);
    CTS_CHECK_STATUS(hal_kernel_launch(s, k, &ONE, args, 3), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECKF(message_has("result 0", NULL), "the message does not name result 0: %s",
               hal_last_error_message());
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(cts_copy_sync(host, other, MB, s));
    EXPECT_F32(host, hx, M, "the buffer refused for the aliased result");
    CTS_CHECK_OK(cts_copy_sync(host, x, MB, s));
    EXPECT_F32(host, want, M, "x after the refused launch");
    CTS_CHECK_OK(hal_mem_free(x));
    CTS_CHECK_OK(hal_mem_free(y));
    CTS_CHECK_OK(hal_mem_free(other));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* The parameter's attribute, as JAX writes it for donated buffers. */
int cts_program_stablehlo_aliased_inplace(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    return run_inplace(ctx, inplace_module, "tf.aliasing_output on the parameter");
}

/* The module's attribute, as torch-mlir writes it for in-place updates. */
int cts_program_stablehlo_aliased_module_attribute(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    return run_inplace(ctx, inplace_attribute_module,
                       "mhlo.input_output_alias with kind must_alias on the module");
}

/* Several parameters and results of different types and shapes (a scalar, a transposed i32
 * matrix, booleans): the signature, the tensors, and the values, in row-major order. */
int cts_program_stablehlo_several_outputs(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    LOAD_MODULE(ctx, p, k, several_module);
    const hal_tensor_desc_t want_t[6] = {
        tensor(HAL_DTYPE_F32, 1, 8, 0), tensor(HAL_DTYPE_I32, 2, 2, 3),
        tensor(HAL_DTYPE_F32, 0, 0, 0), tensor(HAL_DTYPE_F32, 1, 8, 0),
        tensor(HAL_DTYPE_I32, 2, 3, 2), tensor(HAL_DTYPE_BOOL, 1, 8, 0),
    };
    const uint32_t want_bytes[6] = { 32, 24, 4, 32, 24, 8 };
    hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_info(k, &info));
    CTS_CHECK(strcmp(info.name, "main") == 0);
    CTS_CHECKF(info.nargs == 6, "nargs is %u, expected 3 parameters + 3 results", info.nargs);
    for (int i = 0; i < 6; i++) {
        CTS_CHECKF(info.args[i].kind == HAL_KERNEL_ARG_TENSOR, "argument %d has kind %d", i,
                   (int)info.args[i].kind);
        CTS_CHECKF(info.args[i].size == want_bytes[i], "argument %d: size %u, expected %u", i,
                   info.args[i].size, want_bytes[i]);
    }
    hal_kernel_tensor_info_t ti = HAL_KERNEL_TENSOR_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_tensor_info(k, &ti));
    CTS_CHECK(ti.struct_size == sizeof(ti));
    CTS_CHECKF(ti.ninputs == 3 && ti.noutputs == 3, "%u parameters and %u results", ti.ninputs,
               ti.noutputs);
    for (int i = 0; i < 6; i++) {
        const hal_tensor_desc_t *g = &ti.tensors[i], *w = &want_t[i];
        CTS_CHECKF(g->dtype == w->dtype && g->rank == w->rank,
                   "argument %d: dtype %d rank %u, expected dtype %d rank %u", i, (int)g->dtype,
                   g->rank, (int)w->dtype, w->rank);
        for (uint32_t d = 0; d < w->rank; d++)
            CTS_CHECKF(g->dims[d] == w->dims[d], "argument %d: dimension %u is %lld, expected %lld",
                       i, d, (long long)g->dims[d], (long long)w->dims[d]);
    }
    for (int r = 0; r < 3; r++)
        CTS_CHECKF(ti.aliases[r] == -1, "result %d: aliases %d, expected -1", r,
                   (int)ti.aliases[r]);

    hal_stream_t s = default_stream(ctx);
    float *hx, *hthreshold, *hdouble, *want_double;
    int32_t *hy, *htrans, *want_trans;
    uint8_t *hflags;
    HOST_ALLOC(ctx, hx, 32);
    HOST_ALLOC(ctx, hthreshold, 4);
    HOST_ALLOC(ctx, hdouble, 32);
    HOST_ALLOC(ctx, want_double, 32);
    HOST_ALLOC(ctx, hy, 24);
    HOST_ALLOC(ctx, htrans, 24);
    HOST_ALLOC(ctx, want_trans, 24);
    HOST_ALLOC(ctx, hflags, 8);
    for (int i = 0; i < 8; i++) {
        hx[i] = (float)i - 3.5f;
        want_double[i] = hx[i] * 2.0f;
    }
    hthreshold[0] = 0.5f; /* x[4] == 0.5 is not greater */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            hy[i * 3 + j] = 100 - 7 * (i * 3 + j);
            want_trans[j * 2 + i] = hy[i * 3 + j];
        }
    void *x, *y, *threshold, *dbl, *trans, *flags;
    UPLOAD(ctx, s, hx, 32, &x);
    UPLOAD(ctx, s, hy, 24, &y);
    UPLOAD(ctx, s, hthreshold, 4, &threshold);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 32, 0, &dbl));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 24, 0, &trans));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, 8, 0, &flags));
    CTS_CHECK_OK(cts_memset_sync(flags, 0xee, 8, s)); /* neither 0 nor 1 */
    void *ptrs[6] = { x, y, threshold, dbl, trans, flags };
    hal_kernel_arg_t args[6];
    for (int i = 0; i < 6; i++)
        args[i] = HAL_KERNEL_ARG_TENSOR_OF(ptrs[i], &want_t[i]);
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, args, 6));
    CTS_CHECK_OK(cts_copy_sync(hdouble, dbl, 32, s));
    CTS_CHECK_OK(cts_copy_sync(htrans, trans, 24, s));
    CTS_CHECK_OK(cts_copy_sync(hflags, flags, 8, s));
    EXPECT_F32(hdouble, want_double, 8, "result 0 (x * 2)");
    EXPECT_I32(htrans, want_trans, 6, "result 1 (y transposed)");
    for (int i = 0; i < 8; i++)
        CTS_CHECKF(hflags[i] == (hx[i] > 0.5f ? 1 : 0),
                   "result 2 (x > t, bool): byte %d is %u, expected %d", i, hflags[i],
                   hx[i] > 0.5f ? 1 : 0);
    for (int i = 0; i < 6; i++)
        CTS_CHECK_OK(hal_mem_free(ptrs[i]));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* Modules the compiler cannot take are refused with a message; nothing is created. */
int cts_program_stablehlo_malformed_module(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    static const char garbage[] = "this is not MLIR {{{ \x01\x02\x03 %%%";
    /* The MLIR bytecode magic, then nothing that parses. */
    static const char bad_bytecode[] = "ML\xefR\x7f\x7f\x7f\x7f not a module";
    static char marker;
    const struct {
        const char *what;
        const char *image;
        size_t size;
    } cases[] = {
        { "garbage text", garbage, sizeof(garbage) - 1 },
        { "a module without main", no_main_module, sizeof(no_main_module) - 1 },
        { "a truncated module", elementwise_module, (sizeof(elementwise_module) - 1) / 2 },
        { "a module with a dynamic dimension", dynamic_module, sizeof(dynamic_module) - 1 },
        { "malformed bytecode", bad_bytecode, sizeof(bad_bytecode) - 1 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hal_program_t p = (hal_program_t)(void *)&marker;
        hal_status_t st = hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_STABLEHLO,
                                             cases[i].image, cases[i].size, &p);
        CTS_CHECKF(st == HAL_ERROR_INVALID_ARGUMENT, "%s: hal_program_create returned %s (%s)",
                   cases[i].what, hal_status_string(st), hal_last_error_message());
        CTS_CHECKF(p == (hal_program_t)(void *)&marker, "%s: *program was written", cases[i].what);
        const char *m = hal_last_error_message();
        const char *detail = strstr(m, "hal_program_create: ");
        CTS_CHECKF(detail != NULL, "%s: the message is '%s'", cases[i].what, m);
        /* More than the status: the compiler's message or its log. */
        detail += strlen("hal_program_create: ");
        CTS_CHECKF(detail[0] != '\0' &&
                       strcmp(detail, hal_status_string(HAL_ERROR_INVALID_ARGUMENT)) != 0,
                   "%s: the message gives no detail: '%s'", cases[i].what, m);
    }
    /* The device still compiles a good module afterwards. */
    LOAD_MODULE(ctx, p, k, elementwise_module);
    CTS_CHECK_OK(hal_program_destroy(p));
    (void)k;
    return CTS_PASS;
}

/* Launches whose arguments do not match the module are refused before anything is enqueued:
 * each names the argument, the output keeps its sentinel, and the stream stays usable. */
int cts_program_stablehlo_wrong_arguments(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    LOAD_MODULE(ctx, p, k, elementwise_module);
    hal_stream_t s = default_stream(ctx);
    float *ha, *hb, *hout, *want;
    HOST_ALLOC(ctx, ha, NBYTES);
    HOST_ALLOC(ctx, hb, NBYTES);
    HOST_ALLOC(ctx, hout, NBYTES);
    HOST_ALLOC(ctx, want, NBYTES);
    elementwise_inputs(1, ha, hb);
    for (int i = 0; i < N; i++)
        want[i] = elementwise_of(ha[i], hb[i]);
    void *a, *b, *out, *small;
    UPLOAD(ctx, s, ha, NBYTES, &a);
    UPLOAD(ctx, s, hb, NBYTES, &b);
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &out));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES / 2, 0, &small));
    CTS_CHECK_OK(cts_memset_sync(out, 0x5a, NBYTES, s));
    CTS_CHECK_OK(cts_memset_sync(small, 0x5a, NBYTES / 2, s));
    static float pageable[N];
    const hal_tensor_desc_t f32 = tensor(HAL_DTYPE_F32, 1, N, 0);
    const hal_tensor_desc_t i32 = tensor(HAL_DTYPE_I32, 1, N, 0);
    const hal_tensor_desc_t shorter = tensor(HAL_DTYPE_F32, 1, N - 1, 0);
    const hal_tensor_desc_t square = tensor(HAL_DTYPE_F32, 2, 32, 32); /* same bytes */
    const hal_kernel_arg_t ok[3] = { HAL_KERNEL_ARG_TENSOR_OF(a, &f32),
                                     HAL_KERNEL_ARG_TENSOR_OF(b, &f32),
                                     HAL_KERNEL_ARG_TENSOR_OF(out, &f32) };
    hal_kernel_arg_t bad[4];
    /* What each refusal must name ("argument 1", and "parameter 1" where the core knows the
     * role of a tensor argument). */
#define EXPECT_REFUSED(n, needle1, needle2, what)                                               \
    do {                                                                                        \
        hal_status_t st_ = hal_kernel_launch(s, k, &ONE, bad, (n));                             \
        CTS_CHECKF(st_ == HAL_ERROR_INVALID_ARGUMENT, "%s: hal_kernel_launch returned %s (%s)", \
                   (what), hal_status_string(st_), hal_last_error_message());                   \
        CTS_CHECKF(message_has((needle1), (needle2)),                                           \
                   "%s: the message does not name '%s'%s%s: %s", (what), (needle1),             \
                   (needle2) ? " and " : "", (needle2) ? (needle2) : "",                        \
                   hal_last_error_message());                                                   \
    } while (0)
    memcpy(bad, ok, sizeof(ok));
    bad[1].value.tensor.desc = &i32;
    EXPECT_REFUSED(3, "argument 1", "parameter 1", "an i32 tensor for an f32 parameter");
    memcpy(bad, ok, sizeof(ok));
    bad[1].value.tensor.desc = &shorter;
    EXPECT_REFUSED(3, "argument 1", "1023", "f32[1023] for f32[1024]");
    memcpy(bad, ok, sizeof(ok));
    bad[1].value.tensor.desc = &square;
    EXPECT_REFUSED(3, "argument 1", "parameter 1", "f32[32, 32] for f32[1024]");
    memcpy(bad, ok, sizeof(ok));
    EXPECT_REFUSED(2, "argument", NULL, "two arguments for three");
    bad[3] = ok[2];
    EXPECT_REFUSED(4, "argument", NULL, "four arguments for three");
    memcpy(bad, ok, sizeof(ok));
    bad[1] = HAL_KERNEL_ARG_PTR(b, NBYTES);
    EXPECT_REFUSED(3, "argument 1", NULL, "a pointer argument for a tensor");
    memcpy(bad, ok, sizeof(ok));
    bad[2].value.tensor.desc = NULL;
    EXPECT_REFUSED(3, "argument 2", "result 0", "a NULL descriptor");
    memcpy(bad, ok, sizeof(ok));
    bad[2].value.tensor.ptr = small;
    EXPECT_REFUSED(3, "argument 2", "result 0", "a result buffer smaller than the tensor");
    memcpy(bad, ok, sizeof(ok));
    bad[0].size = 100;
    EXPECT_REFUSED(3, "argument 0", "parameter 0", "a size that is not the tensor's bytes");
    memcpy(bad, ok, sizeof(ok));
    bad[0].value.tensor.ptr = pageable;
    EXPECT_REFUSED(3, "argument 0", "parameter 0", "memory not allocated through the HAL");
    memcpy(bad, ok, sizeof(ok));
    bad[2].value.tensor.ptr = NULL;
    EXPECT_REFUSED(3, "argument 2", "result 0", "a NULL result of 4096 bytes");
#undef EXPECT_REFUSED
    /* Nothing ran, and nothing latched on the stream. */
    CTS_CHECK_OK(hal_stream_synchronize(s));
    CTS_CHECK_OK(cts_copy_sync(hout, out, NBYTES, s));
    CTS_CHECKF(cts_bytes_find_other(hout, NBYTES, 0x5a) == NBYTES,
               "a refused launch wrote the result at byte %zu",
               cts_bytes_find_other(hout, NBYTES, 0x5a));
    CTS_CHECK_OK(cts_copy_sync(hout, small, NBYTES / 2, s));
    CTS_CHECK(cts_bytes_find_other(hout, NBYTES / 2, 0x5a) == NBYTES / 2);
    CTS_CHECK_OK(hal_kernel_launch(s, k, &ONE, ok, 3));
    CTS_CHECK_OK(cts_copy_sync(hout, out, NBYTES, s));
    EXPECT_F32(hout, want, N, "the correct launch after the refused ones");
    CTS_CHECK_OK(hal_mem_free(a));
    CTS_CHECK_OK(hal_mem_free(b));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_mem_free(small));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

enum { ROUNDS = 4 };

/* On one stream, with no synchronisation between: copies in, a launch, a second program that
 * consumes the first's result, a copy out; round after round into the same device buffers. */
int cts_program_stablehlo_ordering_with_copies(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    LOAD_MODULE(ctx, p1, k1, elementwise_module);
    LOAD_MODULE(ctx, p2, k2, consumer_module);
    hal_stream_t s = default_stream(ctx);
    float *ha[ROUNDS], *hb[ROUNDS], *hout[ROUNDS], *want;
    for (int r = 0; r < ROUNDS; r++) {
        HOST_ALLOC(ctx, ha[r], NBYTES);
        HOST_ALLOC(ctx, hb[r], NBYTES);
        HOST_ALLOC(ctx, hout[r], NBYTES);
        elementwise_inputs(r, ha[r], hb[r]);
    }
    HOST_ALLOC(ctx, want, NBYTES);
    void *a, *b, *t, *out;
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &a));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &b));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &t));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &out));
    const hal_tensor_desc_t f32 = tensor(HAL_DTYPE_F32, 1, N, 0);
    const hal_kernel_arg_t first[3] = { HAL_KERNEL_ARG_TENSOR_OF(a, &f32),
                                        HAL_KERNEL_ARG_TENSOR_OF(b, &f32),
                                        HAL_KERNEL_ARG_TENSOR_OF(t, &f32) };
    const hal_kernel_arg_t second[3] = { HAL_KERNEL_ARG_TENSOR_OF(t, &f32),
                                         HAL_KERNEL_ARG_TENSOR_OF(b, &f32),
                                         HAL_KERNEL_ARG_TENSOR_OF(out, &f32) };
    for (int r = 0; r < ROUNDS; r++) {
        CTS_CHECK_OK(hal_memcpy_async(a, ha[r], NBYTES, s));
        CTS_CHECK_OK(hal_memcpy_async(b, hb[r], NBYTES, s));
        CTS_CHECK_OK(hal_kernel_launch(s, k1, &ONE, first, 3));
        CTS_CHECK_OK(hal_kernel_launch(s, k2, &ONE, second, 3));
        CTS_CHECK_OK(hal_memcpy_async(hout[r], out, NBYTES, s));
    }
    CTS_CHECK_OK(hal_stream_synchronize(s));
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++)
            want[i] = consumer_of(elementwise_of(ha[r][i], hb[r][i]), hb[r][i]);
        char what[64];
        snprintf(what, sizeof(what), "round %d: (a + b * 2) * b - (a + b * 2)", r);
        EXPECT_F32(hout[r], want, N, what);
    }
    CTS_CHECK_OK(hal_mem_free(a));
    CTS_CHECK_OK(hal_mem_free(b));
    CTS_CHECK_OK(hal_mem_free(t));
    CTS_CHECK_OK(hal_mem_free(out));
    CTS_CHECK_OK(hal_program_destroy(p1));
    CTS_CHECK_OK(hal_program_destroy(p2));
    return CTS_PASS;
}

/* A launch on stream A, an event, stream B waiting for it and consuming A's result (B cannot
 * finish while A is held back); and a launch on a created stream alone. */
int cts_program_stablehlo_events_and_streams(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    LOAD_MODULE(ctx, p1, k1, elementwise_module);
    LOAD_MODULE(ctx, p2, k2, consumer_module);
    hal_stream_t sa = NULL, sb = NULL, sc = NULL;
    hal_event_t ev = NULL;
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &sa));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &sb));
    CTS_CHECK_OK(hal_stream_create(ctx->device, 0, &sc));
    CTS_CHECK_OK(hal_event_create(ctx->device, HAL_EVENT_FLAG_NONE, &ev));
    float *ha, *hb, *want;
    HOST_ALLOC(ctx, ha, NBYTES);
    HOST_ALLOC(ctx, hb, NBYTES);
    HOST_ALLOC(ctx, want, NBYTES);
    elementwise_inputs(2, ha, hb);
    float *result = NULL; /* pinned: the copy out is enqueued while A is held back */
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_HOST_PINNED, NBYTES, 0, (void **)&result));
    memset(result, 0, NBYTES);
    void *a, *b, *t, *out;
    UPLOAD(ctx, sa, ha, NBYTES, &a);
    UPLOAD(ctx, sa, hb, NBYTES, &b);
    CTS_CHECK_OK(hal_stream_synchronize(sa));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &t));
    CTS_CHECK_OK(hal_mem_alloc(ctx->device, HAL_MEM_KIND_DEVICE, NBYTES, 0, &out));
    const hal_tensor_desc_t f32 = tensor(HAL_DTYPE_F32, 1, N, 0);
    const hal_kernel_arg_t first[3] = { HAL_KERNEL_ARG_TENSOR_OF(a, &f32),
                                        HAL_KERNEL_ARG_TENSOR_OF(b, &f32),
                                        HAL_KERNEL_ARG_TENSOR_OF(t, &f32) };
    const hal_kernel_arg_t second[3] = { HAL_KERNEL_ARG_TENSOR_OF(t, &f32),
                                         HAL_KERNEL_ARG_TENSOR_OF(b, &f32),
                                         HAL_KERNEL_ARG_TENSOR_OF(out, &f32) };
    cts_gate_t *gate = NULL;
    if (ctx->props.capabilities & HAL_DEVICE_CAP_HOST_CALLBACKS) {
        gate = cts_gate_new(ctx);
        CTS_CHECK(gate != NULL);
        CTS_CHECK_OK(cts_gate_enqueue(gate, sa));
    }
    CTS_CHECK_OK(hal_kernel_launch(sa, k1, &ONE, first, 3));
    CTS_CHECK_OK(hal_event_record(ev, sa));
    CTS_CHECK_OK(hal_stream_wait_event(sb, ev));
    CTS_CHECK_OK(hal_kernel_launch(sb, k2, &ONE, second, 3));
    CTS_CHECK_OK(hal_memcpy_async(result, out, NBYTES, sb));
    if (gate) {
        CTS_CHECK_STATUS(hal_stream_query(sb), HAL_NOT_READY);
        cts_gate_open(gate);
    }
    CTS_CHECK_OK(cts_poll_stream(sb, 30000));
    for (int i = 0; i < N; i++)
        want[i] = consumer_of(elementwise_of(ha[i], hb[i]), hb[i]);
    EXPECT_F32(result, want, N, "stream B's consumer of stream A's result");

    /* A created stream alone: copies in, a launch, a copy out. */
    float *hc, *hd, *host;
    HOST_ALLOC(ctx, hc, NBYTES);
    HOST_ALLOC(ctx, hd, NBYTES);
    HOST_ALLOC(ctx, host, NBYTES);
    elementwise_inputs(3, hc, hd);
    CTS_CHECK_OK(hal_memcpy_async(a, hc, NBYTES, sc));
    CTS_CHECK_OK(hal_memcpy_async(b, hd, NBYTES, sc));
    CTS_CHECK_OK(hal_kernel_launch(sc, k1, &ONE, first, 3));
    CTS_CHECK_OK(hal_memcpy_async(host, t, NBYTES, sc));
    CTS_CHECK_OK(hal_stream_synchronize(sc));
    for (int i = 0; i < N; i++)
        want[i] = elementwise_of(hc[i], hd[i]);
    EXPECT_F32(host, want, N, "a launch on a created stream");

    CTS_CHECK_OK(hal_event_destroy(ev));
    CTS_CHECK_OK(hal_stream_destroy(sa));
    CTS_CHECK_OK(hal_stream_destroy(sb));
    CTS_CHECK_OK(hal_stream_destroy(sc));
    void *bufs[5] = { a, b, t, out, result };
    for (int i = 0; i < 5; i++)
        CTS_CHECK_OK(hal_mem_free(bufs[i]));
    CTS_CHECK_OK(hal_program_destroy(p1));
    CTS_CHECK_OK(hal_program_destroy(p2));
    return CTS_PASS;
}

/* The one kernel is "main", the same handle each time; hal_kernel_get_tensor_info checks its
 * struct like every other info call. */
int cts_program_stablehlo_get_kernel(cts_ctx_t *ctx)
{
    SKIP_UNLESS_STABLEHLO(ctx);
    LOAD_MODULE(ctx, p, k, elementwise_module);
    hal_kernel_t again = NULL;
    CTS_CHECK_OK(hal_program_get_kernel(p, "main", &again));
    CTS_CHECK(again == k);
    static const char *const others[] = { "Main", "main2", "mai", "cts_elementwise", "forward" };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        hal_kernel_t none = NULL;
        CTS_CHECK_STATUS(hal_program_get_kernel(p, others[i], &none), HAL_ERROR_NOT_FOUND);
        CTS_CHECK(none == NULL);
    }
    CTS_CHECK_STATUS(hal_program_get_kernel(p, "", &again), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_program_get_kernel(p, NULL, &again), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(again == k);
    hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
    CTS_CHECK_OK(hal_kernel_get_info(k, &info));
    CTS_CHECK(strcmp(info.name, "main") == 0);
    CTS_CHECK(info.nargs == 3);

    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(k, NULL), HAL_ERROR_INVALID_ARGUMENT);
    hal_kernel_tensor_info_t ti, copy;
    memset(&ti, 0xcd, sizeof(ti));
    ti.struct_size = sizeof(ti) - 1;
    memcpy(&copy, &ti, sizeof(ti));
    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(k, &ti), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK(memcmp(&ti, &copy, sizeof(ti)) == 0);
    ti.struct_size = 0;
    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(k, &ti), HAL_ERROR_INVALID_ARGUMENT);
    CTS_CHECK_STATUS(hal_kernel_get_tensor_info(NULL, &ti), HAL_ERROR_INVALID_HANDLE);
    /* A newer caller's larger struct: filled, its size and the bytes past ours kept. */
    struct {
        hal_kernel_tensor_info_t info;
        unsigned char tail[32];
    } big;
    memset(&big, 0xab, sizeof(big));
    big.info.struct_size = sizeof(big);
    big.info.next = NULL;
    CTS_CHECK_OK(hal_kernel_get_tensor_info(k, &big.info));
    CTS_CHECK(big.info.struct_size == sizeof(big));
    CTS_CHECK(big.info.ninputs == 2 && big.info.noutputs == 1);
    CTS_CHECK(big.info.aliases[0] == -1);
    CTS_CHECK(cts_bytes_find_other(big.tail, sizeof(big.tail), 0xab) == sizeof(big.tail));
    CTS_CHECK_OK(hal_program_destroy(p));
    return CTS_PASS;
}

/* The vendor range (HAL_PROGRAM_FORMAT_VENDOR_FIRST..LAST) and the values between the core's
 * formats and it: a device takes only what it lists, on every device that loads programs. */
int cts_program_vendor_format_range(cts_ctx_t *ctx)
{
    CTS_SKIP_UNLESS_CAP(ctx, HAL_DEVICE_CAP_PROGRAMS, "programs");
    static const char junk[] = "not an image of any format";
    static char marker;
    hal_program_t const untouched = (hal_program_t)(void *)&marker;
    CTS_CHECK(strcmp(hal_program_format_name(HAL_PROGRAM_FORMAT_STABLEHLO), "stablehlo") == 0);
    CTS_CHECK(strcmp(hal_program_format_name(HAL_PROGRAM_FORMAT_VENDOR_FIRST), "vendor") == 0);
    CTS_CHECK(strcmp(hal_program_format_name(HAL_PROGRAM_FORMAT_VENDOR_LAST), "vendor") == 0);
    CTS_CHECK(strcmp(hal_program_format_name(HAL_PROGRAM_FORMAT_COUNT), "unknown") == 0);
    CTS_CHECK(
        strcmp(hal_program_format_name((hal_program_format_t)(HAL_PROGRAM_FORMAT_VENDOR_FIRST - 1)),
               "unknown") == 0);
    CTS_CHECK(
        strcmp(hal_program_format_name((hal_program_format_t)(HAL_PROGRAM_FORMAT_VENDOR_LAST + 1)),
               "unknown") == 0);
    /* A device lists the core's formats and vendor formats only. */
    uint32_t known = ((1u << HAL_PROGRAM_FORMAT_COUNT) - 1u) & ~1u;
    uint32_t vendor = 0xffffffffu << HAL_PROGRAM_FORMAT_VENDOR_FIRST;
    CTS_CHECKF((ctx->props.program_formats & ~(known | vendor)) == 0,
               "program_formats 0x%08x lists values that are neither formats nor vendor formats",
               ctx->props.program_formats);
    /* Vendor values the device does not list: refused before the backend sees the image. */
    for (unsigned f = HAL_PROGRAM_FORMAT_VENDOR_FIRST; f <= HAL_PROGRAM_FORMAT_VENDOR_LAST; f++) {
        if (ctx->props.program_formats & (1u << f))
            continue;
        hal_program_t p = untouched;
        CTS_CHECK_STATUS(
            hal_program_create(ctx->device, (hal_program_format_t)f, junk, sizeof(junk), &p),
            HAL_ERROR_UNSUPPORTED);
        CTS_CHECKF(p == untouched, "vendor format %u: *program was written", f);
        CTS_CHECKF(strstr(hal_last_error_message(), "vendor") != NULL,
                   "vendor format %u: the message does not say so: %s", f,
                   hal_last_error_message());
    }
    /* Values between the core's formats and the vendor range are no format at all. */
    for (unsigned f = HAL_PROGRAM_FORMAT_COUNT; f < HAL_PROGRAM_FORMAT_VENDOR_FIRST; f++) {
        hal_program_t p = untouched;
        CTS_CHECK_STATUS(
            hal_program_create(ctx->device, (hal_program_format_t)f, junk, sizeof(junk), &p),
            HAL_ERROR_UNSUPPORTED);
        CTS_CHECKF(p == untouched, "format value %u: *program was written", f);
    }
    /* StableHLO where the device does not list it. */
    if (!(ctx->props.program_formats & (1u << HAL_PROGRAM_FORMAT_STABLEHLO))) {
        hal_program_t p = untouched;
        CTS_CHECK_STATUS(hal_program_create(ctx->device, HAL_PROGRAM_FORMAT_STABLEHLO,
                                            elementwise_module, sizeof(elementwise_module) - 1, &p),
                         HAL_ERROR_UNSUPPORTED);
        CTS_CHECK(p == untouched);
        CTS_CHECKF(strstr(hal_last_error_message(), "stablehlo") != NULL,
                   "the message does not name the format: %s", hal_last_error_message());
    }
    return CTS_PASS;
}
