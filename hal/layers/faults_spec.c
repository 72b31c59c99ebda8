/* SPDX-License-Identifier: Apache-2.0 */
/* HAL_FAULTS: the parser (a pure function, fuzzed by fuzz/fuzz_faults_spec.c) and the seeded
 * draw that decides whether a call fails. Grammar and semantics: hal/layers/README.md. */
#include <stdio.h>
#include <string.h>

#include "hal/layers/faults.h"

static const char *const kind_names[HAL_FAULT_KINDS] = {
    [HAL_FAULT_ALLOC] = "alloc",
    [HAL_FAULT_DEVICE_LOST] = "device_lost",
    [HAL_FAULT_STREAM_FAIL] = "stream_fail",
    [HAL_FAULT_COLL_TIMEOUT] = "coll_timeout",
    [HAL_FAULT_PEER_DEATH] = "peer_death",
};

const char *hal_fault_kind_name(hal_fault_kind_t kind)
{
    return (unsigned)kind < HAL_FAULT_KINDS ? kind_names[kind] : "unknown";
}

/* A piece of the spec: [begin, end) of the whole string. */
typedef struct span {
    size_t begin, end;
} span_t;

typedef struct parser {
    const char *s;
    char *msg;
    size_t msg_size;
} parser_t;

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static span_t trim(const parser_t *p, span_t t)
{
    while (t.begin < t.end && is_blank(p->s[t.begin]))
        t.begin++;
    while (t.end > t.begin && is_blank(p->s[t.end - 1]))
        t.end--;
    return t;
}

static bool equals(const parser_t *p, span_t t, const char *word)
{
    size_t n = strlen(word);
    return t.end - t.begin == n && memcmp(p->s + t.begin, word, n) == 0;
}

/* Reports an error about token t. */
static hal_status_t fail(const parser_t *p, span_t t, const char *why)
{
    if (p->msg_size > 0) {
        size_t len = t.end - t.begin;
        int shown = len > 40 ? 40 : (int)len;
        snprintf(p->msg, p->msg_size, "HAL_FAULTS: at offset %zu ('%.*s%s'): %s", t.begin, shown,
                 p->s + t.begin, len > 40 ? "..." : "", why);
    }
    return HAL_ERROR_INVALID_ARGUMENT;
}

/* A decimal integer without sign, at most max. */
static bool parse_uint(const parser_t *p, span_t t, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (t.begin == t.end)
        return false;
    for (size_t i = t.begin; i < t.end; i++) {
        char c = p->s[i];
        if (c < '0' || c > '9')
            return false;
        unsigned d = (unsigned)(c - '0');
        if (v > (max - d) / 10u)
            return false;
        v = v * 10u + d;
    }
    *out = v;
    return true;
}

/* A probability: "0", "1", "0.<digits>" or "1.<zeros>" (at most 19 digits after the point).
 * *always is set for 1; otherwise *threshold = floor(p * 2^64). */
static bool parse_probability(const parser_t *p, span_t t, bool *always, uint64_t *threshold)
{
    size_t n = t.end - t.begin;
    const char *s = p->s + t.begin;
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return false;
    if (n > 1 && s[1] != '.')
        return false;
    if (n == 2) /* "0." or "1." */
        return false;
    uint64_t num = 0, den = 1;
    for (size_t i = 2; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || i - 2 >= 19)
            return false;
        num = num * 10u + (uint64_t)(s[i] - '0');
        den *= 10u;
    }
    if (s[0] == '1') {
        if (num != 0)
            return false; /* above 1 */
        *always = true;
        *threshold = UINT64_MAX;
        return true;
    }
    *always = false;
    *threshold = (uint64_t)(((unsigned __int128)num << 64) / den);
    return true;
}

static bool is_collective(hal_fault_kind_t kind)
{
    return kind == HAL_FAULT_COLL_TIMEOUT || kind == HAL_FAULT_PEER_DEATH;
}

