/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": what every implementation under test shares — the HAL's rank
 * processes (bench_coll_rank.c), the Open MPI peer (coll_peer_mpi.c) and the Gloo peer
 * (coll_peer_gloo.cc) — so that all of them run the same plan on the same data and report in
 * the same form. Plain C that also compiles as C++; header-only (the peers are built outside
 * the HAL's libraries).
 *
 * Command line of every rank program (the driver builds it: bench_coll.c, bench_coll_peers.c):
 *   --plan=BYTES:ITERS:WARMUP:REPS[,...]   sizes in nccl-tests' sense (S, see below) and, per
 *                                           size, timed ops per repeat, warm-up ops, repeats
 *   --colls=NAME[,...]                      allreduce allgather reduce_scatter broadcast alltoall
 *
 * Sizes follow nccl-tests: S is the size of the whole array, count * 4 bytes for allreduce and
 * broadcast, and per-rank count * nranks * 4 bytes for allgather, reduce_scatter and alltoall
 * (each rank sends S / nranks to allgather, receives S / nranks from reduce_scatter). A size
 * too small for one element per rank is rounded up to one element per rank.
 *
 * Data: float32 sum, out of place (broadcast: root 0). Inputs are small integers, so every sum
 * is exact in any order and the results are checked bit for bit (#wrong = elements that
 * differ, after the timed loop).
 *
 * Output, one line per (collective, size) on stdout:
 *   res IMPL COLL ALGO BYTES COUNT ITERS WRONG T1 ... TREPS
 * IMPL names the implementation, ALGO its algorithm ("-": its own choice), BYTES is S, COUNT
 * the nccl-tests count column (elements of the whole array), WRONG the wrong elements seen by
 * the reporting process, T1.. the nanoseconds per op of each repeat as measured by that
 * process. A job reports from every rank or, after reducing (max of times, sum of wrong), from
 * one; the driver takes, per repeat, the maximum over the lines of one job, then the median
 * over repeats. "info TEXT" lines describe the implementation. */
#ifndef BENCH_COLL_COMMON_H
#define BENCH_COLL_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLL_MAX_SIZES 16
#define COLL_MAX_REPS  16

typedef enum coll_kind {
    COLL_ALLREDUCE = 0,
    COLL_ALLGATHER = 1,
    COLL_REDUCE_SCATTER = 2,
    COLL_BROADCAST = 3,
    COLL_ALLTOALL = 4,
    COLL_KIND_COUNT = 5
} coll_kind_t;

static const char *const coll_kind_names[COLL_KIND_COUNT] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall",
};

/* One size step of the plan. */
typedef struct coll_step {
    uint64_t bytes; /* S as requested */
    uint32_t iters, warmup, reps;
} coll_step_t;

typedef struct coll_plan {
    int nsteps;
    coll_step_t step[COLL_MAX_SIZES];
    int ncolls;
    coll_kind_t coll[COLL_KIND_COUNT];
} coll_plan_t;

/* The element counts of one collective at size S among n ranks. */
typedef struct coll_shape {
    size_t count;      /* the count argument of the call (per rank for allgather's send,
                          reduce_scatter's receive and alltoall's per-peer blocks) */
    size_t send_elems; /* elements of the send buffer this rank provides */
    size_t recv_elems; /* elements of the receive buffer */
    size_t total;      /* nccl-tests' count column: elements of the whole array */
    uint64_t bytes;    /* nccl-tests' size column: total * 4 */
} coll_shape_t;

static inline coll_shape_t coll_shape_of(coll_kind_t kind, uint64_t s, int n)
{
    coll_shape_t sh;
    size_t elems = (size_t)(s / 4u);
    if (kind == COLL_ALLREDUCE || kind == COLL_BROADCAST) {
        if (elems == 0)
            elems = 1;
        sh.count = sh.send_elems = sh.recv_elems = sh.total = elems;
    } else {
        size_t per = elems / (size_t)n;
        if (per == 0)
            per = 1;
        sh.count = per;
        sh.total = per * (size_t)n;
        sh.send_elems = kind == COLL_ALLGATHER ? per : sh.total;
        sh.recv_elems = kind == COLL_REDUCE_SCATTER ? per : sh.total;
    }
    sh.bytes = (uint64_t)sh.total * 4u;
    return sh;
}

/* nccl-tests' busbw / algbw factor. */
static inline double coll_bus_factor(coll_kind_t kind, int n)
{
    switch (kind) {
    case COLL_ALLREDUCE:
        return 2.0 * (double)(n - 1) / (double)n;
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL:
        return (double)(n - 1) / (double)n;
    case COLL_BROADCAST:
    default:
        return 1.0;
    }
}

/* Input values repeat with this period in the element index. */
#define COLL_PERIOD 127u

/* Input element i of rank r's send buffer: a small positive integer, different across ranks
 * and positions, so sums over up to 64 ranks stay exact. */
static inline float coll_input(int r, size_t i)
{
    return (float)(1u + (unsigned)((i * 7u + (size_t)r * 31u) % COLL_PERIOD));
}

/* Fills rank `rank`'s send buffer (send_elems elements). */
static inline void coll_fill_send(int rank, float *send, size_t send_elems)
{
    float table[COLL_PERIOD];
    for (size_t j = 0; j < COLL_PERIOD; j++)
        table[j] = coll_input(rank, j);
    for (size_t i = 0; i < send_elems; i += COLL_PERIOD) {
        size_t len = send_elems - i < COLL_PERIOD ? send_elems - i : COLL_PERIOD;
        memcpy(send + i, table, len * sizeof(float));
    }
}

