/* SPDX-License-Identifier: Apache-2.0 */
/* The host collective engine's collectives: every kind, every (dtype, op) of allreduce, counts
 * {0, 1, 7, 1023, large}, in place and out of place, every root, 1..4 ranks as threads, as
 * processes (staged through shared memory, or in place through IPC), as a mix of both, and
 * over TCP. Inputs are small integers (and signs), so every result is exact and compared
 * bit for bit (AVG of floating types within 2 ULP). Values repeat with a prime period, which
 * keeps the reference cheap for large counts while still catching misplaced blocks. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "hal/tests/comm/engine_test_util.h"
#include "tools/ctest/ctest.h"

#define PERIOD 61
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer sends every access through its runtime: fewer elements, the same paths. */
#define LARGE ((size_t)(1u << 16) + 3)
#else
#define LARGE ((size_t)(1u << 20) + 3)
#endif

static bool is_float(hal_dtype_t dt)
{
    return dt == HAL_DTYPE_F16 || dt == HAL_DTYPE_F32 || dt == HAL_DTYPE_F64 ||
           dt == HAL_DTYPE_BF16 || dt == HAL_DTYPE_F8_E4M3 || dt == HAL_DTYPE_F8_E5M2;
}

static bool is_signed(hal_dtype_t dt)
{
    return is_float(dt) || dt == HAL_DTYPE_I8 || dt == HAL_DTYPE_I32 || dt == HAL_DTYPE_I64;
}

/* Rank r's input at residue k for a reduction: exact for every dtype over up to 4 ranks (sums
 * within [-8, 8], products of +-1 and +-2, max/min over [-4, 8]). */
static double reduce_input(hal_dtype_t dt, hal_redop_t op, int r, size_t k)
{
    size_t ur = (size_t)r;
    double v;
    switch (op) {
    case HAL_REDOP_PROD:
        v = (k * 5 + ur * 3) % 4 == 0 ? 2 : 1;
        if (is_signed(dt) && (k + ur) % 5 == 0)
            v = -v;
        return v;
    case HAL_REDOP_MAX:
    case HAL_REDOP_MIN:
        v = (double)((k * 7 + ur * 13) % 9);
        return is_signed(dt) ? v - 4 : v;
    default:
        v = (double)((k * 3 + ur * 5) % 3);
        if (is_signed(dt) && v != 0 && (k + ur) % 4 == 0)
            v = -v;
        return v;
    }
}

/* Rank r's input at residue k for data movement (exact everywhere, differs between ranks). */
static double plain_input(int r, size_t k)
{
    return (double)((k * 7 + (size_t)r * 11) % 9);
}

typedef struct expect {
    hal_dtype_t dtype;
    unsigned char bytes[PERIOD][8];
    double val[PERIOD];
    bool tolerance;
} expect_t;

