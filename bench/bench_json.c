/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: the streaming JSON writer. */
#include "bench/bench_json.h"

#include <math.h>
#include <string.h>

void bench_json_init(bench_json_t *json, FILE *out)
{
    memset(json, 0, sizeof(*json));
    json->out = out;
}

/* What comes before any value: a comma after a previous member or element; inside an object a
 * value must follow its key. */
static void before_value(bench_json_t *json)
{
    if (json->depth == 0)
        return;
    int d = json->depth - 1;
    if (json->in_object[d]) {
        if (!json->after_key)
            json->misuse = true;
        json->after_key = false;
        return;
    }
    if (json->has_members[d])
        fputc(',', json->out);
    json->has_members[d] = true;
}

static void begin(bench_json_t *json, bool object)
{
    before_value(json);
    fputc(object ? '{' : '[', json->out);
    if (json->depth == BENCH_JSON_MAX_DEPTH) {
        json->misuse = true;
        return;
    }
    json->in_object[json->depth] = object;
    json->has_members[json->depth] = false;
    json->depth++;
}

static void end(bench_json_t *json, bool object)
{
    if (json->depth == 0 || json->in_object[json->depth - 1] != object || json->after_key) {
        json->misuse = true;
        return;
    }
    json->depth--;
    fputc(object ? '}' : ']', json->out);
}

void bench_json_begin_object(bench_json_t *json)
{
    begin(json, true);
}

void bench_json_end_object(bench_json_t *json)
{
    end(json, true);
}

void bench_json_begin_array(bench_json_t *json)
{
    begin(json, false);
}

void bench_json_end_array(bench_json_t *json)
{
    end(json, false);
}

/* A string literal: quotes, backslashes and control characters escaped; other bytes (UTF-8
 * included) as they are. */
static void write_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '\b':
            fputs("\\b", out);
            break;
        case '\f':
            fputs("\\f", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void bench_json_key(bench_json_t *json, const char *key)
{
    int d = json->depth - 1;
    if (d < 0 || !json->in_object[d] || json->after_key) {
        json->misuse = true;
        return;
    }
    if (json->has_members[d])
        fputc(',', json->out);
    json->has_members[d] = true;
    write_string(json->out, key ? key : "");
    fputc(':', json->out);
    json->after_key = true;
}

void bench_json_string(bench_json_t *json, const char *value)
{
    before_value(json);
    if (value)
        write_string(json->out, value);
    else
        fputs("null", json->out);
}

void bench_json_number(bench_json_t *json, double value)
{
    before_value(json);
    if (isfinite(value))
        fprintf(json->out, "%.9g", value); /* nine digits: more than any figure carries */
    else
        fputs("null", json->out);
}

void bench_json_int(bench_json_t *json, long long value)
{
    before_value(json);
    fprintf(json->out, "%lld", value);
}

void bench_json_bool(bench_json_t *json, bool value)
{
    before_value(json);
    fputs(value ? "true" : "false", json->out);
}

void bench_json_null(bench_json_t *json)
{
    before_value(json);
    fputs("null", json->out);
}

void bench_json_member_string(bench_json_t *json, const char *key, const char *value)
{
    bench_json_key(json, key);
    bench_json_string(json, value);
}

void bench_json_member_number(bench_json_t *json, const char *key, double value)
{
    bench_json_key(json, key);
    bench_json_number(json, value);
}

void bench_json_member_int(bench_json_t *json, const char *key, long long value)
{
    bench_json_key(json, key);
    bench_json_int(json, value);
}

void bench_json_member_bool(bench_json_t *json, const char *key, bool value)
{
    bench_json_key(json, key);
    bench_json_bool(json, value);
}

int bench_json_finish(bench_json_t *json)
{
    fputc('\n', json->out);
    if (json->depth != 0 || json->after_key)
        json->misuse = true;
    return json->misuse || ferror(json->out) ? -1 : 0;
}
