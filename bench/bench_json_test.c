/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON writer of hal_bench --json: what it writes for each kind of value, how strings are
 * escaped, and that misuse (unbalanced nesting, a member without a key) is reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_json.h"
#include "tools/ctest/ctest.h"

/* A writer on an in-memory stream; text() ends the document and returns what was written. */
typedef struct doc {
    char *buf;
    size_t len;
    FILE *f;
    bench_json_t json;
    int finish_rc;
} doc_t;

static void doc_open(doc_t *d)
{
    memset(d, 0, sizeof(*d));
    d->f = open_memstream(&d->buf, &d->len);
    bench_json_init(&d->json, d->f);
}

static const char *doc_text(doc_t *d)
{
    d->finish_rc = bench_json_finish(&d->json);
    fclose(d->f);
    return d->buf;
}

/* Ends the document and compares it with `want` (printing what it got when they differ); also
 * requires bench_json_finish to have found the document complete. Frees the text. */
static int doc_is(doc_t *d, const char *want)
{
    const char *text = doc_text(d);
    int same = strcmp(text, want) == 0;
    if (!same)
        fprintf(stderr, "got:  %swant: %s", text, want);
    free(d->buf);
    return same && d->finish_rc == 0;
}

CTEST(bench_json, nested_document)
{
    doc_t d;
    doc_open(&d);
    CTEST_CHECK(d.f != NULL);
    bench_json_begin_object(&d.json);
    bench_json_member_string(&d.json, "part", "coll");
    bench_json_member_int(&d.json, "ranks", 4);
    bench_json_member_number(&d.json, "busbw", 12.5);
    bench_json_member_bool(&d.json, "quick", false);
    bench_json_key(&d.json, "sizes");
    bench_json_begin_array(&d.json);
    bench_json_int(&d.json, 8);
    bench_json_int(&d.json, 1048576);
    bench_json_begin_object(&d.json);
    bench_json_end_object(&d.json);
    bench_json_null(&d.json);
    bench_json_end_array(&d.json);
    bench_json_member_string(&d.json, "commit", NULL);
    bench_json_end_object(&d.json);
    CTEST_CHECK(doc_is(&d, "{\"part\":\"coll\",\"ranks\":4,\"busbw\":12.5,\"quick\":false,"
                           "\"sizes\":[8,1048576,{},null],\"commit\":null}\n"));
    return CTEST_PASS;
}

CTEST(bench_json, strings_are_escaped)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_array(&d.json);
    bench_json_string(&d.json, "quote \" backslash \\ newline \n tab \t cr \r");
    bench_json_string(&d.json, "bell \a escape \x1b unit \x1f del \x7f");
    bench_json_string(&d.json, "Gr\xc3\xbc\xc3\x9f"
                               "e");
    bench_json_end_array(&d.json);
    CTEST_CHECK(doc_is(&d, "[\"quote \\\" backslash \\\\ newline \\n tab \\t cr \\r\","
                           "\"bell \\u0007 escape \\u001b unit \\u001f del \x7f\","
                           "\"Gr\xc3\xbc\xc3\x9f"
                           "e\"]\n"));
    return CTEST_PASS;
}

CTEST(bench_json, numbers_that_are_not_finite_are_null)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_array(&d.json);
    bench_json_number(&d.json, NAN);
    bench_json_number(&d.json, INFINITY);
    bench_json_number(&d.json, -INFINITY);
    bench_json_number(&d.json, 0.1);
    bench_json_number(&d.json, 1e-9);
    bench_json_number(&d.json, 268435456.0);
    bench_json_end_array(&d.json);
    CTEST_CHECK(doc_is(&d, "[null,null,null,0.1,1e-09,268435456]\n"));
    return CTEST_PASS;
}

/* The status bench_json_finish gives a document written by `writes`. */
static int finish_status_of(void (*writes)(bench_json_t *json))
{
    doc_t d;
    doc_open(&d);
    writes(&d.json);
    doc_text(&d);
    free(d.buf);
    return d.finish_rc;
}

static void unclosed_container(bench_json_t *json)
{
    bench_json_begin_object(json);
    bench_json_key(json, "open");
    bench_json_begin_array(json);
}

static void mismatched_close(bench_json_t *json)
{
    bench_json_begin_array(json);
    bench_json_end_object(json);
}

static void member_without_key(bench_json_t *json)
{
    bench_json_begin_object(json);
    bench_json_int(json, 1);
    bench_json_end_object(json);
}

static void key_without_value(bench_json_t *json)
{
    bench_json_begin_object(json);
    bench_json_key(json, "dangling");
    bench_json_end_object(json);
}

static void key_outside_an_object(bench_json_t *json)
{
    bench_json_begin_array(json);
    bench_json_key(json, "not here");
    bench_json_end_array(json);
}

CTEST(bench_json, misuse_is_reported)
{
    CTEST_CHECK(finish_status_of(unclosed_container) == -1);
    CTEST_CHECK(finish_status_of(mismatched_close) == -1);
    CTEST_CHECK(finish_status_of(member_without_key) == -1);
    CTEST_CHECK(finish_status_of(key_without_value) == -1);
    CTEST_CHECK(finish_status_of(key_outside_an_object) == -1);
    return CTEST_PASS;
}
