/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: deterministic fault injection (an emulator feature, not a libnrt one).
 *
 * A plan comes from NEURON_EMU_FAULTS (read by every nrt_init) or from nrt_emu_set_fault():
 *
 *     spec  := ""  |  rule ("," rule)*
 *     rule  := kind "_fail_after=" N [":" M]  |  "hw_error_after=" N
 *     kind  := "alloc" | "read" | "write" | "copy" | "memset"
 *
 * N and M are unsigned decimals, M >= 1, each key at most once, no spaces. The first N calls of
 * the kind succeed; the following M calls fail (every following call when ":M" is absent).
 * Allocations fail with NRT_RESOURCE, transfers with NRT_FAILURE. hw_error_after=N lets N data
 * transfers (read, write, copy, memset, each batch entry) succeed; the next one fails with
 * NRT_HW_ERROR and so does every later transfer and allocation until nrt_close (the device is
 * lost). Only calls that passed argument checks are counted, and a failed call has no effect.
 * Counters restart at every nrt_init and nrt_emu_set_fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/emu_internal.h"
#include "hal_backends/trainium/emulator/nrt_emu.h"

static const char *const rule_keys[EMU_FAULT_KINDS] = {
    "alloc_fail_after", "read_fail_after",   "write_fail_after",
    "copy_fail_after",  "memset_fail_after", "hw_error_after",
};

static struct {
    pthread_mutex_t lock;
    atomic_bool active; /* any rule armed, or the hardware error latched */
    emu_fault_plan_t plan;
    uint64_t seen[EMU_FAULT_KINDS];
    uint64_t fired[EMU_FAULT_KINDS];
    bool hw_latched;
} faults = { .lock = PTHREAD_MUTEX_INITIALIZER };

static NRT_STATUS reject(const char *origin, const char *spec, const char *item, const char *reason)
{
    EMU_ERR(origin,
            "fault spec \"%s\" rejected at \"%s\": %s (syntax: "
            "<alloc|read|write|copy|memset>_fail_after=N[:M] or hw_error_after=N, "
            "comma-separated)",
            spec, item, reason);
    return NRT_INVALID;
}

NRT_STATUS emu_faults_parse(const char *origin, const char *spec, emu_fault_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (spec == NULL || spec[0] == '\0')
        return NRT_SUCCESS;
    char buf[512];
    if (strlen(spec) >= sizeof(buf))
        return reject(origin, "(too long)", "", "the spec is longer than 511 characters");
    strcpy(buf, spec);

    char *item = buf;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma != NULL)
            *comma = '\0';
        char *eq = strchr(item, '=');
        if (item[0] == '\0')
            return reject(origin, spec, item, "empty rule");
        if (eq == NULL)
            return reject(origin, spec, item, "missing '='");
        *eq = '\0';
        int kind = -1;
        for (int k = 0; k < EMU_FAULT_KINDS; k++) {
            if (strcmp(item, rule_keys[k]) == 0)
                kind = k;
        }
        if (kind < 0)
            return reject(origin, spec, item, "unknown key");
        emu_fault_rule_t *rule = &plan->rule[kind];
        if (rule->armed)
            return reject(origin, spec, item, "key given twice");
        const char *value = eq + 1, *end;
        uint64_t after, count = 0;
        if (!emu_parse_u64_prefix(value, &end, &after))
            return reject(origin, spec, value, "expected an unsigned decimal count");
        if (*end == ':') {
            if (kind == EMU_FAULT_HW)
                return reject(origin, spec, value, "hw_error_after takes no \":M\" (it latches)");
            if (!emu_parse_u64_prefix(end + 1, &end, &count) || count == 0)
                return reject(origin, spec, value, "expected \":M\" with M >= 1");
        }
        if (*end != '\0')
            return reject(origin, spec, value, "trailing characters");
        rule->armed = true;
        rule->after = after;
        rule->count = count;
        if (comma == NULL)
            break;
        item = comma + 1;
    }
    return NRT_SUCCESS;
}

void emu_faults_commit(const emu_fault_plan_t *plan)
{
    pthread_mutex_lock(&faults.lock);
    if (plan != NULL)
        faults.plan = *plan;
    memset(faults.seen, 0, sizeof(faults.seen));
    memset(faults.fired, 0, sizeof(faults.fired));
    faults.hw_latched = false;
    bool active = false;
    for (int k = 0; k < EMU_FAULT_KINDS; k++)
        active = active || faults.plan.rule[k].armed;
    atomic_store(&faults.active, active);
    pthread_mutex_unlock(&faults.lock);
}

void emu_faults_clear_latch(void)
{
    pthread_mutex_lock(&faults.lock);
    faults.hw_latched = false;
    pthread_mutex_unlock(&faults.lock);
}

/* One call of kind: does its rule fire? Caller holds faults.lock. */
static bool rule_fires(emu_fault_kind_t kind)
{
    const emu_fault_rule_t *rule = &faults.plan.rule[kind];
    if (!rule->armed)
        return false;
    uint64_t n = faults.seen[kind]++;
    if (n < rule->after || (rule->count != 0 && faults.fired[kind] >= rule->count))
        return false;
    faults.fired[kind]++;
    return true;
}

NRT_STATUS emu_fault_hit(emu_fault_kind_t kind)
{
    if (!atomic_load(&faults.active))
        return NRT_SUCCESS;
    NRT_STATUS status = NRT_SUCCESS;
    pthread_mutex_lock(&faults.lock);
    if (faults.hw_latched) {
        status = NRT_HW_ERROR;
    } else if (rule_fires(kind)) {
        status = kind == EMU_FAULT_ALLOC ? NRT_RESOURCE : NRT_FAILURE;
    } else if (kind != EMU_FAULT_ALLOC && rule_fires(EMU_FAULT_HW)) {
        faults.hw_latched = true;
        status = NRT_HW_ERROR;
    }
    pthread_mutex_unlock(&faults.lock);
    return status;
}

void emu_faults_lock_for_fork(void)
{
    pthread_mutex_lock(&faults.lock);
}

void emu_faults_unlock_after_fork(void)
{
    pthread_mutex_unlock(&faults.lock);
}

NRT_EMU_EXPORT NRT_STATUS nrt_emu_set_fault(const char *spec)
{
    emu_fault_plan_t plan;
    NRT_STATUS status = emu_faults_parse("nrt_emu_set_fault", spec, &plan);
    if (status != NRT_SUCCESS)
        return status;
    emu_faults_commit(&plan);
    return NRT_SUCCESS;
}
