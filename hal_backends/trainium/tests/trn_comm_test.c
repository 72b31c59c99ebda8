/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: collectives on both paths. Native: the runtime's out-of-NEFF collectives
 * (all-reduce, all-gather, reduce-scatter), chosen per communicator by the backend; host-staged:
 * the HAL's own (HAL_NEURON_NATIVE_COLLECTIVES=0, and every communicator the runtime cannot
 * serve: ranks sharing a core, a second communicator on a core, a runtime without the
 * collectives). Ranks are threads of this process, on NeuronCores of the emulator; inputs are
 * exact (small integers), results compared bit for bit. hal_comm_get_native_handle tells the
 * paths apart: the runtime's communicator, or HAL_ERROR_UNSUPPORTED where the HAL runs them. */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#include "hal_backends/trainium/emulator/nrt_emu.h"
#include "hal_backends/trainium/nrt/nrt_abi.h"
#include "hal_backends/trainium/tests/trn_test_util.h"

enum { MAX_RANKS = 4 };

/* ---- ranks as threads ---------------------------------------------------------------------- */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_fn)(rank_ctx_t *r);

struct rank_ctx {
    hal_device_t device;
    const hal_unique_id_t *id;
    int rank, nranks;
    rank_fn fn;
    void *arg;
    hal_comm_t comm;
    hal_stream_t stream;
    bool native; /* hal_comm_get_native_handle said so */
    int failed;
};

/* Expectations of a rank thread: recorded for the test (tools/ctest) and in the rank's own
 * flag. */
#define R_EXPECT(r, cond)        \
    do {                         \
        if (!CTEST_EXPECT(cond)) \
            (r)->failed = 1;     \
    } while (0)

#define R_EXPECT_OK(r, call)  \
    do {                      \
        if (!EXPECT_OK(call)) \
            (r)->failed = 1;  \
    } while (0)

static void *rank_main(void *arg)
{
    rank_ctx_t *r = arg;
    R_EXPECT_OK(r, hal_comm_init(r->id, r->nranks, r->rank, r->device, NULL, &r->comm));
    R_EXPECT_OK(r, hal_stream_create(r->device, 0, &r->stream));
    if (r->comm != NULL) {
        uintptr_t native = 0;
        hal_status_t st = hal_comm_get_native_handle(r->comm, &native);
        R_EXPECT(r, st == HAL_OK || st == HAL_ERROR_UNSUPPORTED);
        r->native = st == HAL_OK && native != 0;
    }
    if (!r->failed)
        r->fn(r);
    if (r->comm != NULL) {
        hal_status_t st = hal_comm_destroy(r->comm);
        R_EXPECT(r, st == HAL_OK || r->failed);
    }
    if (r->stream != NULL)
        hal_stream_destroy(r->stream);
    return NULL;
}

/* Runs fn on n ranks, rank i on device cores[i]; returns how many ranks took the native path,
 * or -1 if one failed. */
static int run_ranks(hal_backend_t b, int n, const uint32_t *cores, rank_fn fn, void *arg)
{
    hal_unique_id_t id;
    if (!EXPECT_OK(hal_comm_get_unique_id(0, &id)))
        return -1;
    rank_ctx_t ranks[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    for (int i = 0; i < n; i++) {
        ranks[i] = (rank_ctx_t){ .device = tt_device(b, cores[i]),
                                 .id = &id,
                                 .rank = i,
                                 .nranks = n,
                                 .fn = fn,
                                 .arg = arg };
        pthread_create(&threads[i], NULL, rank_main, &ranks[i]);
    }
    int native = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
        failed += ranks[i].failed;
        native += ranks[i].native;
    }
    return failed ? -1 : native;
}

static hal_backend_t open_cores(const char *visible)
{
    tt_setenv("NEURON_RT_VISIBLE_CORES", visible);
    hal_backend_t b = NULL;
    EXPECT_OK(tt_open(&b));
    return b;
}

/* ---- values ---------------------------------------------------------------------------------- */

static size_t esize(hal_dtype_t t)
{
    size_t s = 0;
    hal_dtype_get_size(t, &s);
    return s;
}

static uint16_t to_half(double v, bool bf16)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if (bf16)
        return (uint16_t)(u >> 16); /* exact for the small values used here */
    if (v == 0)
        return (uint16_t)((u >> 16) & 0x8000u);
    uint32_t sign = (u >> 16) & 0x8000u, exp = ((u >> 23) & 0xffu) - 127 + 15;
    return (uint16_t)(sign | (exp << 10) | ((u >> 13) & 0x3ffu));
}

