/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "mem", internal to its files: the plan and environment its measurements share,
 * and the measurements, one file each (bench_mem_dispatch.c, bench_mem_latency.c,
 * bench_mem_copy.c, bench_mem_alloc.c); bench_mem.c runs them on each backend. */
#ifndef BENCH_BENCH_MEM_H
#define BENCH_BENCH_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "bench/bench_util.h"
#include "hal/hal.h"

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

/* Targets. */
#define DISPATCH_TARGET_NS 2.0
#define LATENCY_TARGET_US  5.0
#define COPY_TARGET_RATIO  0.95
#define COPY_TARGET_FROM   MIB
#define ALLOC_TARGET_NS    50.0

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Iteration plan of one run (full or --quick). */
typedef struct mem_plan {
    int dispatch_repeats;
    uint64_t dispatch_sample_ns; /* length of one timed loop */
    int latency_warmup, latency_samples;
    int copy_repeats, copy_repeats_large; /* large: >= 64 MiB */
    uint64_t copy_sample_ns;
    int alloc_repeats;
    uint64_t alloc_sample_ns;
} mem_plan_t;

/* The backend and device every section uses. */
typedef struct mem_env {
    const char *name;
    const mem_plan_t *plan;
    hal_backend_t backend;
    hal_device_t device;
    hal_device_properties_t props;
    hal_stream_t stream;
    bench_targets_t *targets;
} mem_env_t;

/* A byte count for people ("64 KiB"), in one of 8 rotating buffers (a set per file). */
static inline const char *size_str(size_t bytes)
{
    static char buf[8][32];
    static int next;
    char *b = buf[next++ % 8];
    return bench_fmt_size(b, 32, bytes);
}

/* The measurements. Each prints its figures, records its targets in env->targets and returns 0,
 * or non-zero if a measurement could not be made (reported on stderr, its targets missed). */
int bench_dispatch(mem_env_t *env);
int bench_latency(mem_env_t *env);
int bench_copy(mem_env_t *env);
int bench_allocator(mem_env_t *env);

/* Record the copy and allocator targets from the from_index-th size on as not met, when the
 * measurements could not run. */
void copy_targets_failed(mem_env_t *env, size_t from_index, bench_verdict_t verdict);
void alloc_targets_failed(mem_env_t *env, size_t from_index);

#endif /* BENCH_BENCH_MEM_H */
