/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: the results of a run and their JSON document. */
#include "bench/bench_results.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_json.h"

#define SCHEMA "hal-bench/1"

typedef struct machine_line {
    char part[16];
    char backend[32];
    long cpus;
    double wall_s, self_cpu_s, other_cpu_s, steal_s;
    bool with_children;
} machine_line_t;

typedef struct part_target {
    char part[16];
    bench_target_t target;
} part_target_t;

/* Grown by doubling; the driver's thread alone touches them. */
static struct {
    char part[16];
    bench_figure_t *figures;
    size_t nfigures, figures_cap;
    machine_line_t *machines;
    size_t nmachines, machines_cap;
    part_target_t *targets;
    size_t ntargets, targets_cap;
    bool out_of_memory;
} store;

/* Makes room for one more element of `size` bytes in *items (count *n, capacity *cap). */
static bool grow(void **items, size_t size, size_t n, size_t *cap)
{
    if (n < *cap)
        return true;
    size_t more = *cap ? *cap * 2 : 64;
    void *grown = realloc(*items, more * size);
    if (!grown) {
        store.out_of_memory = true;
        return false;
    }
    *items = grown;
    *cap = more;
    return true;
}

void bench_results_begin_part(const char *part)
{
    snprintf(store.part, sizeof(store.part), "%s", part);
}

void bench_figure_add(const bench_figure_t *figure)
{
    if (!grow((void **)&store.figures, sizeof(*store.figures), store.nfigures, &store.figures_cap))
        return;
    bench_figure_t *f = &store.figures[store.nfigures++];
    *f = *figure;
    snprintf(f->part, sizeof(f->part), "%s", store.part);
}

void bench_figure_simple(const char *backend, const char *measurement, uint64_t bytes,
                         const char *implementation, double value, const char *unit,
                         const char *statistic)
{
    bench_figure_t f = { .bytes = bytes, .value = value };
    snprintf(f.backend, sizeof(f.backend), "%s", backend ? backend : "");
    snprintf(f.measurement, sizeof(f.measurement), "%s", measurement);
    snprintf(f.implementation, sizeof(f.implementation), "%s", implementation);
    snprintf(f.unit, sizeof(f.unit), "%s", unit);
    snprintf(f.statistic, sizeof(f.statistic), "%s", statistic);
    bench_figure_add(&f);
}

void bench_results_machine(const char *backend, long cpus, double wall_s, double self_cpu_s,
                           double other_cpu_s, double steal_s, bool with_children)
{
    if (!grow((void **)&store.machines, sizeof(*store.machines), store.nmachines,
              &store.machines_cap))
        return;
    machine_line_t *m = &store.machines[store.nmachines++];
    memset(m, 0, sizeof(*m));
    snprintf(m->part, sizeof(m->part), "%s", store.part);
    snprintf(m->backend, sizeof(m->backend), "%s", backend ? backend : "");
    m->cpus = cpus;
    m->wall_s = wall_s;
    m->self_cpu_s = self_cpu_s;
    m->other_cpu_s = other_cpu_s;
    m->steal_s = steal_s;
    m->with_children = with_children;
}

void bench_results_targets(const bench_targets_t *targets, const char *part)
{
    for (int i = 0; i < targets->count; i++) {
        if (!grow((void **)&store.targets, sizeof(*store.targets), store.ntargets,
                  &store.targets_cap))
            return;
        part_target_t *t = &store.targets[store.ntargets++];
        snprintf(t->part, sizeof(t->part), "%s", part);
        t->target = targets->t[i];
    }
}

/* ---- the document ---------------------------------------------------------------------------- */

static void member_or_null(bench_json_t *j, const char *key, const char *value)
{
    bench_json_member_string(j, key, value && value[0] ? value : NULL);
}

static void member_count_or_null(bench_json_t *j, const char *key, long long value)
{
    bench_json_key(j, key);
    if (value > 0)
        bench_json_int(j, value);
    else
        bench_json_null(j);
}

static void member_number_or_null(bench_json_t *j, const char *key, bool present, double value)
{
    bench_json_key(j, key);
    if (present)
        bench_json_number(j, value);
    else
        bench_json_null(j);
}

static void write_figure(bench_json_t *j, const bench_figure_t *f)
{
    bench_json_begin_object(j);
    bench_json_member_string(j, "part", f->part);
    member_or_null(j, "backend", f->backend);
    bench_json_member_string(j, "measurement", f->measurement);
    member_or_null(j, "collective", f->collective);
    member_count_or_null(j, "ranks", f->ranks);
    member_count_or_null(j, "hosts", f->hosts);
    member_or_null(j, "transport", f->transport);
    member_count_or_null(j, "bytes", (long long)f->bytes);
    bench_json_member_string(j, "implementation", f->implementation);
    member_or_null(j, "algorithm", f->algorithm);
    bench_json_member_number(j, "value", f->value);
    bench_json_member_string(j, "unit", f->unit);
    bench_json_member_string(j, "statistic", f->statistic);
    bench_json_end_object(j);
}

