/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: benchmarks of the HAL with their targets.
 *
 *   hal_bench [--part=mem|launch|coll|all] [--backend=cpu[,other...]] [--quick] [--no-peers]
 *             [--peer-dir=DIR] [--ranks=2,4] [--no-cross-host] [--json=FILE] [--commit=ID]
 *             [--help]
 *
 * Every figure is measured in the same run as the baseline it is compared with. The output ends
 * with one "target: ... met|MISSED" line per target and "bench <part>: N/M targets met"; with
 * --json, every figure, target and machine line also goes to FILE (bench_results.h). The exit
 * status is 0 when every measurement completed (whether or not its target was met), 1 when a
 * measurement failed or the results file could not be written, 2 on a usage error. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_parts.h"
#include "bench/bench_results.h"
#include "bench/bench_util.h"

#define MAX_BACKENDS 8

typedef struct part {
    const char *name;
    bench_part_fn run;
    const char *what;
    bool explicit_only; /* not part of "all" (needs hardware the default run may lack) */
} part_t;

static const part_t parts[] = {
    { "mem", bench_mem_run,
      "HAL dispatch overhead, stream latency, copy bandwidth, caching allocator", false },
    { "launch", bench_launch_run, "kernel launch: enqueue cost and round trip of an empty kernel",
      false },
    { "coll", bench_coll_run,
      "collectives among rank processes, nccl-tests style, vs Open MPI and Gloo", false },
#if HAL_BENCH_WITH_CUDA
    { "cuda", bench_cuda_run, "the cuda backend vs raw CUDA and NCCL (needs an NVIDIA GPU)", true },
#endif
};

#define PART_COUNT ((int)(sizeof(parts) / sizeof(parts[0])))

static void usage(FILE *f)
{
    fprintf(f, "usage: hal_bench [--part=NAME|all] [--backend=NAME[,NAME...]] [--quick] "
               "[--no-peers]\n"
               "                 [--peer-dir=DIR] [--ranks=N[,N...]] [--no-cross-host] "
               "[--json=FILE]\n"
               "                 [--commit=ID] [--help]\n"
               "\n"
               "  --part=NAME      which benchmarks to run (default: all):\n");
    for (int i = 0; i < PART_COUNT; i++)
        fprintf(f, "                     %-6s %s\n", parts[i].name, parts[i].what);
    fprintf(f, "  --backend=LIST   comma-separated backend names (default: cpu); each is opened\n"
               "                   with hal_backend_open (HAL_BACKEND_PATH is searched first)\n"
               "  --quick          short smoke run (a few seconds); figures are indicative only\n"
               "  --no-peers       coll: do not run Open MPI and Gloo (their targets read n/a)\n"
               "  --peer-dir=DIR   coll: where coll_peer_mpi and coll_peer_gloo are (default:\n"
               "                   this executable's directory)\n"
               "  --ranks=LIST     coll: process counts (default: 2,4)\n"
               "  --no-cross-host  coll: skip the cpu backend's run across two simulated hosts\n"
               "                   (TCP on loopback, shared memory disabled)\n"
               "  --json=FILE      also write every figure, target and machine line to FILE\n"
               "  --commit=ID      the source revision measured, recorded in the --json file\n"
               "  --help           this text\n"
               "\n"
               "Figures go to stdout, progress to stderr. Exit status: 0 when every measurement\n"
               "completed (targets met or not), 1 when one failed, 2 on a usage error.\n");
}

/* When HAL_BACKEND_PATH is unset, points it at the backend folders of a Bazel runfiles tree
 * (bazel run / bazel test), so the binary works without set-up there. */
static void default_backend_path(const char *argv0, const char *const *backends, int n)
{
    const char *env = getenv("HAL_BACKEND_PATH");
    if (env && *env)
        return;
    char roots[3][PATH_MAX];
    int nroots = 0;
    snprintf(roots[nroots++], PATH_MAX, ".");
    const char *rf = getenv("RUNFILES_DIR");
    if (rf && *rf)
        snprintf(roots[nroots++], PATH_MAX, "%s/torch_hal", rf);
    snprintf(roots[nroots++], PATH_MAX, "%s.runfiles/torch_hal", argv0);

    char path[4096] = "";
    size_t used = 0;
    for (int b = 0; b < n; b++) {
        for (int r = 0; r < nroots; r++) {
            char lib[PATH_MAX + 128], dir[PATH_MAX + 64], real[PATH_MAX];
            if (snprintf(dir, sizeof(dir), "%s/hal_backends/%s", roots[r], backends[b]) >=
                    (int)sizeof(dir) ||
                snprintf(lib, sizeof(lib), "%s/libhal_backend_%s.so", dir, backends[b]) >=
                    (int)sizeof(lib))
                continue;
            if (access(lib, R_OK) != 0 || !realpath(dir, real))
                continue;
            int w = snprintf(path + used, sizeof(path) - used, "%s%s", used ? ":" : "", real);
            if (w > 0 && (size_t)w < sizeof(path) - used)
                used += (size_t)w;
            break;
        }
    }
    if (used) {
        setenv("HAL_BACKEND_PATH", path, 1);
        bench_progress("HAL_BACKEND_PATH was unset; using the runfiles tree: %s", path);
    }
}

