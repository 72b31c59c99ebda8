/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench part "coll": collectives among ranks that are separate processes on this host,
 * measured as nccl-tests measures them, next to Open MPI and Gloo measured in the same run.
 *
 * The driver (this process) creates the job's unique id, starts N rank processes (this very
 * binary, re-executed with --coll-rank as its first argument; the id travels in the
 * environment as hex), reads their result lines from pipes (format in coll_common.h), then runs
 * the peers the same way: `mpirun -np N coll_peer_mpi` and N processes of coll_peer_gloo. Each
 * rank owns one device of the backend (rank % device count), one stream and device buffers;
 * float32 sum, out of place. Some backends are measured twice (make_sides): the trainium backend
 * with its native collectives and host-staged, the cpu backend on one host and across two
 * simulated hosts (TCP on loopback, the shared-memory path disabled).
 *
 * Per collective and size, every implementation runs warm-up ops, then `reps` repeats of: a
 * barrier, N ops enqueued (or called) back to back, a stream synchronize; time per op = wall
 * time / N. The time reported is, per repeat, the maximum over ranks, then the median over
 * repeats. The result is checked exactly after the timed loop.
 *
 * Targets, with 2 processes:
 *   - allreduce busbw >= 1.5x the best peer's, at each size from 1 MiB to 256 MiB;
 *   - 8-byte allreduce latency no worse than Open MPI's;
 *   - allreduce busbw at the largest size (256 MiB) >= 0.5x single-thread memcpy bandwidth of
 *     that size, measured here, in the driver, before the collectives.
 *
 * Files: this one is the driver (options, plan, sides, memcpy baseline, machine load, the
 * part's run); bench_coll_rank.c the rank mode; bench_coll_peers.c the processes of every job and
 * which peers can run; bench_coll_results.c result lines, tables and targets; bench_coll.h
 * what they share. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_coll.h"
#include "bench/bench_parts.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"
#include "bench/coll_common.h"
#include "hal/hal.h"

/* ---- options (see bench_coll_option) ------------------------------------------------------ */

bool opt_no_peers;
bool opt_no_cross_host;
static char opt_peer_dir[PATH_MAX];
int opt_ranks[MAX_RANK_COUNTS] = { 2, 4 };
int opt_nranks_counts = 2;

int bench_coll_option(const char *arg)
{
    if (strcmp(arg, "--no-peers") == 0) {
        opt_no_peers = true;
        return 1;
    }
    if (strcmp(arg, "--no-cross-host") == 0) {
        opt_no_cross_host = true;
        return 1;
    }
    if (strncmp(arg, "--peer-dir=", 11) == 0) {
        if (strlen(arg + 11) == 0 || strlen(arg + 11) >= sizeof(opt_peer_dir)) {
            fprintf(stderr, "hal-bench: --peer-dir needs a directory\n");
            return -1;
        }
        snprintf(opt_peer_dir, sizeof(opt_peer_dir), "%s", arg + 11);
        return 1;
    }
    if (strncmp(arg, "--ranks=", 8) == 0) {
        int counts[MAX_RANK_COUNTS], n = 0;
        const char *p = arg + 8;
        while (*p) {
            char *end = NULL;
            long v = strtol(p, &end, 10);
            if (end == p || v < 1 || v > MAX_JOB_PROCS || n == MAX_RANK_COUNTS ||
                (*end && *end != ',')) {
                fprintf(stderr,
                        "hal-bench: --ranks expects up to %d counts from 1 to %d, "
                        "e.g. --ranks=2,4\n",
                        MAX_RANK_COUNTS, MAX_JOB_PROCS);
                return -1;
            }
            counts[n++] = (int)v;
            p = *end ? end + 1 : end;
        }
        if (n == 0) {
            fprintf(stderr, "hal-bench: --ranks needs at least one count\n");
            return -1;
        }
        memcpy(opt_ranks, counts, sizeof(counts));
        opt_nranks_counts = n;
        return 1;
    }
    return 0;
}

/* ---- the plan ------------------------------------------------------------------------------ */

static const uint64_t full_sizes[] = { 8, KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB };
static const uint64_t quick_sizes[] = { 8, 64 * KIB, MIB, 16 * MIB };
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t clamp_u32(uint64_t v, uint32_t lo, uint32_t hi)
{
    return v < lo ? lo : v > hi ? hi : (uint32_t)v;
}

/* Iterations shrink with size so that every step takes a comparable time: a fixed number of
 * bytes per timed loop, within bounds. */
static void make_plan(bool quick, coll_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    const uint64_t *sizes = quick ? quick_sizes : full_sizes;
    int n = quick ? (int)COUNT_OF(quick_sizes) : (int)COUNT_OF(full_sizes);
    for (int i = 0; i < n; i++) {
        coll_step_t *s = &plan->step[plan->nsteps++];
        s->bytes = sizes[i];
        if (quick) {
            s->iters = clamp_u32(4 * MIB / sizes[i], 2, 20);
            s->warmup = 1;
            s->reps = 1;
        } else {
            s->iters = clamp_u32(64 * MIB / sizes[i], 2, 200);
            s->warmup = sizes[i] >= 64 * MIB ? 1 : (s->iters < 5 ? s->iters : 5);
            s->reps = sizes[i] <= MIB ? 2 : 1; /* per round: 6 or 3 in all */
        }
    }
    for (int k = 0; k < COLL_KIND_COUNT; k++)
        plan->coll[plan->ncolls++] = (coll_kind_t)k;
}

/* Gloo's plan: below 1 MiB a tenth of the timed ops (at least 5) and at most 2 warm-up ops; the
 * same otherwise. */
static void gloo_plan(const coll_plan_t *plan, coll_plan_t *out)
{
    *out = *plan;
    for (int s = 0; s < out->nsteps; s++) {
        coll_step_t *st = &out->step[s];
        if (st->bytes >= MIB)
            continue;
        st->iters = st->iters / 10 < 5 ? (st->iters < 5 ? st->iters : 5) : st->iters / 10;
        st->warmup = st->warmup < 2 ? st->warmup : 2;
    }
}

static void plan_args(const coll_plan_t *plan, char *plan_arg, size_t plan_size, char *colls_arg,
                      size_t colls_size)
{
    size_t used = (size_t)snprintf(plan_arg, plan_size, "--plan=");
    for (int s = 0; s < plan->nsteps && used < plan_size; s++) {
        const coll_step_t *st = &plan->step[s];
        used += (size_t)snprintf(plan_arg + used, plan_size - used, "%s%llu:%u:%u:%u", s ? "," : "",
                                 (unsigned long long)st->bytes, st->iters, st->warmup, st->reps);
    }
    used = (size_t)snprintf(colls_arg, colls_size, "--colls=");
    for (int c = 0; c < plan->ncolls && used < colls_size; c++)
        used += (size_t)snprintf(colls_arg + used, colls_size - used, "%s%s", c ? "," : "",
                                 coll_kind_names[plan->coll[c]]);
}

/* ==== the driver: memcpy baseline ============================================================ */

/* Appends `reps` samples of single-thread memcpy bandwidth (GB/s, each byte copied counted
 * once) of `bytes` to samples[*n]. */
static void measure_memcpy(size_t bytes, int reps, double *samples, int *n)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    memcpy(b, a, bytes); /* warm-up */
    BENCH_CLOBBER();
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = bench_now_ns();
        memcpy(r & 1 ? a : b, r & 1 ? b : a, bytes);
        BENCH_CLOBBER();
        uint64_t t1 = bench_now_ns();
        samples[(*n)++] = (double)bytes / (double)(t1 - t0);
    }
    free(a);
    free(b);
}