/* A target's backend is the start of its name, up to the first ": " (bench_target_t). */
static void write_target(bench_json_t *j, const part_target_t *pt)
{
    const bench_target_t *t = &pt->target;
    char backend[BENCH_TARGET_NAME_MAX] = "";
    const char *sep = strstr(t->name, ": ");
    if (sep)
        snprintf(backend, sizeof(backend), "%.*s", (int)(sep - t->name), t->name);
    bench_json_begin_object(j);
    bench_json_member_string(j, "part", pt->part);
    member_or_null(j, "backend", backend);
    bench_json_member_string(j, "name", t->name);
    member_or_null(j, "detail", t->detail);
    member_number_or_null(j, "measured", t->has_values, t->measured);
    member_number_or_null(j, "threshold", t->has_values, t->threshold);
    member_or_null(j, "relation", t->has_values ? t->relation : NULL);
    member_or_null(j, "unit", t->has_values ? t->unit : NULL);
    static const char *const verdicts[] = { [BENCH_MET] = "met",
                                            [BENCH_MISSED] = "missed",
                                            [BENCH_FAILED] = "failed",
                                            [BENCH_NA] = "n/a" };
    bench_json_member_string(j, "verdict", verdicts[t->verdict]);
    bench_json_end_object(j);
}

static void write_machine(bench_json_t *j, const machine_line_t *m)
{
    double capacity = m->wall_s * (double)m->cpus;
    double share = capacity > 0.0 ? (m->other_cpu_s + m->steal_s) / capacity : 0.0;
    bench_json_begin_object(j);
    bench_json_member_string(j, "part", m->part);
    member_or_null(j, "backend", m->backend);
    bench_json_member_int(j, "cpus", m->cpus);
    bench_json_member_number(j, "wall_s", m->wall_s);
    bench_json_member_number(j, "self_cpu_s", m->self_cpu_s);
    bench_json_member_bool(j, "self_includes_children", m->with_children);
    bench_json_member_number(j, "other_cpu_s", m->other_cpu_s);
    bench_json_member_number(j, "steal_s", m->steal_s);
    bench_json_member_number(j, "self_share", capacity > 0.0 ? m->self_cpu_s / capacity : 0.0);
    bench_json_member_number(j, "other_share", share);
    bench_json_member_bool(j, "quiet", share <= BENCH_LOAD_QUIET_SHARE);
    bench_json_end_object(j);
}

int bench_results_write_json(const char *path, const bench_run_info_t *info)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "hal-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char date[32] = "";
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc))
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &utc);

    bench_json_t j;
    bench_json_init(&j, f);
    bench_json_begin_object(&j);
    bench_json_member_string(&j, "schema", SCHEMA);
    bench_json_member_string(&j, "date", date);
    member_or_null(&j, "commit", info->commit);
    bench_json_member_string(&j, "command", info->command);
    bench_json_member_string(&j, "backends", info->backends);
    bench_json_member_bool(&j, "quick", info->quick);
    bench_json_member_int(&j, "exit_status", info->exit_status);

    int met = 0, counted = 0;
    for (size_t i = 0; i < store.ntargets; i++) {
        met += store.targets[i].target.verdict == BENCH_MET;
        counted += store.targets[i].target.verdict != BENCH_NA;
    }
    bench_json_key(&j, "summary");
    bench_json_begin_object(&j);
    bench_json_member_int(&j, "targets_met", met);
    bench_json_member_int(&j, "targets_counted", counted);
    bench_json_end_object(&j);

    bench_json_key(&j, "machine");
    bench_json_begin_array(&j);
    for (size_t i = 0; i < store.nmachines; i++)
        write_machine(&j, &store.machines[i]);
    bench_json_end_array(&j);

    bench_json_key(&j, "targets");
    bench_json_begin_array(&j);
    for (size_t i = 0; i < store.ntargets; i++)
        write_target(&j, &store.targets[i]);
    bench_json_end_array(&j);

    bench_json_key(&j, "figures");
    bench_json_begin_array(&j);
    for (size_t i = 0; i < store.nfigures; i++)
        write_figure(&j, &store.figures[i]);
    bench_json_end_array(&j);
    bench_json_end_object(&j);

    int rc = bench_json_finish(&j);
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0 || store.out_of_memory) {
        fprintf(stderr, "hal-bench: %s: %s\n", path,
                rc != 0 ? "writing the results failed" : "out of memory: some results are missing");
        return -1;
    }
    return 0;
}