/* The command line as one string (arguments with spaces are not quoted: for reading only). */
static const char *command_line(int argc, char **argv, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? " " : "", argv[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}

int main(int argc, char **argv)
{
    static char command[2048], backends_given[512];
    bench_run_info_t run_info = { 0 };
    if (argc > 1 && strcmp(argv[1], BENCH_COLL_RANK_ARG) == 0)
        return bench_coll_rank_main(argc, argv);

    bench_options_t opts = { 0 };
    const char *part_arg = "all";
    int coll_opt;
    char backend_arg[512] = "cpu";
    const char *json_path = NULL, *commit = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            opts.quick = true;
        } else if ((coll_opt = bench_coll_option(a)) != 0) {
            if (coll_opt < 0)
                return 2;
        } else if (strncmp(a, "--json=", 7) == 0 && a[7]) {
            json_path = a + 7;
        } else if (strncmp(a, "--commit=", 9) == 0) {
            commit = a + 9;
        } else if (strncmp(a, "--part=", 7) == 0) {
            part_arg = a + 7;
        } else if (strncmp(a, "--backend=", 10) == 0) {
            if (strlen(a + 10) >= sizeof(backend_arg)) {
                fprintf(stderr, "hal-bench: --backend list too long\n");
                return 2;
            }
            snprintf(backend_arg, sizeof(backend_arg), "%s", a + 10);
        } else {
            fprintf(stderr, "hal-bench: unknown argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }

    run_info.backends = backends_given; /* before strtok_r cuts backend_arg */
    snprintf(backends_given, sizeof(backends_given), "%s", backend_arg);

    const char *backends[MAX_BACKENDS];
    int nbackends = 0;
    char *save = NULL;
    for (char *tok = strtok_r(backend_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nbackends == MAX_BACKENDS) {
            fprintf(stderr, "hal-bench: at most %d backends\n", MAX_BACKENDS);
            return 2;
        }
        backends[nbackends++] = tok;
    }
    if (nbackends == 0) {
        fprintf(stderr, "hal-bench: --backend needs at least one name\n");
        return 2;
    }

    bool run_part[PART_COUNT] = { false };
    if (strcmp(part_arg, "all") == 0) {
        for (int i = 0; i < PART_COUNT; i++)
            run_part[i] = !parts[i].explicit_only;
    } else {
        int found = -1;
        for (int i = 0; i < PART_COUNT; i++) {
            if (strcmp(part_arg, parts[i].name) == 0)
                found = i;
        }
        if (found < 0) {
            fprintf(stderr, "hal-bench: unknown part '%s'\n\n", part_arg);
            usage(stderr);
            return 2;
        }
        run_part[found] = true;
    }

    default_backend_path(argv[0], backends, nbackends);

    int rc = 0, parts_run = 0, met_all = 0, counted_all = 0;
    for (int i = 0; i < PART_COUNT; i++) {
        if (!run_part[i])
            continue;
        static bench_targets_t targets;
        memset(&targets, 0, sizeof(targets));
        bench_results_begin_part(parts[i].name);
        if (parts[i].run(&opts, backends, nbackends, &targets) != 0)
            rc = 1;
        printf("\n");
        met_all += bench_targets_print(&targets, parts[i].name);
        bench_results_targets(&targets, parts[i].name);
        for (int t = 0; t < targets.count; t++)
            counted_all += targets.t[t].verdict != BENCH_NA;
        parts_run++;
    }
    if (parts_run > 1)
        printf("bench all: %d/%d targets met\n", met_all, counted_all);
    if (rc != 0)
        fprintf(stderr, "hal-bench: some measurements failed (see the errors above)\n");
    if (json_path) {
        run_info.commit = commit;
        run_info.command = command_line(argc, argv, command, sizeof(command));
        run_info.quick = opts.quick;
        run_info.exit_status = rc;
        if (bench_results_write_json(json_path, &run_info) != 0)
            rc = 1;
        else
            bench_progress("results: %s", json_path);
    }
    return rc;
}