static double from_half(uint16_t h, bool bf16)
{
    float f;
    uint32_t u;
    if (bf16) {
        u = (uint32_t)h << 16;
    } else if ((h & 0x7fffu) == 0) {
        u = (uint32_t)(h & 0x8000u) << 16;
    } else {
        u = ((uint32_t)(h & 0x8000u) << 16) | ((((h >> 10) & 0x1fu) - 15 + 127) << 23) |
            ((uint32_t)(h & 0x3ffu) << 13);
    }
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void put(void *buf, hal_dtype_t t, size_t i, double v)
{
    switch (t) {
    case HAL_DTYPE_I8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case HAL_DTYPE_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case HAL_DTYPE_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case HAL_DTYPE_U32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case HAL_DTYPE_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case HAL_DTYPE_U64:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
        ((uint16_t *)buf)[i] = to_half(v, t == HAL_DTYPE_BF16);
        break;
    case HAL_DTYPE_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case HAL_DTYPE_F64:
        ((double *)buf)[i] = v;
        break;
    default:
        break;
    }
}

static double get(const void *buf, hal_dtype_t t, size_t i)
{
    switch (t) {
    case HAL_DTYPE_I8:
        return ((const int8_t *)buf)[i];
    case HAL_DTYPE_U8:
        return ((const uint8_t *)buf)[i];
    case HAL_DTYPE_I32:
        return ((const int32_t *)buf)[i];
    case HAL_DTYPE_U32:
        return ((const uint32_t *)buf)[i];
    case HAL_DTYPE_I64:
        return (double)((const int64_t *)buf)[i];
    case HAL_DTYPE_U64:
        return (double)((const uint64_t *)buf)[i];
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
        return from_half(((const uint16_t *)buf)[i], t == HAL_DTYPE_BF16);
    case HAL_DTYPE_F32:
        return ((const float *)buf)[i];
    case HAL_DTYPE_F64:
        return ((const double *)buf)[i];
    default:
        return 0;
    }
}

static bool is_float(hal_dtype_t t)
{
    return t == HAL_DTYPE_F16 || t == HAL_DTYPE_BF16 || t == HAL_DTYPE_F32 || t == HAL_DTYPE_F64;
}

/* Rank r's element i: 1 to 3, or -1 to -3 for signed types at odd i (products and sums stay
 * exact and in range for 2 ranks). */
static double value(hal_dtype_t t, int r, size_t i)
{
    double v = (double)(1 + (int)((i + (size_t)r) % 3));
    bool is_signed = t == HAL_DTYPE_I8 || t == HAL_DTYPE_I32 || t == HAL_DTYPE_I64 || is_float(t);
    return is_signed && (i % 2) ? -v : v;
}

static double reduced(hal_dtype_t t, hal_redop_t op, int n, size_t i)
{
    double acc = value(t, 0, i);
    for (int r = 1; r < n; r++) {
        double v = value(t, r, i);
        acc = op == HAL_REDOP_PROD  ? acc * v
              : op == HAL_REDOP_MAX ? (acc > v ? acc : v)
              : op == HAL_REDOP_MIN ? (acc < v ? acc : v)
                                    : acc + v;
    }
    if (op == HAL_REDOP_AVG)
        acc = is_float(t) ? acc / n : (double)(long long)(acc / n); /* toward zero */
    return acc;
}

/* ---- a job of collectives -------------------------------------------------------------------- */

typedef struct job_spec {
    size_t count;
    bool in_place;
    hal_mem_kind_t send_kind, recv_kind;
} job_spec_t;

static void *alloc(rank_ctx_t *r, hal_mem_kind_t kind, size_t bytes)
{
    void *p = NULL;
    R_EXPECT_OK(r, hal_mem_alloc(r->device, kind, bytes, 0, &p));
    return p;
}

/* All-reduce (sum), all-gather, reduce-scatter (sum) and a broadcast (host-staged on every path)
 * of f32, checked. */
static void standard_rank(rank_ctx_t *r)
{
    const job_spec_t *spec = r->arg;
    const size_t n = spec->count, big = n * (size_t)r->nranks;
    const hal_dtype_t f32 = HAL_DTYPE_F32;
    float *host = NULL, *send = NULL, *recv = NULL;
    R_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, big * 4, 0, (void **)&host));
    send = alloc(r, spec->send_kind, big * 4);
    recv = alloc(r, spec->recv_kind, big * 4);
    hal_stream_t s = r->stream;
    if (r->failed)
        goto out;
    /* All-reduce, in place or not. */
    for (size_t i = 0; i < n; i++)
        put(host, f32, i, value(f32, r->rank, i) * 100 + (double)(i % 977));
    float *ar_out = spec->in_place ? send : recv;
    R_EXPECT_OK(r, hal_memcpy_async(send, host, n * 4, s));
    R_EXPECT_OK(r, hal_allreduce(send, ar_out, n, f32, HAL_REDOP_SUM, r->comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, ar_out, n * 4, s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < n && !r->failed; i++) {
        double want =
            reduced(f32, HAL_REDOP_SUM, r->nranks, i) * 100 + r->nranks * (double)(i % 977);
        if (host[i] != want) {
            fprintf(stderr, "rank %d: all-reduce[%zu] = %g, expected %g\n", r->rank, i,
                    (double)host[i], want);
            r->failed = 1;
        }
    }
    /* All-gather: in place, this rank's block is its place in the output. */
    float *ag_in = spec->in_place ? recv + (size_t)r->rank * n : send;
    for (size_t i = 0; i < n; i++)
        host[i] = (float)((r->rank + 1) * 1000 + (int)(i % 977));
    R_EXPECT_OK(r, hal_memcpy_async(ag_in, host, n * 4, s));
    R_EXPECT_OK(r, hal_allgather(ag_in, recv, n, f32, r->comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, recv, big * 4, s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < big && !r->failed; i++) {
        float want = (float)((int)(i / n + 1) * 1000 + (int)(i % n % 977));
        if (host[i] != want) {
            fprintf(stderr, "rank %d: all-gather[%zu] = %g, expected %g\n", r->rank, i,
                    (double)host[i], (double)want);
            r->failed = 1;
        }
    }
    /* Reduce-scatter: in place, the result lands on this rank's chunk of the input. */
    for (size_t i = 0; i < big; i++)
        host[i] = (float)(r->rank + 1 + (int)(i % 5));
    float *rs_out = spec->in_place ? send + (size_t)r->rank * n : recv;
    R_EXPECT_OK(r, hal_memcpy_async(send, host, big * 4, s));
    R_EXPECT_OK(r, hal_reduce_scatter(send, rs_out, n, f32, HAL_REDOP_SUM, r->comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, rs_out, n * 4, s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < n && !r->failed; i++) {
        size_t at = (size_t)r->rank * n + i;
        float want = 0;
        for (int q = 0; q < r->nranks; q++)
            want += (float)(q + 1 + (int)(at % 5));
        if (host[i] != want) {
            fprintf(stderr, "rank %d: reduce-scatter[%zu] = %g, expected %g\n", r->rank, i,
                    (double)host[i], (double)want);
            r->failed = 1;
        }
    }
    /* Broadcast from the last rank (the HAL's, in stream order with the native ones). */
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(r->rank * 7 + (int)(i % 13));
    R_EXPECT_OK(r, hal_memcpy_async(send, host, n * 4, s));
    R_EXPECT_OK(r, hal_broadcast(send, send, n, f32, r->nranks - 1, r->comm, s));
    R_EXPECT_OK(r, hal_memcpy_async(host, send, n * 4, s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    for (size_t i = 0; i < n && !r->failed; i++)
        if (host[i] != (float)((r->nranks - 1) * 7 + (int)(i % 13))) {
            fprintf(stderr, "rank %d: broadcast[%zu] = %g\n", r->rank, i, (double)host[i]);
            r->failed = 1;
        }
    R_EXPECT_OK(r, hal_comm_finalize(r->comm));
out:
    hal_mem_free(host);
    hal_mem_free(send);
    hal_mem_free(recv);
}

/* Two ranks on cores 0 and 1; expects the path `native`. */
static int two_ranks(const job_spec_t *spec, bool native)
{
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    hal_device_properties_t p = HAL_DEVICE_PROPERTIES_INIT;
    EXPECT_OK(hal_device_get_properties(tt_device(b, 0), &p));
    CTEST_EXPECT(((p.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) != 0) == native);
    static const uint32_t cores[] = { 0, 1 };
    int got = run_ranks(b, 2, cores, standard_rank, (void *)spec);
    if (got != (native ? 2 : 0))
        fprintf(stderr, "%d ranks took the native path\n", got);
    CTEST_EXPECT(got == (native ? 2 : 0));
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

static job_spec_t device_job(size_t count)
{
    return (job_spec_t){ .count = count,
                         .send_kind = HAL_MEM_KIND_DEVICE,
                         .recv_kind = HAL_MEM_KIND_DEVICE };
}

CTEST(TrnComm, NativeOne)
{
    tt_env_reset();
    job_spec_t s = device_job(1);
    return two_ranks(&s, true);
}

CTEST(TrnComm, NativeOdd)
{
    tt_env_reset();
    job_spec_t s = device_job(1023);
    return two_ranks(&s, true);
}

CTEST(TrnComm, NativeLarge)
{
    tt_env_reset();
    job_spec_t s = device_job((size_t)1 << 20);
    return two_ranks(&s, true);
}

/* In place: libnrt 2.30 has no in-place collectives, so the backend copies the input aside;
 * 2.31 (async API 3) runs them in place. */
CTEST(TrnComm, NativeInPlaceBothApis)
{
    tt_env_reset();
    job_spec_t s = device_job(1023);
    s.in_place = true;
    two_ranks(&s, true);
    tt_setenv("NEURON_EMU_RUNTIME_VERSION", "2.31.24.0");
    return two_ranks(&s, true);
}

/* Pinned host buffers are staged through device tensors of the core. */
CTEST(TrnComm, NativePinnedBuffers)
{
    tt_env_reset();
    job_spec_t s = device_job(777);
    s.send_kind = HAL_MEM_KIND_HOST_PINNED;
    two_ranks(&s, true);
    s.send_kind = HAL_MEM_KIND_DEVICE;
    s.recv_kind = HAL_MEM_KIND_HOST_PINNED;
    two_ranks(&s, true);
    s.in_place = true;
    s.send_kind = HAL_MEM_KIND_HOST_PINNED;
    return two_ranks(&s, true);
}

/* HAL_NEURON_NATIVE_COLLECTIVES=0: the HAL's host-staged collectives, same results. */
CTEST(TrnComm, HostStagedWhenDisabled)
{
    tt_env_reset();
    tt_setenv("HAL_NEURON_NATIVE_COLLECTIVES", "0");
    job_spec_t s = device_job(1023);
    two_ranks(&s, false);
    s.in_place = true;
    two_ranks(&s, false);
    s = device_job((size_t)1 << 20);
    return two_ranks(&s, false);
}

/* A runtime without the out-of-NEFF collectives (libnrt 2.29, SDK 2.27): host-staged, and the
 * path line says why. */
CTEST(TrnComm, HostStagedOnAnOlderRuntime)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("NEURON_EMU_RUNTIME_VERSION", "2.29.40.0");
    job_spec_t s = device_job(7);
    return two_ranks(&s, false);
}

/* ---- every type and operation ---------------------------------------------------------------- */

static const hal_dtype_t all_types[] = { HAL_DTYPE_I8,  HAL_DTYPE_U8,  HAL_DTYPE_I32, HAL_DTYPE_U32,
                                         HAL_DTYPE_I64, HAL_DTYPE_U64, HAL_DTYPE_F16, HAL_DTYPE_F32,
                                         HAL_DTYPE_F64, HAL_DTYPE_BF16 };
static const hal_redop_t all_ops[] = { HAL_REDOP_SUM, HAL_REDOP_PROD, HAL_REDOP_MAX, HAL_REDOP_MIN,
                                       HAL_REDOP_AVG };

static bool check(rank_ctx_t *r, const void *buf, hal_dtype_t t, size_t n, const char *what,
                  hal_redop_t op, size_t first)
{
    for (size_t i = 0; i < n; i++) {
        double want = reduced(t, op, r->nranks, first + i), got = get(buf, t, i);
        if (got != want) {
            fprintf(stderr, "rank %d: %s dtype %d op %d [%zu] = %g, expected %g\n", r->rank, what,
                    (int)t, (int)op, i, got, want);
            return false;
        }
    }
    return true;
}

/* The runtime reduces sum, max and min of 8- and 32-bit integers, f16, bf16 and f32 (AVG: its
 * sum, divided by the backend); the product and the 64-bit types are gathered by the runtime and
 * reduced by the backend. Every pair, all-reduce and reduce-scatter, and all-gather per type. */
static void types_rank(rank_ctx_t *r)
{
    enum { N = 9 };
    unsigned char *host = NULL, *send = NULL, *recv = NULL;
    R_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, 8 * N * MAX_RANKS, 0,
                                 (void **)&host));
    send = alloc(r, HAL_MEM_KIND_DEVICE, 8 * N * MAX_RANKS);
    recv = alloc(r, HAL_MEM_KIND_DEVICE, 8 * N * MAX_RANKS);
    hal_stream_t s = r->stream;
    for (size_t ti = 0; ti < sizeof(all_types) / sizeof(all_types[0]) && !r->failed; ti++) {
        hal_dtype_t t = all_types[ti];
        size_t es = esize(t), nr = (size_t)r->nranks;
        for (size_t oi = 0; oi < sizeof(all_ops) / sizeof(all_ops[0]) && !r->failed; oi++) {
            hal_redop_t op = all_ops[oi];
            for (size_t i = 0; i < N * nr; i++)
                put(host, t, i, value(t, r->rank, i));
            R_EXPECT_OK(r, hal_memcpy_async(send, host, N * nr * es, s));
            R_EXPECT_OK(r, hal_allreduce(send, recv, N, t, op, r->comm, s));
            R_EXPECT_OK(r, hal_memcpy_async(host, recv, N * es, s));
            R_EXPECT_OK(r, hal_stream_synchronize(s));
            if (!r->failed && !check(r, host, t, N, "all-reduce", op, 0))
                r->failed = 1;
            for (size_t i = 0; i < N * nr; i++)
                put(host, t, i, value(t, r->rank, i));
            R_EXPECT_OK(r, hal_memcpy_async(send, host, N * nr * es, s));
            R_EXPECT_OK(r, hal_reduce_scatter(send, recv, N, t, op, r->comm, s));
            R_EXPECT_OK(r, hal_memcpy_async(host, recv, N * es, s));
            R_EXPECT_OK(r, hal_stream_synchronize(s));
            if (!r->failed && !check(r, host, t, N, "reduce-scatter", op, (size_t)r->rank * N))
                r->failed = 1;
        }
        for (size_t i = 0; i < N; i++)
            put(host, t, i, value(t, r->rank, i));
        R_EXPECT_OK(r, hal_memcpy_async(send, host, N * es, s));
        R_EXPECT_OK(r, hal_allgather(send, recv, N, t, r->comm, s));
        R_EXPECT_OK(r, hal_memcpy_async(host, recv, N * nr * es, s));
        R_EXPECT_OK(r, hal_stream_synchronize(s));
        for (size_t i = 0; i < N * nr && !r->failed; i++)
            if (get(host, t, i) != value(t, (int)(i / N), i % N)) {
                fprintf(stderr, "rank %d: all-gather dtype %d [%zu]\n", r->rank, (int)t, i);
                r->failed = 1;
            }
    }
    hal_mem_free(host);
    hal_mem_free(send);
    hal_mem_free(recv);
}

CTEST(TrnComm, EveryTypeAndOperation)
{
    tt_env_reset();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    static const uint32_t cores[] = { 0, 1 };
    CTEST_EXPECT(run_ranks(b, 2, cores, types_rank, NULL) == 2);
    EXPECT_OK(hal_backend_close(b));
    /* The same on the host path: both give the same bits. */
    tt_setenv("HAL_NEURON_NATIVE_COLLECTIVES", "0");
    b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    CTEST_EXPECT(run_ranks(b, 2, cores, types_rank, NULL) == 0);
    EXPECT_OK(hal_backend_close(b));
    tt_env_reset();
    return CTEST_PASS;
}

/* ---- which communicators are native ---------------------------------------------------------- */

/* Ranks that share a core use the host (the runtime has one rank per core). */
CTEST(TrnComm, RanksSharingACoreUseTheHost)
{
    tt_env_reset();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    static const uint32_t cores[] = { 0, 1, 0 };
    job_spec_t s = device_job(100);
    CTEST_EXPECT(run_ranks(b, 3, cores, standard_rank, &s) == 0);
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

typedef struct pair_state {
    hal_comm_t comms[2];
    bool native[2];
} pair_state_t;

static void keep_comm(rank_ctx_t *r)
{
    pair_state_t *p = r->arg;
    p->comms[r->rank] = r->comm;
    p->native[r->rank] = r->native;
    r->comm = NULL; /* destroyed by the test, later */
}

/* One native communicator per core at a time: a second one over the same cores, while the first
 * lives, uses the host; once the first is gone, a new one (ranks on the other cores) is native
 * again, as a replica group of the global communicator the first one built. */
CTEST(TrnComm, OneNativeCommunicatorPerCore)
{
    tt_env_reset();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    static const uint32_t cores[] = { 0, 1 }, swapped[] = { 1, 0 };
    pair_state_t first = { { NULL, NULL }, { false, false } };
    CTEST_EXPECT(run_ranks(b, 2, cores, keep_comm, &first) == 2);
    job_spec_t s = device_job(50);
    CTEST_EXPECT(run_ranks(b, 2, cores, standard_rank, &s) == 0); /* the second: host */
    for (int i = 0; i < 2; i++)
        if (first.comms[i] != NULL)
            EXPECT_OK(hal_comm_destroy(first.comms[i]));
    pair_state_t again = { { NULL, NULL }, { false, false } };
    CTEST_EXPECT(run_ranks(b, 2, swapped, keep_comm, &again) == 2);
    /* Rank 0 is on core 1, global device 1 of the first communicator. */
    uintptr_t native = 0;
    if (again.comms[0] != NULL && EXPECT_OK(hal_comm_get_native_handle(again.comms[0], &native))) {
        const nrt_cc_comm_t *cc = (const nrt_cc_comm_t *)native;
        CTEST_EXPECT(cc->rank == 0 && cc->rank_n == 2 && cc->ctx_device_count == 2);
        CTEST_EXPECT(cc->replica_group[0] == 1 && cc->replica_group[1] == 0);
        CTEST_EXPECT(cc->vnc == 1);
    }
    for (int i = 0; i < 2; i++)
        if (again.comms[i] != NULL)
            EXPECT_OK(hal_comm_destroy(again.comms[i]));
    CTEST_EXPECT(run_ranks(b, 2, swapped, standard_rank, &s) == 2);
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* ---- failures -------------------------------------------------------------------------------- */

/* Ranks that disagree (count 7 and 8) both fail with HAL_ERROR_INVALID_ARGUMENT, latched on the
 * communicator and the stream, and their receive buffers keep what they held. */
static void disagree_rank(rank_ctx_t *r)
{
    float *host = NULL, *send = NULL, *recv = NULL;
    R_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, 64, 0, (void **)&host));
    send = alloc(r, HAL_MEM_KIND_DEVICE, 64);
    recv = alloc(r, HAL_MEM_KIND_DEVICE, 64);
    if (r->failed)
        goto out;
    for (int i = 0; i < 16; i++)
        host[i] = 5;
    R_EXPECT_OK(r, hal_memcpy_async(send, host, 64, r->stream));
    R_EXPECT_OK(r, hal_memcpy_async(recv, host, 64, r->stream));
    R_EXPECT_OK(r, hal_allreduce(send, recv, r->rank == 0 ? 7 : 8, HAL_DTYPE_F32, HAL_REDOP_SUM,
                                 r->comm, r->stream));
    hal_status_t st = hal_stream_synchronize(r->stream);
    R_EXPECT(r, st == HAL_ERROR_INVALID_ARGUMENT);
    R_EXPECT(r, strstr(hal_last_error_message(), "the ranks disagree") != NULL);
    hal_status_t async = HAL_OK;
    R_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    R_EXPECT(r, async == HAL_ERROR_INVALID_ARGUMENT);
    /* Sticky, on the native path and the host one. */
    R_EXPECT(r, hal_allreduce(send, recv, 7, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm, r->stream) ==
                    HAL_ERROR_INVALID_ARGUMENT);
    R_EXPECT(r, hal_barrier(r->comm, r->stream) == HAL_ERROR_INVALID_ARGUMENT);
    R_EXPECT(r, hal_comm_finalize(r->comm) == HAL_ERROR_INVALID_ARGUMENT);
    hal_stream_t spare = NULL;
    R_EXPECT_OK(r, hal_stream_create(r->device, 0, &spare));
    memset(host, 0, 64);
    R_EXPECT_OK(r, hal_memcpy_async(host, recv, 64, spare));
    R_EXPECT_OK(r, hal_stream_synchronize(spare));
    R_EXPECT(r, host[0] == 5 && host[15] == 5);
    hal_stream_destroy(spare);
    R_EXPECT(r, hal_comm_destroy(r->comm) == HAL_ERROR_INVALID_ARGUMENT);
    r->comm = NULL;
    hal_stream_destroy(r->stream);
    r->stream = NULL;
out:
    hal_mem_free(host);
    hal_mem_free(send);
    hal_mem_free(recv);
}

CTEST(TrnComm, DisagreeingRanksFailAlike)
{
    tt_env_reset();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    static const uint32_t cores[] = { 0, 1 };
    CTEST_EXPECT(run_ranks(b, 2, cores, disagree_rank, NULL) == 2);
    EXPECT_OK(hal_backend_close(b));
    return CTEST_PASS;
}

/* ---- the host-staged pipeline ---------------------------------------------------------------- */

/* Staged bytes per chunk in these tests (HAL_COMM_STAGING_CHUNK): small, so that a few hundred
 * KiB span several chunks. */
#define PIPE_CHUNK       "65536"
#define PIPE_CHUNK_BYTES 65536u

/* A clean environment for the host-staged path with the tests' chunks. */
static void pipeline_env(void)
{
    tt_env_reset();
    tt_setenv("HAL_NEURON_NATIVE_COLLECTIVES", "0");
    tt_setenv("HAL_COMM_STAGING_CHUNK", PIPE_CHUNK);
}

typedef enum pipe_kind {
    PK_ALLREDUCE,
    PK_BROADCAST,
    PK_REDUCE,
    PK_ALLGATHER,
    PK_REDUCE_SCATTER,
    PK_ALLTOALL,
    PK_COUNT
} pipe_kind_t;

static const char *const pipe_kind_names[PK_COUNT] = {
    "all-reduce", "broadcast", "reduce", "all-gather", "reduce-scatter", "all-to-all",
};

/* The kinds whose buffers hold one block of `count` elements per rank (send, receive). */
static bool send_blocked(pipe_kind_t k)
{
    return k == PK_REDUCE_SCATTER || k == PK_ALLTOALL;
}

static bool recv_blocked(pipe_kind_t k)
{
    return k == PK_ALLGATHER || k == PK_ALLTOALL;
}

static hal_status_t pipe_issue(rank_ctx_t *r, pipe_kind_t k, const void *send, void *recv,
                               size_t count, hal_dtype_t t)
{
    hal_comm_t c = r->comm;
    hal_stream_t s = r->stream;
    switch (k) {
    case PK_ALLREDUCE:
        return hal_allreduce(send, recv, count, t, HAL_REDOP_SUM, c, s);
    case PK_BROADCAST:
        return hal_broadcast(send, recv, count, t, r->nranks - 1, c, s);
    case PK_REDUCE:
        return hal_reduce(send, recv, count, t, HAL_REDOP_SUM, 1, c, s);
    case PK_ALLGATHER:
        return hal_allgather(send, recv, count, t, c, s);
    case PK_REDUCE_SCATTER:
        return hal_reduce_scatter(send, recv, count, t, HAL_REDOP_SUM, c, s);
    default:
        return hal_alltoall(send, recv, count, t, c, s);
    }
}

/* Element i of the result of kind k on this rank (rank p's input element j is value(t, p, j)). */
static double pipe_expected(const rank_ctx_t *r, pipe_kind_t k, hal_dtype_t t, size_t count,
                            size_t i)
{
    int n = r->nranks, p = (int)(i / count);
    switch (k) {
    case PK_ALLREDUCE:
    case PK_REDUCE:
        return reduced(t, HAL_REDOP_SUM, n, i);
    case PK_BROADCAST:
        return value(t, n - 1, i);
    case PK_ALLGATHER:
        return value(t, p, i % count);
    case PK_REDUCE_SCATTER:
        return reduced(t, HAL_REDOP_SUM, n, (size_t)r->rank * count + i);
    default:
        return value(t, p, (size_t)r->rank * count + i % count);
    }
}

/* One case: inputs uploaded from pinned memory, the collective, the result downloaded and
 * compared element by element. In place as NCCL defines it: the same buffer, this rank's block of
 * the receive buffer (all-gather) or of the send buffer (reduce-scatter). */
static void pipe_case(rank_ctx_t *r, pipe_kind_t k, hal_dtype_t t, size_t count, bool in_place,
                      unsigned char *host, unsigned char *a, unsigned char *b)
{
    const size_t es = esize(t), nr = (size_t)r->nranks, me = (size_t)r->rank;
    size_t ns = send_blocked(k) ? nr * count : count, nrecv = recv_blocked(k) ? nr * count : count;
    unsigned char *send = a, *recv = in_place ? a : b;
    if (in_place && k == PK_ALLGATHER)
        send = a + me * count * es;
    if (in_place && k == PK_REDUCE_SCATTER)
        recv = a + me * count * es;
    for (size_t j = 0; j < ns; j++)
        put(host, t, j, value(t, r->rank, j));
    hal_stream_t s = r->stream;
    R_EXPECT_OK(r, hal_memcpy_async(send, host, ns * es, s));
    R_EXPECT_OK(r, pipe_issue(r, k, send, recv, count, t));
    R_EXPECT_OK(r, hal_memcpy_async(host, recv, nrecv * es, s));
    R_EXPECT_OK(r, hal_stream_synchronize(s));
    if (k == PK_REDUCE && r->rank != 1)
        return; /* only the root receives */
    for (size_t i = 0; i < nrecv && !r->failed; i++) {
        double want = pipe_expected(r, k, t, count, i), got = get(host, t, i);
        if (got != want) {
            fprintf(stderr, "rank %d: %s of %zu dtype %d%s [%zu] = %g, expected %g\n", r->rank,
                    pipe_kind_names[k], count, (int)t, in_place ? " in place" : "", i, got, want);
            r->failed = 1;
        }
    }
}

/* Every kind, in place and not, in f32 and u8 with counts whose chunks end in odd tails (with
 * 64 KiB chunks: 3 chunks of the unblocked kinds, 7 of the blocked ones at 3 ranks). The
 * rank's buffers are of the kind in arg[rank]. */
static void pipe_rank(rank_ctx_t *r)
{
    static const hal_dtype_t types[] = { HAL_DTYPE_F32, HAL_DTYPE_U8 };
    static const size_t counts[] = { 37501, 150001 };
    const hal_mem_kind_t *kinds = r->arg;
    const size_t bytes = (size_t)r->nranks * 150004;
    unsigned char *host = NULL, *a = NULL, *b = NULL;
    R_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, bytes, 0, (void **)&host));
    a = alloc(r, kinds[r->rank], bytes);
    b = alloc(r, kinds[r->rank], bytes);
    for (size_t ti = 0; ti < 2; ti++)
        for (int k = 0; k < PK_COUNT; k++)
            for (int in_place = 0; in_place < 2 && !r->failed; in_place++)
                pipe_case(r, (pipe_kind_t)k, types[ti], counts[ti], in_place, host, a, b);
    R_EXPECT_OK(r, hal_comm_finalize(r->comm));
    hal_mem_free(host);
    hal_mem_free(a);
    hal_mem_free(b);
}