/* ==== the part =============================================================================== */

static void print_plan(const coll_plan_t *plan)
{
    printf("   plan (per size: timed ops per repeat x repeats per round + warm-up ops):");
    for (int s = 0; s < plan->nsteps; s++) {
        const coll_step_t *st = &plan->step[s];
        printf("%s %s %ux%u+%u", s ? "," : "", size_str(st->bytes), st->iters, st->reps,
               st->warmup);
    }
    printf("\n");
}

/* Whether HAL_NEURON_LIBNRT names the libnrt emulator (it exports nrt_emu_set_fault); the
 * library is only looked at, never initialised (that would take NeuronCores). */
static bool libnrt_is_emulator(void)
{
    const char *path = getenv("HAL_NEURON_LIBNRT");
    if (path == NULL || path[0] == '\0')
        return false;
    void *dl = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    bool emulator = dl != NULL && dlsym(dl, "nrt_emu_set_fault") != NULL;
    if (dl != NULL)
        dlclose(dl);
    return emulator;
}

/* The label of the cpu backend's side whose ranks are on two simulated hosts. */
#define CROSS_HOST_LABEL "tcp, 2 simulated hosts"

/* The sides measured: every backend as it is; the trainium backend once more with its native
 * collectives off (unless they are off already), so that both paths are measured in one run;
 * the cpu backend once more across two simulated hosts (unless --no-cross-host): the engine's
 * shared-memory path disabled, so every rank talks to the others over TCP on loopback, as ranks
 * on different hosts do (the engine takes TCP for the whole communicator as soon as one peer is
 * on another host, so 2 hosts of 2 ranks at 4 processes run exactly this way too). */