/* Counts the elements of recv[0..len) that differ (bitwise) from table[(j0 + i) % period]. */
static inline uint64_t coll_wrong_block(const float *recv, size_t len, const float *table,
                                        size_t j0)
{
    uint64_t wrong = 0;
    size_t j = j0 % COLL_PERIOD;
    for (size_t i = 0; i < len; i++) {
        if (memcmp(&table[j], &recv[i], sizeof(float)) != 0)
            wrong++;
        if (++j == COLL_PERIOD)
            j = 0;
    }
    return wrong;
}

/* Elements of rank `rank`'s receive buffer (sh->recv_elems) that differ from the expectation,
 * bit for bit. */
static inline uint64_t coll_count_wrong(coll_kind_t kind, int rank, int n, const coll_shape_t *sh,
                                        const float *recv)
{
    float table[COLL_PERIOD];
    uint64_t wrong = 0;
    switch (kind) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE_SCATTER:
        for (size_t j = 0; j < COLL_PERIOD; j++) {
            float sum = 0.0f;
            for (int r = 0; r < n; r++)
                sum += coll_input(r, j);
            table[j] = sum;
        }
        return coll_wrong_block(recv, sh->recv_elems, table,
                                kind == COLL_ALLREDUCE ? 0 : (size_t)rank * sh->count);
    case COLL_BROADCAST:
        for (size_t j = 0; j < COLL_PERIOD; j++)
            table[j] = coll_input(0, j);
        return coll_wrong_block(recv, sh->recv_elems, table, 0);
    case COLL_ALLGATHER:
    case COLL_ALLTOALL:
        for (int p = 0; p < n; p++) {
            for (size_t j = 0; j < COLL_PERIOD; j++)
                table[j] = coll_input(p, j);
            size_t from = kind == COLL_ALLGATHER ? 0 : (size_t)rank * sh->count;
            wrong += coll_wrong_block(recv + (size_t)p * sh->count, sh->count, table, from);
        }
        return wrong;
    default:
        return sh->recv_elems;
    }
}

static inline int coll_kind_parse(const char *s, size_t len, coll_kind_t *out)
{
    for (int k = 0; k < COLL_KIND_COUNT; k++) {
        if (strlen(coll_kind_names[k]) == len && strncmp(s, coll_kind_names[k], len) == 0) {
            *out = (coll_kind_t)k;
            return 0;
        }
    }
    return -1;
}

/* Parses "--plan=" and "--colls=" arguments into plan (returns 1 if arg was one of them, 0 if
 * not, -1 if it was malformed). */
static inline int coll_plan_arg(coll_plan_t *plan, const char *arg)
{
    if (strncmp(arg, "--plan=", 7) == 0) {
        const char *p = arg + 7;
        plan->nsteps = 0;
        while (*p) {
            unsigned long long b = 0, it = 0, w = 0, r = 0;
            int used = 0;
            if (plan->nsteps == COLL_MAX_SIZES ||
                sscanf(p, "%llu:%llu:%llu:%llu%n", &b, &it, &w, &r, &used) != 4 || b == 0 ||
                it == 0 || r == 0 || r > COLL_MAX_REPS || it > 100000000ull || w > 100000000ull)
                return -1;
            coll_step_t *s = &plan->step[plan->nsteps++];
            s->bytes = b;
            s->iters = (uint32_t)it;
            s->warmup = (uint32_t)w;
            s->reps = (uint32_t)r;
            p += used;
            if (*p == ',')
                p++;
            else if (*p)
                return -1;
        }
        return plan->nsteps > 0 ? 1 : -1;
    }
    if (strncmp(arg, "--colls=", 8) == 0) {
        const char *p = arg + 8;
        plan->ncolls = 0;
        while (*p) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            coll_kind_t k;
            if (plan->ncolls == COLL_KIND_COUNT || coll_kind_parse(p, len, &k) != 0)
                return -1;
            plan->coll[plan->ncolls++] = k;
            p += len;
            if (*p == ',')
                p++;
        }
        return plan->ncolls > 0 ? 1 : -1;
    }
    return 0;
}

/* Largest send and receive buffers (elements) the plan needs among n ranks. */
static inline void coll_plan_max_elems(const coll_plan_t *plan, int n, size_t *send, size_t *recv)
{
    *send = *recv = 1;
    for (int c = 0; c < plan->ncolls; c++) {
        for (int s = 0; s < plan->nsteps; s++) {
            coll_shape_t sh = coll_shape_of(plan->coll[c], plan->step[s].bytes, n);
            if (sh.send_elems > *send)
                *send = sh.send_elems;
            if (sh.recv_elems > *recv)
                *recv = sh.recv_elems;
        }
    }
}

/* Prints one result line (see the top of this file). */
static inline void coll_print_result(const char *impl, coll_kind_t kind, const char *algo,
                                     const coll_shape_t *sh, uint32_t iters, uint64_t wrong,
                                     const double *ns_per_op, uint32_t reps)
{
    printf("res %s %s %s %llu %llu %u %llu", impl, coll_kind_names[kind], algo,
           (unsigned long long)sh->bytes, (unsigned long long)sh->total, iters,
           (unsigned long long)wrong);
    for (uint32_t r = 0; r < reps; r++)
        printf(" %.1f", ns_per_op[r]);
    printf("\n");
    fflush(stdout);
}

#endif /* BENCH_COLL_COMMON_H */