/* Collectives that span several chunks of the host-staged pipeline, with odd tails, bit for bit,
 * on 3 ranks (two sharing a core). Rank 1's buffers are pinned host memory: its peers cut the
 * collectives alike all the same, and it stages only what the blocked kinds need. */
CTEST(TrnComm, HostStagedPipelineOddTails)
{
    pipeline_env();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    static const uint32_t cores[] = { 0, 1, 0 };
    static const hal_mem_kind_t kinds[] = { HAL_MEM_KIND_DEVICE, HAL_MEM_KIND_HOST_PINNED,
                                            HAL_MEM_KIND_DEVICE };
    CTEST_EXPECT(run_ranks(b, 3, cores, pipe_rank, (void *)kinds) == 0);
    EXPECT_OK(hal_backend_close(b));
    tt_env_reset();
    return CTEST_PASS;
}

/* ---- the pipeline's copies, counted by the emulator ---- */

typedef struct counted {
    size_t count; /* f32 elements of the all-reduce */
    pthread_barrier_t barrier;
    nrt_emu_get_dma_stats_fn *stats;
    uint64_t before, after;
} counted_t;

static uint64_t dma_transfers(counted_t *c)
{
    nrt_emu_dma_stats_t s = { 0 };
    return c->stats(&s, sizeof(s)) == NRT_SUCCESS ? s.transfers : 0;
}