static int make_sides(const char *const *backends, int nbackends, hal_side_t *sides)
{
    const char *env = getenv("HAL_NEURON_NATIVE_COLLECTIVES");
    bool native_off = env != NULL && strcmp(env, "0") == 0;
    int n = 0;
    for (int b = 0; b < nbackends && n < MAX_SIDES; b++) {
        bool trainium = strstr(backends[b], "trainium") != NULL;
        bool native = trainium && !native_off;
        sides[n] = (hal_side_t){ .backend = backends[b],
                                 .label = native ? "native collectives" : "",
                                 .implementation = native ? "hal native" : "hal",
                                 .hosts = 1,
                                 .targets = true,
                                 .twin = -1 };
        n++;
        if (native && n < MAX_SIDES) {
            sides[n] = (hal_side_t){ .backend = backends[b],
                                     .env = "HAL_NEURON_NATIVE_COLLECTIVES=0",
                                     .label = "host-staged",
                                     .implementation = "hal host-staged",
                                     .hosts = 1,
                                     .targets = false,
                                     .twin = n - 1 };
            sides[n - 1].twin = n;
            n++;
        }
        if (strcmp(backends[b], "cpu") == 0 && !opt_no_cross_host && n < MAX_SIDES) {
            sides[n] = (hal_side_t){ .backend = backends[b],
                                     .env = "HAL_COMM_SHM_DISABLE=1",
                                     .label = CROSS_HOST_LABEL,
                                     .implementation = "hal",
                                     .hosts = 2,
                                     .transport = "tcp",
                                     .targets = false,
                                     .twin = n - 1 };
            sides[n - 1].twin = n;
            n++;
        }
    }
    return n;
}

