/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: collectives on both paths. Native: the runtime's out-of-NEFF collectives
 * (all-reduce, all-gather, reduce-scatter), chosen per communicator by the backend; host-staged:
 * the HAL's own (HAL_NEURON_NATIVE_COLLECTIVES=0, and every communicator the runtime cannot
 * serve: ranks sharing a core, a second communicator on a core, a runtime without the
 * collectives). Ranks are threads of this process, on NeuronCores of the emulator; inputs are
 * exact (small integers), results compared bit for bit. hal_comm_get_native_handle tells the
 * paths apart: the runtime's communicator, or HAL_ERROR_UNSUPPORTED where the HAL runs them. */
#include <stdlib.h>

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