/* Uploads, then (between barriers, so that nothing else moves) one in-place all-reduce, then
 * downloads and checks. */
static void counted_rank(rank_ctx_t *r)
{
    counted_t *c = r->arg;
    float *host = NULL, *dev = alloc(r, HAL_MEM_KIND_DEVICE, c->count * 4);
    R_EXPECT_OK(
        r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, c->count * 4, 0, (void **)&host));
    if (host != NULL)
        for (size_t i = 0; i < c->count; i++)
            host[i] = (float)(r->rank + 1);
    R_EXPECT_OK(r, hal_memcpy_async(dev, host, c->count * 4, r->stream));
    R_EXPECT_OK(r, hal_stream_synchronize(r->stream));
    pthread_barrier_wait(&c->barrier);
    if (r->rank == 0)
        c->before = dma_transfers(c);
    pthread_barrier_wait(&c->barrier);
    R_EXPECT_OK(
        r, hal_allreduce(dev, dev, c->count, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm, r->stream));
    R_EXPECT_OK(r, hal_stream_synchronize(r->stream));
    pthread_barrier_wait(&c->barrier);
    if (r->rank == 0)
        c->after = dma_transfers(c);
    pthread_barrier_wait(&c->barrier);
    R_EXPECT_OK(r, hal_memcpy_async(host, dev, c->count * 4, r->stream));
    R_EXPECT_OK(r, hal_stream_synchronize(r->stream));
    for (size_t i = 0; host != NULL && i < c->count && !r->failed; i++)
        R_EXPECT(r, host[i] == 3.0f);
    hal_mem_free(host);
    hal_mem_free(dev);
}

