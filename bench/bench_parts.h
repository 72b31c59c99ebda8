/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: the benchmark parts. Each part measures its figures on every requested backend,
 * prints them, and records its targets; hal_bench.c prints the target lines and summary. */
#ifndef BENCH_BENCH_PARTS_H
#define BENCH_BENCH_PARTS_H

#include "bench/bench_util.h"

/* Runs one part on backends[0..nbackends). Returns 0, or non-zero if a measurement could not be
 * made (the error was reported on stderr; its targets are recorded as missed). */
typedef int (*bench_part_fn)(const bench_options_t *opts, const char *const *backends,
                             int nbackends, bench_targets_t *targets);

/* "mem": dispatch overhead, stream latency, copy bandwidth, caching allocator (bench_mem*.c). */
int bench_mem_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                  bench_targets_t *targets);

/* "launch": kernel launch cost through the program API (bench_launch.c). */
int bench_launch_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                     bench_targets_t *targets);

/* "coll": collectives among rank processes vs Open MPI and Gloo (bench_coll*.c). */
int bench_coll_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                   bench_targets_t *targets);

/* "cuda": the cuda backend against raw CUDA and NCCL (bench_cuda.c; built where the CUDA
 * toolkit was found, run only when asked for with --part=cuda). */
int bench_cuda_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                   bench_targets_t *targets);

/* Options of part "coll" (--no-peers, --peer-dir=DIR, --ranks=LIST): returns 1 when `arg` was
 * one of them, 0 when it was not, -1 when it was malformed (reported on stderr). */
int bench_coll_option(const char *arg);

/* The first argument that makes hal_bench one rank process of part "coll" (started by the
 * part itself), and that mode's entry point (argv[1] is BENCH_COLL_RANK_ARG). */
#define BENCH_COLL_RANK_ARG "--coll-rank"
int bench_coll_rank_main(int argc, char **argv);

#endif /* BENCH_BENCH_PARTS_H */
