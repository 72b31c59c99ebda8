/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": the Open MPI peer. Runs the plan of coll_common.h with MPI_Allreduce,
 * MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast and MPI_Alltoall on host buffers, timed
 * as the HAL's ranks are (warm-up, barrier, N back-to-back calls, / N), and reports from rank 0
 * the per-repeat maximum over ranks and the wrong elements summed over ranks.
 *
 *   mpirun --oversubscribe -np N coll_peer_mpi --plan=... --colls=...
 *
 * Built outside the HAL with Open MPI's compiler wrapper (see bench/BUILD and README.md):
 *   mpicc -std=c11 -O2 -Wall -Wextra -Werror -I. -o coll_peer_mpi bench/coll_peer_mpi.c */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/coll_common.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int run_op(coll_kind_t kind, const coll_shape_t *sh, float *send, float *recv)
{
    int count = (int)sh->count;
    switch (kind) {
    case COLL_ALLREDUCE:
        return MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case COLL_ALLGATHER:
        return MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
    case COLL_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case COLL_BROADCAST:
        /* MPI_Bcast is in place: the root's buffer is the receive buffer, already filled. */
        return MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    case COLL_ALLTOALL:
        return MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
    default:
        return MPI_ERR_OTHER;
    }
}

/* Sets the receive buffer to NaNs (a result never written is caught), and the broadcast root's
 * to its input. */
static void prepare_recv(coll_kind_t kind, int rank, const coll_shape_t *sh, float *recv)
{
    memset(recv, 0xff, sh->recv_elems * sizeof(float));
    if (kind == COLL_BROADCAST && rank == 0)
        coll_fill_send(0, recv, sh->recv_elems);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    coll_plan_t plan;
    memset(&plan, 0, sizeof(plan));
    for (int i = 1; i < argc; i++) {
        if (coll_plan_arg(&plan, argv[i]) != 1) {
            if (rank == 0)
                fprintf(stderr, "coll_peer_mpi: bad argument '%s'\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (plan.nsteps == 0 || plan.ncolls == 0) {
        if (rank == 0)
            fprintf(stderr, "usage: coll_peer_mpi --plan=B:I:W:R[,...] --colls=NAME[,...]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(version, &len);
        char *nl = strpbrk(version, ",\n");
        if (nl)
            *nl = '\0';
        printf("info %s\n", version);
        fflush(stdout);
    }

    size_t max_send, max_recv;
    coll_plan_max_elems(&plan, n, &max_send, &max_recv);
    float *send = malloc(max_send * sizeof(float));
    float *recv = malloc(max_recv * sizeof(float));
    if (!send || !recv) {
        fprintf(stderr, "coll_peer_mpi: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Fault every page in before any timing. */
    memset(send, 0, max_send * sizeof(float));
    memset(recv, 0, max_recv * sizeof(float));

    for (int c = 0; c < plan.ncolls; c++) {
        coll_kind_t kind = plan.coll[c];
        for (int s = 0; s < plan.nsteps; s++) {
            const coll_step_t *step = &plan.step[s];
            coll_shape_t sh = coll_shape_of(kind, step->bytes, n);
            if (sh.count > (size_t)INT32_MAX) {
                fprintf(stderr, "coll_peer_mpi: count %zu too large for MPI\n", sh.count);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            coll_fill_send(rank, send, sh.send_elems);
            prepare_recv(kind, rank, &sh, recv);
            MPI_Barrier(MPI_COMM_WORLD);
            for (uint32_t w = 0; w < step->warmup; w++)
                run_op(kind, &sh, send, recv);
            double ns[COLL_MAX_REPS], ns_max[COLL_MAX_REPS];
            for (uint32_t r = 0; r < step->reps; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now_ns();
                for (uint32_t it = 0; it < step->iters; it++)
                    run_op(kind, &sh, send, recv);
                ns[r] = (now_ns() - t0) / (double)step->iters;
            }
            unsigned long long wrong = coll_count_wrong(kind, rank, n, &sh, recv), wrong_sum = 0;
            MPI_Reduce(ns, ns_max, (int)step->reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            MPI_Reduce(&wrong, &wrong_sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0)
                coll_print_result("mpi", kind, "-", &sh, step->iters, wrong_sum, ns_max,
                                  step->reps);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