/* Transfers of one all-reduce of 3.5 chunks on 2 ranks, with the given chunk setting. */
static uint64_t counted_allreduce(const char *chunk)
{
    tt_setenv("HAL_COMM_STAGING_CHUNK", chunk);
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return 0;
    counted_t c = { .count = PIPE_CHUNK_BYTES / 4 * 7 / 2 };
    /* The backend loaded the emulator already: this finds it, and its counters. */
    void *lib = dlopen(getenv("HAL_NEURON_LIBNRT"), RTLD_NOW | RTLD_NOLOAD);
    c.stats = lib != NULL ? (nrt_emu_get_dma_stats_fn *)dlsym(lib, "nrt_emu_get_dma_stats") : NULL;
    CTEST_EXPECT(c.stats != NULL);
    pthread_barrier_init(&c.barrier, NULL, 2);
    static const uint32_t cores[] = { 0, 1 };
    if (c.stats != NULL)
        CTEST_EXPECT(run_ranks(b, 2, cores, counted_rank, &c) == 0);
    pthread_barrier_destroy(&c.barrier);
    if (lib != NULL)
        dlclose(lib);
    EXPECT_OK(hal_backend_close(b));
    return c.after - c.before;
}

/* The pipeline moves a collective chunk by chunk: an all-reduce of 3.5 chunks is 4
 * device-to-host and 4 host-to-device copies per rank; with the pipeline off
 * (HAL_COMM_STAGING_CHUNK=0), one of each. */