static void expect_reduce(hal_dtype_t dt, hal_redop_t op, int n, expect_t *e)
{
    e->dtype = dt;
    e->tolerance = op == HAL_REDOP_AVG && is_float(dt);
    for (size_t k = 0; k < PERIOD; k++) {
        double acc = reduce_input(dt, op, 0, k);
        for (int r = 1; r < n; r++) {
            double v = reduce_input(dt, op, r, k);
            switch (op) {
            case HAL_REDOP_PROD:
                acc *= v;
                break;
            case HAL_REDOP_MAX:
                acc = v > acc ? v : acc;
                break;
            case HAL_REDOP_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        if (op == HAL_REDOP_AVG)
            acc = is_float(dt) ? acc / n : trunc(acc / n);
        e->val[k] = acc;
        et_encode(dt, acc, e->bytes[k]);
    }
}

static void expect_plain(hal_dtype_t dt, int src, expect_t *e)
{
    e->dtype = dt;
    e->tolerance = false;
    for (size_t k = 0; k < PERIOD; k++) {
        e->val[k] = plain_input(src, k);
        et_encode(dt, e->val[k], e->bytes[k]);
    }
}

/* Fills count elements whose global indices start at base with rank r's inputs. */
static void fill(hal_dtype_t dt, const expect_t *pattern, void *buf, size_t count, size_t base)
{
    size_t es = et_dtype_size(dt);
    unsigned char *p = buf;
    for (size_t i = 0; i < count; i++)
        memcpy(p + i * es, pattern->bytes[(base + i) % PERIOD], es);
}

static void input_reduce(hal_dtype_t dt, hal_redop_t op, int r, expect_t *e)
{
    e->dtype = dt;
    for (size_t k = 0; k < PERIOD; k++)
        et_encode(dt, reduce_input(dt, op, r, k), e->bytes[k]);
}

static int check(et_rank_t *r, const char *what, const expect_t *e, const void *got, size_t count,
                 size_t base)
{
    size_t es = et_dtype_size(e->dtype);
    const unsigned char *p = got;
    for (size_t i = 0; i < count; i++) {
        size_t k = (base + i) % PERIOD;
        bool ok;
        if (e->tolerance) {
            double g = et_decode(e->dtype, p + i * es);
            ok = fabs(g - e->val[k]) <= 2 * et_ulp(e->dtype, e->val[k]);
        } else {
            ok = memcmp(p + i * es, e->bytes[k], es) == 0;
        }
        if (!ok)
            return ET_FAIL(r, "%s: element %zu of %zu is %g, expected %g", what, i, count,
                           et_decode(e->dtype, p + i * es), e->val[k]);
    }
    return 0;
}

static hal_status_t run1(et_rank_t *r, hal_engine_op_t *op)
{
    et_attach_ipc(r, op);
    return hal_engine_run(r->comm, op, 1);
}

/* ---- allreduce: every (dtype, op) ---- */

typedef struct ar_plan {
    const size_t *counts;
    int ncounts;
    bool large_in_place, large_out_of_place;
    int dtype_stride; /* 1: every dtype; k: every k-th, rotating with the op */
} ar_plan_t;

static int body_allreduce(et_rank_t *r)
{
    const ar_plan_t *plan = r->arg;
    size_t maxc = 0;
    for (int i = 0; i < plan->ncounts; i++)
        maxc = plan->counts[i] > maxc ? plan->counts[i] : maxc;
    unsigned char *send = et_alloc(r, maxc * 8), *recv = et_alloc(r, maxc * 8);
    ET_CHECK(r, send && recv);
    expect_t in, want;
    for (int dt = 0; dt < HAL_DTYPE_COUNT; dt++) {
        for (int op = 0; op < HAL_REDOP_COUNT; op++) {
            if ((dt + op) % plan->dtype_stride)
                continue;
            expect_reduce((hal_dtype_t)dt, (hal_redop_t)op, r->nranks, &want);
            input_reduce((hal_dtype_t)dt, (hal_redop_t)op, r->rank, &in);
            for (int ci = 0; ci < plan->ncounts; ci++) {
                size_t count = plan->counts[ci];
                for (int inplace = 0; inplace < 2; inplace++) {
                    if (count >= LARGE &&
                        !(inplace ? plan->large_in_place : plan->large_out_of_place))
                        continue;
                    unsigned char *src = inplace ? recv : send;
                    fill((hal_dtype_t)dt, &in, src, count, 0);
                    hal_engine_op_t o = { .kind = HAL_ENGINE_ALLREDUCE,
                                          .sendbuf = src,
                                          .recvbuf = recv,
                                          .count = count,
                                          .dtype = (hal_dtype_t)dt,
                                          .op = (hal_redop_t)op };
                    hal_status_t st = run1(r, &o);
                    if (st != HAL_OK)
                        return ET_FAIL(r, "allreduce dtype %d op %d count %zu: %s: %s", dt, op,
                                       count, hal_status_string(st), hal_last_error_message());
                    char what[96];
                    snprintf(what, sizeof(what), "allreduce dtype %d op %d count %zu%s", dt, op,
                             count, inplace ? " in place" : "");
                    if (check(r, what, &want, recv, count, 0))
                        return 1;
                }
            }
        }
    }
    return 0;
}

static const size_t all_counts[] = { 0, 1, 7, 1023, LARGE };
static const size_t small_counts[] = { 0, 1, 7, 1023 };

static int run_allreduce(et_mode_t mode, int n, bool ipc, bool no_shm, const ar_plan_t *plan)
{
    et_opts_t o = { .mode = mode, .nranks = n, .ipc = ipc, .no_shm = no_shm };
    return et_run(&o, body_allreduce, (void *)plan, NULL) == 0 ? CTEST_PASS : CTEST_FAIL;
}

CTEST(engine_allreduce, every_type_threads_2)
{
    ar_plan_t p = { all_counts, 5, true, true, 1 };
    return run_allreduce(ET_THREADS, 2, false, false, &p);
}

CTEST(engine_allreduce, every_type_processes_staged_2)
{
    ar_plan_t p = { all_counts, 5, false, true, 1 };
    return run_allreduce(ET_PROCESSES, 2, false, false, &p);
}

CTEST(engine_allreduce, every_type_processes_ipc_2)
{
    ar_plan_t p = { all_counts, 5, true, false, 1 };
    return run_allreduce(ET_PROCESSES, 2, true, false, &p);
}

CTEST(engine_allreduce, ranks_1_to_4_threads)
{
    ar_plan_t p = { all_counts, 5, true, false, 7 };
    for (int n = 1; n <= 4; n++)
        CTEST_CHECK(run_allreduce(ET_THREADS, n, false, false, &p) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_allreduce, ranks_3_4_processes)
{
    ar_plan_t p = { all_counts, 5, false, true, 11 };
    CTEST_CHECK(run_allreduce(ET_PROCESSES, 3, false, false, &p) == CTEST_PASS);
    CTEST_CHECK(run_allreduce(ET_PROCESSES, 4, true, false, &p) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_allreduce, mixed_threads_and_processes_4)
{
    ar_plan_t p = { all_counts, 5, true, true, 13 };
    CTEST_CHECK(run_allreduce(ET_MIXED, 4, false, false, &p) == CTEST_PASS);
    CTEST_CHECK(run_allreduce(ET_MIXED, 4, true, false, &p) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_allreduce, tcp_3)
{
    ar_plan_t p = { small_counts, 4, false, false, 5 };
    CTEST_CHECK(run_allreduce(ET_PROCESSES, 3, false, true, &p) == CTEST_PASS);
    CTEST_CHECK(run_allreduce(ET_THREADS, 2, false, true, &p) == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- the other kinds ---- */

typedef struct kinds_plan {
    const size_t *counts;
    int ncounts;
} kinds_plan_t;

static const hal_dtype_t rotation[] = {
    HAL_DTYPE_F32, HAL_DTYPE_I8,  HAL_DTYPE_BF16,    HAL_DTYPE_U64,
    HAL_DTYPE_F16, HAL_DTYPE_I32, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F64,
    HAL_DTYPE_U8,  HAL_DTYPE_I64, HAL_DTYPE_U32,     HAL_DTYPE_F8_E5M2,
};

static int do_broadcast(et_rank_t *r, hal_dtype_t dt, size_t count, int root, bool inplace,
                        unsigned char *a, unsigned char *b)
{
    expect_t e;
    expect_plain(dt, root, &e);
    bool is_root = r->rank == root;
    memset(b, 0xee, count * et_dtype_size(dt));
    unsigned char *send = is_root ? (inplace ? b : a) : NULL;
    if (send)
        fill(dt, &e, send, count, 0);
    hal_engine_op_t o = { .kind = HAL_ENGINE_BROADCAST,
                          .sendbuf = send,
                          .recvbuf = b,
                          .count = count,
                          .dtype = dt,
                          .root = root };
    hal_status_t st = run1(r, &o);
    if (st != HAL_OK)
        return ET_FAIL(r, "broadcast count %zu root %d: %s: %s", count, root, hal_status_string(st),
                       hal_last_error_message());
    return check(r, "broadcast", &e, b, count, 0);
}

static int do_reduce(et_rank_t *r, hal_dtype_t dt, hal_redop_t op, size_t count, int root,
                     bool inplace, unsigned char *a, unsigned char *b)
{
    expect_t in, want;
    input_reduce(dt, op, r->rank, &in);
    expect_reduce(dt, op, r->nranks, &want);
    bool is_root = r->rank == root;
    unsigned char *send = inplace && is_root ? b : a;
    fill(dt, &in, send, count, 0);
    hal_engine_op_t o = { .kind = HAL_ENGINE_REDUCE,
                          .sendbuf = send,
                          .recvbuf = is_root ? b : NULL,
                          .count = count,
                          .dtype = dt,
                          .op = op,
                          .root = root };
    hal_status_t st = run1(r, &o);
    if (st != HAL_OK)
        return ET_FAIL(r, "reduce count %zu root %d: %s: %s", count, root, hal_status_string(st),
                       hal_last_error_message());
    return is_root ? check(r, "reduce", &want, b, count, 0) : 0;
}

static int do_allgather(et_rank_t *r, hal_dtype_t dt, size_t count, bool inplace, unsigned char *a,
                        unsigned char *b)
{
    size_t es = et_dtype_size(dt);
    expect_t e;
    expect_plain(dt, r->rank, &e);
    unsigned char *send = inplace ? b + (size_t)r->rank * count * es : a;
    fill(dt, &e, send, count, 0);
    hal_engine_op_t o = {
        .kind = HAL_ENGINE_ALLGATHER, .sendbuf = send, .recvbuf = b, .count = count, .dtype = dt
    };
    hal_status_t st = run1(r, &o);
    if (st != HAL_OK)
        return ET_FAIL(r, "allgather count %zu: %s: %s", count, hal_status_string(st),
                       hal_last_error_message());
    for (int p = 0; p < r->nranks; p++) {
        expect_plain(dt, p, &e);
        if (check(r, "allgather", &e, b + (size_t)p * count * es, count, 0))
            return 1;
    }
    return 0;
}

static int do_reduce_scatter(et_rank_t *r, hal_dtype_t dt, hal_redop_t op, size_t count,
                             bool inplace, unsigned char *a, unsigned char *b)
{
    size_t es = et_dtype_size(dt);
    expect_t in, want;
    input_reduce(dt, op, r->rank, &in);
    expect_reduce(dt, op, r->nranks, &want);
    fill(dt, &in, a, count * (size_t)r->nranks, 0);
    unsigned char *recv = inplace ? a + (size_t)r->rank * count * es : b;
    hal_engine_op_t o = { .kind = HAL_ENGINE_REDUCE_SCATTER,
                          .sendbuf = a,
                          .recvbuf = recv,
                          .count = count,
                          .dtype = dt,
                          .op = op };
    hal_status_t st = run1(r, &o);
    if (st != HAL_OK)
        return ET_FAIL(r, "reduce_scatter count %zu: %s: %s", count, hal_status_string(st),
                       hal_last_error_message());
    return check(r, "reduce_scatter", &want, recv, count, (size_t)r->rank * count);
}

static int do_alltoall(et_rank_t *r, hal_dtype_t dt, size_t count, bool inplace, unsigned char *a,
                       unsigned char *b)
{
    size_t es = et_dtype_size(dt);
    expect_t e;
    expect_plain(dt, r->rank, &e);
    unsigned char *send = inplace ? b : a;
    fill(dt, &e, send, count * (size_t)r->nranks, 0);
    hal_engine_op_t o = {
        .kind = HAL_ENGINE_ALLTOALL, .sendbuf = send, .recvbuf = b, .count = count, .dtype = dt
    };
    hal_status_t st = run1(r, &o);
    if (st != HAL_OK)
        return ET_FAIL(r, "alltoall count %zu: %s: %s", count, hal_status_string(st),
                       hal_last_error_message());
    for (int p = 0; p < r->nranks; p++) {
        expect_plain(dt, p, &e);
        if (check(r, "alltoall", &e, b + (size_t)p * count * es, count, (size_t)r->rank * count))
            return 1;
    }
    return 0;
}

static int body_kinds(et_rank_t *r)
{
    const kinds_plan_t *plan = r->arg;
    size_t maxc = 0;
    for (int i = 0; i < plan->ncounts; i++)
        maxc = plan->counts[i] > maxc ? plan->counts[i] : maxc;
    size_t bytes = maxc * 8 * (size_t)r->nranks;
    unsigned char *a = et_alloc(r, bytes), *b = et_alloc(r, bytes);
    ET_CHECK(r, a && b);
    int turn = 0;
    for (int ci = 0; ci < plan->ncounts; ci++) {
        size_t count = plan->counts[ci];
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int root = 0; root < r->nranks; root++) {
                hal_dtype_t dt = rotation[turn++ % 12];
                hal_redop_t op = (hal_redop_t)(turn % HAL_REDOP_COUNT);
                if (do_broadcast(r, dt, count, root, inplace, a, b) ||
                    do_reduce(r, dt, op, count, root, inplace, a, b))
                    return 1;
            }
            hal_dtype_t dt = rotation[turn++ % 12];
            hal_redop_t op = (hal_redop_t)(turn % HAL_REDOP_COUNT);
            if (do_allgather(r, dt, count, inplace, a, b) ||
                do_reduce_scatter(r, dt, op, count, inplace, a, b) ||
                do_alltoall(r, dt, count, inplace, a, b))
                return 1;
            hal_engine_op_t barrier = { .kind = HAL_ENGINE_BARRIER };
            hal_status_t st = hal_engine_run(r->comm, &barrier, 1);
            if (st != HAL_OK)
                return ET_FAIL(r, "barrier: %s: %s", hal_status_string(st),
                               hal_last_error_message());
        }
    }
    return 0;
}

static const size_t kind_counts[] = { 0, 1, 7, 1023, 100003 };

static int run_kinds(et_mode_t mode, int n, bool ipc, bool no_shm, int ncounts)
{
    kinds_plan_t p = { kind_counts, ncounts };
    et_opts_t o = { .mode = mode, .nranks = n, .ipc = ipc, .no_shm = no_shm };
    return et_run(&o, body_kinds, &p, NULL) == 0 ? CTEST_PASS : CTEST_FAIL;
}

CTEST(engine_kinds, threads_1_to_4)
{
    for (int n = 1; n <= 4; n++)
        CTEST_CHECK(run_kinds(ET_THREADS, n, false, false, 5) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_kinds, processes_staged_1_to_3)
{
    CTEST_CHECK(run_kinds(ET_PROCESSES, 1, false, false, 5) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_PROCESSES, 2, false, false, 5) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_PROCESSES, 3, false, false, 5) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_kinds, processes_ipc_2_4)
{
    CTEST_CHECK(run_kinds(ET_PROCESSES, 2, true, false, 5) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_PROCESSES, 4, true, false, 5) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_kinds, mixed_4)
{
    CTEST_CHECK(run_kinds(ET_MIXED, 4, false, false, 5) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_MIXED, 4, true, false, 5) == CTEST_PASS);
    return CTEST_PASS;
}

CTEST(engine_kinds, tcp_1_to_3)
{
    CTEST_CHECK(run_kinds(ET_THREADS, 1, false, true, 4) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_THREADS, 2, false, true, 5) == CTEST_PASS);
    CTEST_CHECK(run_kinds(ET_PROCESSES, 3, false, true, 4) == CTEST_PASS);
    return CTEST_PASS;
}

/* ---- small collectives while the ranks share one CPU ----
 * A rank waiting for a peer that runs on its own CPU must not spin it away. The ranks are
 * first pinned to one CPU (a waiter can only yield), then given their CPUs back while still on
 * that one (a waiter may move to another CPU): the results must be right either way, and a
 * move must leave the thread's allowed CPUs as they were. */

#define SHARED_CPU_OPS 300

static int small_allreduces(et_rank_t *r, unsigned char *send, unsigned char *recv)
{
    expect_t in, want;
    input_reduce(HAL_DTYPE_F32, HAL_REDOP_SUM, r->rank, &in);
    expect_reduce(HAL_DTYPE_F32, HAL_REDOP_SUM, r->nranks, &want);
    fill(HAL_DTYPE_F32, &in, send, 2, 0);
    for (int it = 0; it < SHARED_CPU_OPS; it++) {
        memset(recv, 0xff, 8);
        hal_engine_op_t o = { .kind = HAL_ENGINE_ALLREDUCE,
                              .sendbuf = send,
                              .recvbuf = recv,
                              .count = 2,
                              .dtype = HAL_DTYPE_F32,
                              .op = HAL_REDOP_SUM };
        hal_status_t st = run1(r, &o);
        if (st != HAL_OK)
            return ET_FAIL(r, "allreduce %d: %s: %s", it, hal_status_string(st),
                           hal_last_error_message());
        if (check(r, "allreduce on a shared CPU", &want, recv, 2, 0))
            return 1;
    }
    return 0;
}

static int body_shared_cpu(et_rank_t *r)
{
    unsigned char *send = et_alloc(r, 8), *recv = et_alloc(r, 8);
    ET_CHECK(r, send && recv);
    cpu_set_t all, one;
    ET_CHECK(r, sched_getaffinity(0, sizeof(all), &all) == 0);
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ET_CHECK(r, sched_setaffinity(0, sizeof(one), &one) == 0);
    if (small_allreduces(r, send, recv))
        return 1;
    ET_CHECK(r, sched_setaffinity(0, sizeof(all), &all) == 0);
    if (small_allreduces(r, send, recv))
        return 1;
    cpu_set_t after;
    ET_CHECK(r, sched_getaffinity(0, sizeof(after), &after) == 0);
    ET_CHECK(r, CPU_EQUAL(&after, &all));
    et_free(r, send);
    et_free(r, recv);
    return 0;
}

CTEST(engine_kinds, small_on_a_shared_cpu)
{
    et_opts_t o = { .mode = ET_THREADS, .nranks = 2 };
    CTEST_CHECK(et_run(&o, body_shared_cpu, NULL, NULL) == 0);
    o.mode = ET_PROCESSES;
    CTEST_CHECK(et_run(&o, body_shared_cpu, NULL, NULL) == 0);
    return CTEST_PASS;
}

/* ---- many back-to-back operations of alternating paths (slot and staging reuse) ---- */

static int body_churn(et_rank_t *r)
{
    size_t counts[] = { 1, 300000, 5, 40000, 2, 1 << 18 };
    unsigned char *a = et_alloc(r, (1u << 18) * 4 * 4), *b = et_alloc(r, (1u << 18) * 4 * 4);
    ET_CHECK(r, a && b);
    expect_t in, want;
    input_reduce(HAL_DTYPE_F32, HAL_REDOP_SUM, r->rank, &in);
    expect_reduce(HAL_DTYPE_F32, HAL_REDOP_SUM, r->nranks, &want);
    for (int it = 0; it < 60; it++) {
        size_t count = counts[it % 6];
        if (it % 3 == 2) {
            if (do_broadcast(r, HAL_DTYPE_I32, count, it % r->nranks, it & 1, a, b))
                return 1;
            continue;
        }
        fill(HAL_DTYPE_F32, &in, a, count, 0);
        hal_engine_op_t o = { .kind = HAL_ENGINE_ALLREDUCE,
                              .sendbuf = a,
                              .recvbuf = b,
                              .count = count,
                              .dtype = HAL_DTYPE_F32,
                              .op = HAL_REDOP_SUM };
        hal_status_t st = run1(r, &o);
        if (st != HAL_OK)
            return ET_FAIL(r, "allreduce %d: %s: %s", it, hal_status_string(st),
                           hal_last_error_message());
        if (check(r, "churn", &want, b, count, 0))
            return 1;
    }
    return 0;
}

CTEST(engine_kinds, back_to_back)
{
    et_opts_t o = { .mode = ET_PROCESSES, .nranks = 3 };
    CTEST_CHECK(et_run(&o, body_churn, NULL, NULL) == 0);
    o.mode = ET_THREADS;
    CTEST_CHECK(et_run(&o, body_churn, NULL, NULL) == 0);
    o.mode = ET_MIXED;
    o.nranks = 4;
    o.ipc = true;
    CTEST_CHECK(et_run(&o, body_churn, NULL, NULL) == 0);
    return CTEST_PASS;
}
