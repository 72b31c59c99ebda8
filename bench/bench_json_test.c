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
    const char *text = doc_text(&d);
    int ok = strcmp(text, "{\"part\":\"coll\",\"ranks\":4,\"busbw\":12.5,\"quick\":false,"
                          "\"sizes\":[8,1048576,{},null],\"commit\":null}\n") == 0;
    if (!ok)
        fprintf(stderr, "got: %s", text);
    int rc = d.finish_rc;
    free(d.buf);
    CTEST_CHECK(ok);
    CTEST_CHECK(rc == 0);
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
    const char *text = doc_text(&d);
    int ok = strcmp(text, "[\"quote \\\" backslash \\\\ newline \\n tab \\t cr \\r\","
                          "\"bell \\u0007 escape \\u001b unit \\u001f del \x7f\","
                          "\"Gr\xc3\xbc\xc3\x9f"
                          "e\"]\n") == 0;
    if (!ok)
        fprintf(stderr, "got: %s", text);
    int rc = d.finish_rc;
    free(d.buf);
    CTEST_CHECK(ok);
    CTEST_CHECK(rc == 0);
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
    const char *text = doc_text(&d);
    int ok = strcmp(text, "[null,null,null,0.1,1e-09,268435456]\n") == 0;
    if (!ok)
        fprintf(stderr, "got: %s", text);
    free(d.buf);
    CTEST_CHECK(ok);
    return CTEST_PASS;
}

CTEST(bench_json, unclosed_container_is_reported)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_object(&d.json);
    bench_json_key(&d.json, "open");
    bench_json_begin_array(&d.json);
    doc_text(&d);
    free(d.buf);
    CTEST_CHECK(d.finish_rc == -1);
    return CTEST_PASS;
}

CTEST(bench_json, mismatched_close_is_reported)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_array(&d.json);
    bench_json_end_object(&d.json);
    doc_text(&d);
    free(d.buf);
    CTEST_CHECK(d.finish_rc == -1);
    return CTEST_PASS;
}

CTEST(bench_json, member_without_key_is_reported)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_object(&d.json);
    bench_json_int(&d.json, 1);
    bench_json_end_object(&d.json);
    doc_text(&d);
    free(d.buf);
    CTEST_CHECK(d.finish_rc == -1);
    return CTEST_PASS;
}

CTEST(bench_json, key_without_value_is_reported)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_object(&d.json);
    bench_json_key(&d.json, "dangling");
    bench_json_end_object(&d.json);
    doc_text(&d);
    free(d.buf);
    CTEST_CHECK(d.finish_rc == -1);
    return CTEST_PASS;
}

CTEST(bench_json, key_outside_an_object_is_reported)
{
    doc_t d;
    doc_open(&d);
    bench_json_begin_array(&d.json);
    bench_json_key(&d.json, "not here");
    bench_json_end_array(&d.json);
    doc_text(&d);
    free(d.buf);
    CTEST_CHECK(d.finish_rc == -1);
    return CTEST_PASS;
}