CTEST(TrnComm, HostStagedPipelineCopiesByChunk)
{
    TT_REQUIRE_EMULATOR();
    tt_env_reset();
    tt_setenv("HAL_NEURON_NATIVE_COLLECTIVES", "0");
    tt_setenv("NEURON_EMU_DMA_GBPS", "1000"); /* the counters count modelled transfers */
    uint64_t piped = counted_allreduce(PIPE_CHUNK), whole = counted_allreduce("0");
    if (piped != 2 * 2 * 4 || whole != 2 * 2)
        fprintf(stderr, "transfers: %llu pipelined, %llu in one piece\n", (unsigned long long)piped,
                (unsigned long long)whole);
    CTEST_EXPECT(piped == 2 * 2 * 4);
    CTEST_EXPECT(whole == 2 * 2);
    tt_env_reset();
    return CTEST_PASS;
}

/* ---- a copy that fails in the middle of a pipelined collective ---- */

typedef struct midway {
    size_t count;
    hal_status_t status[MAX_RANKS];
    char message[MAX_RANKS][512];
} midway_t;

/* An all-reduce of 8 chunks that fails on some rank; then what every rank sees. */
static void midway_rank(rank_ctx_t *r)
{
    midway_t *m = r->arg;
    float *host = NULL, *dev = alloc(r, HAL_MEM_KIND_DEVICE, m->count * 4);
    R_EXPECT_OK(
        r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, m->count * 4, 0, (void **)&host));
    if (r->failed)
        goto out;
    memset(host, 0, m->count * 4);
    R_EXPECT_OK(r, hal_memcpy_async(dev, host, m->count * 4, r->stream));
    R_EXPECT_OK(
        r, hal_allreduce(dev, dev, m->count, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm, r->stream));
    hal_status_t st = hal_stream_synchronize(r->stream);
    m->status[r->rank] = st;
    snprintf(m->message[r->rank], sizeof(m->message[r->rank]), "%s", hal_last_error_message());
    R_EXPECT(r, st != HAL_OK);
    /* Latched on the communicator, sticky for later collectives (refused at once), and reported
     * by destroy. */
    hal_status_t async = HAL_OK;
    R_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    R_EXPECT(r, async == st);
    R_EXPECT(r, hal_allreduce(dev, dev, m->count, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm,
                              r->stream) == st);
    R_EXPECT(r, hal_comm_destroy(r->comm) == st);
    r->comm = NULL;