/* kind[:param,param...] */
static hal_status_t parse_rule(const parser_t *p, span_t item, hal_fault_rule_t *r)
{
    size_t colon = item.begin;
    while (colon < item.end && p->s[colon] != ':')
        colon++;
    span_t kind = trim(p, (span_t){ item.begin, colon });
    int k = -1;
    for (int i = 0; i < HAL_FAULT_KINDS; i++)
        if (equals(p, kind, kind_names[i]))
            k = i;
    if (k < 0)
        return fail(p, kind,
                    "unknown fault kind (known: alloc, device_lost, stream_fail, coll_timeout, "
                    "peer_death; or seed=N, log=0|1)");
    *r = (hal_fault_rule_t){ .kind = (hal_fault_kind_t)k,
                             .always = true,
                             .threshold = UINT64_MAX,
                             .count = 1,
                             .device = -1,
                             .rank = -1,
                             .offset = (uint32_t)item.begin };
    bool seen_p = false, seen_after = false, seen_count = false, seen_device = false,
         seen_rank = false;
    if (colon == item.end)
        return HAL_OK;
    size_t pos = colon + 1;
    for (;;) {
        size_t stop = pos;
        while (stop < item.end && p->s[stop] != ',')
            stop++;
        span_t param = trim(p, (span_t){ pos, stop });
        size_t eq = param.begin;
        while (eq < param.end && p->s[eq] != '=')
            eq++;
        if (param.begin == param.end)
            return fail(p, (span_t){ pos, stop }, "empty parameter");
        if (eq == param.end)
            return fail(p, param, "expected name=value");
        span_t name = trim(p, (span_t){ param.begin, eq });
        span_t value = trim(p, (span_t){ eq + 1, param.end });
        bool *seen;
        uint64_t v = 0;
        if (equals(p, name, "p")) {
            seen = &seen_p;
            if (!parse_probability(p, value, &r->always, &r->threshold))
                return fail(p, param, "p must be a probability from 0 to 1 (e.g. 0.01)");
        } else if (equals(p, name, "after")) {
            seen = &seen_after;
            if (!parse_uint(p, value, UINT64_MAX - 1, &v))
                return fail(p, param, "after must be a decimal number of calls");
            r->after = v;
        } else if (equals(p, name, "count")) {
            seen = &seen_count;
            if (!parse_uint(p, value, UINT64_MAX - 1, &v) || v == 0)
                return fail(p, param, "count must be a decimal number of at least 1");
            r->count = v;
        } else if (equals(p, name, "device")) {
            seen = &seen_device;
            if (!parse_uint(p, value, 65535, &v))
                return fail(p, param, "device must be a device index from 0 to 65535");
            r->device = (int64_t)v;
        } else if (equals(p, name, "rank")) {
            seen = &seen_rank;
            if (!is_collective(r->kind))
                return fail(p, param, "rank applies to coll_timeout and peer_death only");
            if (!parse_uint(p, value, 4095, &v))
                return fail(p, param, "rank must be a rank from 0 to 4095");
            r->rank = (int64_t)v;
        } else {
            return fail(p, name, "unknown parameter (known: p, after, count, device, rank)");
        }
        if (*seen)
            return fail(p, param, "parameter given twice");
        *seen = true;
        if (stop == item.end)
            break;
        pos = stop + 1;
    }
    /* With a probability a rule keeps firing; without one it fires once. */
    if (seen_p && !seen_count)
        r->count = HAL_FAULTS_UNLIMITED;
    return HAL_OK;
}

hal_status_t hal_faults_parse(const char *spec, hal_faults_spec_t *out, char *msg, size_t msg_size)
{
    memset(out, 0, sizeof(*out));
    if (msg_size > 0)
        msg[0] = '\0';
    if (!spec)
        return HAL_OK;
    parser_t p = { spec, msg, msg_size };
    size_t len = strnlen(spec, HAL_FAULTS_MAX_SPEC + 1);
    if (len > HAL_FAULTS_MAX_SPEC)
        return fail(&p, (span_t){ 0, 0 }, "the spec is longer than 4096 characters");
    bool seen_seed = false, seen_log = false;
    size_t pos = 0;
    for (;;) {
        size_t stop = pos;
        while (stop < len && spec[stop] != ';')
            stop++;
        span_t item = trim(&p, (span_t){ pos, stop });
        if (item.begin < item.end) {
            size_t eq = item.begin;
            while (eq < item.end && spec[eq] != '=' && spec[eq] != ':')
                eq++;
            span_t head = trim(&p, (span_t){ item.begin, eq });
            span_t value = trim(&p, (span_t){ eq + 1, item.end });
            bool global = eq < item.end && spec[eq] == '=';
            if (global && equals(&p, head, "seed")) {
                if (seen_seed)
                    return fail(&p, item, "seed given twice");
                if (!parse_uint(&p, value, UINT64_MAX, &out->seed))
                    return fail(&p, item, "seed must be a decimal number below 2^64");
                seen_seed = true;
            } else if (global && equals(&p, head, "log")) {
                if (seen_log)
                    return fail(&p, item, "log given twice");
                if (!equals(&p, value, "0") && !equals(&p, value, "1"))
                    return fail(&p, item, "log must be 0 or 1");
                out->log = spec[value.begin] == '1';
                seen_log = true;
            } else if (global) {
                return fail(&p, head, "unknown setting (known: seed, log)");
            } else {
                if (out->nrules == HAL_FAULTS_MAX_RULES)
                    return fail(&p, item, "more than 32 rules");
                hal_status_t st = parse_rule(&p, item, &out->rules[out->nrules]);
                if (st != HAL_OK)
                    return st;
                out->nrules++;
            }
        }
        if (stop >= len)
            break;
        pos = stop + 1;
    }
    return HAL_OK;
}

/* SplitMix64's finalizer. */
static uint64_t mix(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

bool hal_faults_draw(const hal_faults_spec_t *spec, uint32_t rule_index, uint64_t key, uint64_t k)
{
    const hal_fault_rule_t *r = &spec->rules[rule_index];
    if (k <= r->after)
        return false;
    if (r->always)
        return true;
    uint64_t z = mix(spec->seed ^ mix(((uint64_t)rule_index << 48) ^ mix(key ^ mix(k))));
    return z < r->threshold;
}
