/* SPDX-License-Identifier: Apache-2.0 */
/* hal-bench: a small streaming JSON writer (RFC 8259) for the results file (--json). Values
 * are written as they come, commas and nesting are tracked here; strings are escaped. */
#ifndef BENCH_BENCH_JSON_H
#define BENCH_BENCH_JSON_H

#include <stdbool.h>
#include <stdio.h>

#define BENCH_JSON_MAX_DEPTH 16

typedef struct bench_json {
    FILE *out;
    int depth;                              /* open objects and arrays */
    bool in_object[BENCH_JSON_MAX_DEPTH];   /* the container at each depth is an object */
    bool has_members[BENCH_JSON_MAX_DEPTH]; /* something was written in it (a comma is due) */
    bool after_key;                         /* a key was written: its value comes next */
    bool misuse;                            /* unbalanced nesting, or a value without a key */
} bench_json_t;

/* Starts a document written to `out` (not owned). Thread safety: one writer per thread. */
void bench_json_init(bench_json_t *json, FILE *out);

/* Open and close an object or an array (as a value: after a key, in an array, or at the top). */
void bench_json_begin_object(bench_json_t *json);
void bench_json_end_object(bench_json_t *json);
void bench_json_begin_array(bench_json_t *json);
void bench_json_end_array(bench_json_t *json);

/* The key of the next member of the current object. */
void bench_json_key(bench_json_t *json, const char *key);

/* Values. A NULL string is written as null; a number that is not finite (NaN, infinity: a
 * figure that could not be computed) too, since JSON has no such numbers. */
void bench_json_string(bench_json_t *json, const char *value);
void bench_json_number(bench_json_t *json, double value);
void bench_json_int(bench_json_t *json, long long value);
void bench_json_bool(bench_json_t *json, bool value);
void bench_json_null(bench_json_t *json);

/* A member (key and value) of the current object. */
void bench_json_member_string(bench_json_t *json, const char *key, const char *value);
void bench_json_member_number(bench_json_t *json, const char *key, double value);
void bench_json_member_int(bench_json_t *json, const char *key, long long value);
void bench_json_member_bool(bench_json_t *json, const char *key, bool value);

/* Ends the document with a newline. Returns 0, or -1 when the document is not complete
 * (unbalanced nesting, a value without a key) or the stream reported an error. */
int bench_json_finish(bench_json_t *json);

#endif /* BENCH_BENCH_JSON_H */