out:
    hal_mem_free(host);
    hal_mem_free(dev);
}

/* Runs the failing all-reduce on 2 ranks; returns the rank whose copy failed (the one whose
 * status is not HAL_ERROR_REMOTE), or -1 after reporting why not exactly one. */
static int midway_job(midway_t *m)
{
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return -1;
    static const uint32_t cores[] = { 0, 1 };
    CTEST_EXPECT(run_ranks(b, 2, cores, midway_rank, m) == 0);
    EXPECT_OK(hal_backend_close(b));
    int failed = -1, remote = 0;
    for (int i = 0; i < 2; i++) {
        if (m->status[i] == HAL_ERROR_REMOTE)
            remote++;
        else
            failed = i;
    }
    if (remote != 1 || failed < 0) {
        fprintf(stderr, "statuses %d (%s) and %d (%s)\n", (int)m->status[0], m->message[0],
                (int)m->status[1], m->message[1]);
        CTEST_EXPECT(remote == 1 && failed >= 0);
        return -1;
    }
    return failed;
}

/* The emulator fails the 6th nrt_tensor_read of the process: a device-to-host copy of a chunk
 * after the first (a rank's copy-in runs at most 3 chunks ahead of its peers), on one rank. */
CTEST(TrnComm, HostStagedPipelineCopyInFailsMidway)
{
    TT_REQUIRE_EMULATOR();
    pipeline_env();
    tt_setenv("NEURON_EMU_FAULTS", "read_fail_after=5:1");
    midway_t m = { .count = PIPE_CHUNK_BYTES / 4 * 8 };
    int failed = midway_job(&m);
    if (failed >= 0) {
        CTEST_EXPECT(m.status[failed] == HAL_ERROR_BACKEND_SPECIFIC);
        CTEST_EXPECT(strstr(m.message[failed], "the device-to-host copy of staged chunk") != NULL);
        CTEST_EXPECT(strstr(m.message[failed], "of 8 failed") != NULL);
        CTEST_EXPECT(strstr(m.message[failed], "nrt_tensor_read") != NULL);
        CTEST_EXPECT(strstr(m.message[failed], "staged chunk 0 ") == NULL);
    }
    tt_env_reset();
    return CTEST_PASS;
}