int bench_coll_run(const bench_options_t *opts, const char *const *backends, int nbackends,
                   bench_targets_t *targets)
{
    static hal_side_t sides[MAX_SIDES];
    int nsides = make_sides(backends, nbackends, sides);
    memset(path_native, 0, sizeof(path_native));
    memset(path_host, 0, sizeof(path_host));
    static driver_t d;
    memset(&d, 0, sizeof(d));
    d.opts = opts;
    uint64_t t_start = bench_now_ns();
    make_plan(opts->quick, &d.plan);
    plan_args(&d.plan, d.plan_arg, sizeof(d.plan_arg), d.colls_arg, sizeof(d.colls_arg));
    {
        coll_plan_t gp;
        char unused[128];
        gloo_plan(&d.plan, &gp);
        plan_args(&gp, d.gloo_plan_arg, sizeof(d.gloo_plan_arg), unused, sizeof(unused));
    }
    d.timeout_ns = (opts->quick ? 120ull : 900ull) * 1000000000ull;
    nresults = 0;
    ninfos = 0;

    ssize_t len = readlink("/proc/self/exe", d.self, sizeof(d.self) - 1);
    if (len <= 0) {
        fprintf(stderr, "hal-bench: cannot find this executable (/proc/self/exe): %s\n",
                strerror(errno));
        return 1;
    }
    d.self[len] = '\0';
    if (opt_peer_dir[0]) {
        snprintf(d.peer_dir, sizeof(d.peer_dir), "%s", opt_peer_dir);
    } else {
        snprintf(d.peer_dir, sizeof(d.peer_dir), "%s", d.self);
        char *slash = strrchr(d.peer_dir, '/');
        if (slash)
            *slash = '\0';
    }
    find_peers(&d);

    bench_load_t load;
    bench_load_begin_for(&load, NULL, true); /* the rank and peer processes are ours */
    printf("== hal-bench coll: float32 sum, out of place, ranks as processes on this host, one "
           "device and stream per rank; %s run\n",
           opts->quick ? "quick (indicative figures only)" : "full");
    print_plan(&d.plan);
    printf("   time = per repeat the slowest rank's wall time of N back-to-back ops + stream "
           "synchronize, / N; median over the repeats of %s\n",
           opts->quick
               ? "1 round"
               : "3 rounds at 2 processes (implementations interleaved), 1 round otherwise");
    printf("   peers: Open MPI %s; Gloo %s\n", d.mpi_ok ? "measured" : "skipped",
           d.gloo_ok ? "measured" : "skipped");
    if (!d.mpi_ok)
        printf("   Open MPI skipped: %s\n", d.mpi_skip);
    if (!d.gloo_ok)
        printf("   Gloo skipped: %s\n", d.gloo_skip);

    /* memcpy is sampled before and after the collectives; the target uses the median. */
    uint64_t big = d.plan.step[d.plan.nsteps - 1].bytes;
    int memcpy_reps = opts->quick ? 2 : 5, nmemcpy = 0;
    double memcpy_samples[16];
    bench_progress("coll: memcpy baseline, %s", size_str(big));
    measure_memcpy((size_t)big, memcpy_reps, memcpy_samples, &nmemcpy);
    fflush(stdout);

    /* Rounds: every implementation runs once per round, in alternating order (HAL, Open MPI,
     * Gloo; then Gloo, Open MPI, HAL; ...), so that drift of the machine's load during the part
     * biases none of them; the repeats of all rounds are pooled. Only the process count with
     * targets gets several rounds: the others are informative and slow (oversubscribed). */
    int rc = 0;
    bool mpi_failed = false, gloo_failed = false;
    for (int i = 0; i < opt_nranks_counts; i++) {
        int n = opt_ranks[i];
        int rounds = opts->quick || n != TARGET_NRANKS ? 1 : MAX_ROUNDS;
        for (int round = 0; round < rounds; round++) {
            for (int k = 0; k < 3; k++) {
                int which = round % 2 == 0 ? k : 2 - k; /* 0 hal, 1 Open MPI, 2 Gloo */
                uint64_t t0 = bench_now_ns();
                if (which == 0) {
                    /* The two ways of one backend alternate too, round by round. */
                    int order[MAX_SIDES];
                    for (int b = 0; b < nsides; b++)
                        order[b] = b;
                    for (int b = 0; round % 2 == 1 && b + 1 < nsides; b++)
                        if (sides[b].twin == b + 1) {
                            order[b] = b + 1;
                            order[b + 1] = b;
                            b++;
                        }
                    for (int k = 0; k < nsides; k++) {
                        int side = order[k];
                        t0 = bench_now_ns();
                        if (run_hal(&d, &sides[side], side, n) != 0)
                            rc = 1;
                        bench_progress("coll: %d processes, round %d/%d: hal (%s%s%s) %.1f s", n,
                                       round + 1, rounds, sides[side].backend,
                                       sides[side].label[0] ? ", " : "", sides[side].label,
                                       (double)(bench_now_ns() - t0) / 1e9);
                    }
                } else if (which == 1 && d.mpi_ok) {
                    if (run_mpi(&d, n) != 0)
                        mpi_failed = true;
                    bench_progress("coll: %d processes, round %d/%d: Open MPI %.1f s", n, round + 1,
                                   rounds, (double)(bench_now_ns() - t0) / 1e9);
                } else if (which == 2 && d.gloo_ok) {
                    if (run_gloo(&d, n) != 0)
                        gloo_failed = true;
                    bench_progress("coll: %d processes, round %d/%d: Gloo %.1f s", n, round + 1,
                                   rounds, (double)(bench_now_ns() - t0) / 1e9);
                }
            }
        }
    }
    if (mpi_failed)
        printf("   Open MPI: some runs failed (see stderr); their figures are missing\n");
    if (gloo_failed)
        printf("   Gloo: some runs failed (see stderr); their figures are missing\n");
    bench_progress("coll: memcpy baseline, %s", size_str(big));
    measure_memcpy((size_t)big, memcpy_reps, memcpy_samples, &nmemcpy);
    double memcpy_lo = bench_min(memcpy_samples, (size_t)nmemcpy);
    double memcpy_gbs = bench_median(memcpy_samples, (size_t)nmemcpy);
    double memcpy_hi = nmemcpy ? memcpy_samples[nmemcpy - 1] : 0.0; /* bench_median sorted */
    printf(
        "   memcpy (1 thread, in the driver, before and after the collectives): median %.3f GB/s "
        "at %s (%d samples, %.3f to %.3f)\n",
        memcpy_gbs, size_str(big), nmemcpy, memcpy_lo, memcpy_hi);
    for (int i = 0; i < ninfos; i++)
        printf("   peer: %s\n", infos[i]);

    bool emulator = libnrt_is_emulator();
    for (int b = 0; b < nsides; b++) {
        const hal_side_t *side = &sides[b];
        printf("\nhal (backend %s%s%s): %d rank processes reported native collectives, %d "
               "host-staged\n",
               side->backend, side->label[0] ? ", " : "", side->label, path_native[b],
               path_host[b]);
        for (int i = 0; i < opt_nranks_counts; i++) {
            int n = opt_ranks[i];
            for (int c = 0; c < d.plan.ncolls; c++) {
                coll_kind_t kind = d.plan.coll[c];
                printf("\n# %s, hal (backend %s%s%s), %d processes\n", coll_kind_names[kind],
                       side->backend, side->label[0] ? ", " : "", side->label, n);
                print_nccl_table(SRC_HAL + b, n, kind, &d.plan);
                printf("\n");
                print_comparison(b, n, kind, &d.plan);
            }
            printf("\n");
            print_latency(b, n, &d.plan);
        }
        if (side->targets)
            add_targets(&d, side->backend, b, memcpy_gbs, targets);
    }
    /* The two ways of a backend side by side. */
    for (int b = 0; b < nsides; b++) {
        if (sides[b].twin <= b)
            continue;
        const hal_side_t *twin = &sides[sides[b].twin];
        printf("\n== %s: %s against %s, same run\n", sides[b].backend,
               sides[b].label[0] ? sides[b].label : "one host (shared memory)", twin->label);
        if (twin->hosts > 1)
            printf("   %s: every rank talks to the others over TCP on loopback, the shared-memory "
                   "path disabled (HAL_COMM_SHM_DISABLE=1), as ranks on two hosts do; the "
                   "cross-host path's cost on one machine, without a network's latency\n",
                   twin->label);
        if (emulator && strstr(sides[b].backend, "trainium") != NULL)
            printf("   on the libnrt emulator (HAL_NEURON_LIBNRT): its collectives move data "
                   "through sockets and reduce on the host, so these figures measure the "
                   "plumbing (control messages, runtime calls, staging), not NeuronLink or "
                   "EFA\n");
        for (int i = 0; i < opt_nranks_counts; i++) {
            int n = opt_ranks[i];
            for (int c = 0; c < d.plan.ncolls; c++) {
                coll_kind_t kind = d.plan.coll[c];
                printf("\n# %s, %d processes\n", coll_kind_names[kind], n);
                print_sides(sides, b, sides[b].twin, n, kind, &d.plan);
            }
        }
    }
    record_figures(sides, nsides);
    bench_figure_simple(NULL, "memcpy (1 thread)", big, "memcpy", memcpy_gbs, "GB/s", "median");
    bench_figure_simple(NULL, "memcpy (1 thread)", big, "memcpy", memcpy_lo, "GB/s", "min");
    bench_figure_simple(NULL, "memcpy (1 thread)", big, "memcpy", memcpy_hi, "GB/s", "max");
    printf("\n");
    bench_load_report(&load);
    fflush(stdout);
    bench_progress("coll part took %.1f s", (double)(bench_now_ns() - t_start) / 1e9);
    return rc;
}