/* The faults layer fails the stream after rank 0's third host-to-device copy (its memcpy_async
 * calls: the upload, 8 chunks in, then the chunks out): that rank reports it, naming chunk 2; its
 * engine stops before the last chunk, so its peer cannot finish and sees HAL_ERROR_REMOTE. */
CTEST(TrnComm, HostStagedPipelineCopyOutFailsMidway)
{
    pipeline_env();
    tt_setenv("HAL_LAYERS", "faults");
    tt_setenv("HAL_FAULTS", "stream_fail:after=11,count=1,device=0");
    midway_t m = { .count = PIPE_CHUNK_BYTES / 4 * 8 };
    int failed = midway_job(&m);
    tt_setenv("HAL_LAYERS", NULL);
    tt_setenv("HAL_FAULTS", NULL);
    CTEST_EXPECT(failed == 0);
    if (failed == 0) {
        CTEST_EXPECT(m.status[0] == HAL_ERROR_BACKEND_SPECIFIC);
        CTEST_EXPECT(strstr(m.message[0], "the host-to-device copy of staged chunk 2 of 8") !=
                     NULL);
        CTEST_EXPECT(strstr(m.message[0], "injected stream failure") != NULL);
    }
    tt_env_reset();
    return CTEST_PASS;
}

/* HAL_COMM_STAGING_CHUNK: hal_comm_init refuses a malformed or out-of-range value (before any
 * rendezvous, leaving no communicator) and takes 0 (no pipeline) and the bounds; a one-rank
 * communicator pipelines with the smallest chunks. */
CTEST(TrnComm, StagingChunkSetting)
{
    tt_env_reset();
    tt_setenv("HAL_NEURON_NATIVE_COLLECTIVES", "0");
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    hal_device_t dev = tt_device(b, 0);
    hal_unique_id_t id;
    hal_comm_t comm = NULL;
    static const char *const bad[] = { "x", "4095", "1073741825", "-1", "+4096", "4096k", " 1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tt_setenv("HAL_COMM_STAGING_CHUNK", bad[i]);
        EXPECT_OK(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id));
        EXPECT_STATUS(hal_comm_init(&id, 1, 0, dev, NULL, &comm), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("HAL_COMM_STAGING_CHUNK");
        CTEST_EXPECT(comm == NULL);
    }
    static const char *const good[] = { "0", "1073741824", "4096" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        tt_setenv("HAL_COMM_STAGING_CHUNK", good[i]);
        EXPECT_OK(hal_comm_get_unique_id(0, &id));
        comm = NULL;
        EXPECT_OK(hal_comm_init(&id, 1, 0, dev, NULL, &comm));
        if (comm != NULL)
            EXPECT_OK(hal_comm_destroy(comm));
    }
    /* The last one, 4096: an all-reduce of 5 chunks and a bit on one rank. */
    static const uint32_t cores[] = { 0 };
    job_spec_t s = device_job(4096 / 4 * 5 + 3);
    CTEST_EXPECT(run_ranks(b, 1, cores, standard_rank, &s) == 0);
    EXPECT_OK(hal_backend_close(b));
    tt_env_reset();
    return CTEST_PASS;
}

/* ---- a peer that leaves during a pipelined collective ---- */

typedef struct leaving {
    size_t count;
    pthread_barrier_t barrier;
    hal_status_t status; /* rank 0's */
} leaving_t;

/* Rank 0 runs a pipelined all-reduce that rank 1 never joins: rank 1 aborts its communicator
 * once rank 0's is enqueued. */
static void leaving_rank(rank_ctx_t *r)
{
    leaving_t *l = r->arg;
    float *dev = alloc(r, HAL_MEM_KIND_DEVICE, l->count * 4);
    if (r->rank == 1) {
        pthread_barrier_wait(&l->barrier);
        struct timespec pause = { 0, 20 * 1000 * 1000 };
        nanosleep(&pause, NULL);
        R_EXPECT_OK(r, hal_comm_abort(r->comm));
        R_EXPECT_OK(r, hal_comm_destroy(r->comm)); /* an abort it asked for */
        r->comm = NULL;
        hal_mem_free(dev);
        return;
    }
    R_EXPECT_OK(r, hal_memset_async(dev, 0, l->count * 4, r->stream));
    R_EXPECT_OK(
        r, hal_allreduce(dev, dev, l->count, HAL_DTYPE_F32, HAL_REDOP_SUM, r->comm, r->stream));
    pthread_barrier_wait(&l->barrier);
    l->status = hal_stream_synchronize(r->stream);
    hal_status_t async = HAL_OK;
    R_EXPECT_OK(r, hal_comm_get_async_error(r->comm, &async));
    R_EXPECT(r, async == l->status);
    R_EXPECT(r, hal_comm_destroy(r->comm) == l->status);
    r->comm = NULL;
    hal_mem_free(dev);
}

/* The pipeline's host function stops at the engine's HAL_ERROR_REMOTE, drains its copies and
 * fails the stream; nothing waits for the communicator's timeout. */
CTEST(TrnComm, HostStagedPipelinePeerLeaves)
{
    pipeline_env();
    hal_backend_t b = open_cores("0-1");
    if (b == NULL)
        return CTEST_FAIL;
    leaving_t l = { .count = PIPE_CHUNK_BYTES / 4 * 8, .status = HAL_OK };
    pthread_barrier_init(&l.barrier, NULL, 2);
    static const uint32_t cores[] = { 0, 1 };
    CTEST_EXPECT(run_ranks(b, 2, cores, leaving_rank, &l) == 0);
    pthread_barrier_destroy(&l.barrier);
    if (l.status != HAL_ERROR_REMOTE)
        fprintf(stderr, "rank 0: %s\n", hal_status_string(l.status));
    CTEST_EXPECT(l.status == HAL_ERROR_REMOTE);
    EXPECT_OK(hal_backend_close(b));
    tt_env_reset();
    return CTEST_PASS;
}
