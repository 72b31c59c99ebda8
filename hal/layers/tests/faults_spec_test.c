/* SPDX-License-Identifier: Apache-2.0 */
/* The HAL_FAULTS parser: every documented form is accepted with the documented meaning, and
 * malformed specs are rejected with a message that points at the offending token; the seeded
 * draw is a pure function; HAL_LAYERS parsing. */
#include <string.h>

#include "hal/layers/faults.h"
#include "hal/layers/layer.h"
#include "hal/layers/tests/layer_test_util.h"

static int parse_ok(const char *spec, hal_faults_spec_t *out)
{
    char msg[512];
    hal_status_t st = hal_faults_parse(spec, out, msg, sizeof(msg));
    if (st != HAL_OK) {
        fprintf(stderr, "'%s' rejected: %s\n", spec ? spec : "(null)", msg);
        return 0;
    }
    return 1;
}

CTEST(faults_spec, the_example_of_the_documentation)
{
    hal_faults_spec_t s;
    CTEST_CHECK(parse_ok("seed=42;alloc:p=0.01;device_lost:after=100,device=1;stream_fail:p=0.001;"
                         "coll_timeout:after=5,rank=1;peer_death:after=3,rank=2",
                         &s));
    CTEST_CHECK(s.seed == 42 && !s.log && s.nrules == 5);
    const hal_fault_rule_t *r = s.rules;
    CTEST_CHECK(r[0].kind == HAL_FAULT_ALLOC && !r[0].always && r[0].after == 0 &&
                r[0].count == HAL_FAULTS_UNLIMITED && r[0].device == -1 && r[0].rank == -1);
    /* 0.01 * 2^64, rounded down */
    CTEST_CHECK(r[0].threshold == UINT64_C(184467440737095516));
    CTEST_CHECK(r[1].kind == HAL_FAULT_DEVICE_LOST && r[1].always && r[1].after == 100 &&
                r[1].count == 1 && r[1].device == 1);
    CTEST_CHECK(r[2].kind == HAL_FAULT_STREAM_FAIL && r[2].count == HAL_FAULTS_UNLIMITED);
    CTEST_CHECK(r[3].kind == HAL_FAULT_COLL_TIMEOUT && r[3].after == 5 && r[3].rank == 1);
    CTEST_CHECK(r[4].kind == HAL_FAULT_PEER_DEATH && r[4].after == 3 && r[4].rank == 2);
    CTEST_CHECK(r[1].offset == 21); /* where "device_lost" starts */
    return CTEST_PASS;
}

CTEST(faults_spec, accepted_forms)
{
    hal_faults_spec_t s;
    CTEST_CHECK(parse_ok(NULL, &s) && s.nrules == 0);
    CTEST_CHECK(parse_ok("", &s) && s.nrules == 0);
    CTEST_CHECK(parse_ok(" ; ;", &s) && s.nrules == 0);
    CTEST_CHECK(parse_ok("alloc", &s) && s.nrules == 1 && s.rules[0].always &&
                s.rules[0].count == 1);
    CTEST_CHECK(parse_ok(" alloc : p = 1 , count = 3 ; log=1 ", &s));
    CTEST_CHECK(s.log && s.rules[0].always && s.rules[0].count == 3);
    CTEST_CHECK(parse_ok("alloc:p=0", &s) && !s.rules[0].always && s.rules[0].threshold == 0);
    CTEST_CHECK(parse_ok("alloc:p=1.000", &s) && s.rules[0].always);
    CTEST_CHECK(parse_ok("alloc:p=0.5", &s) && s.rules[0].threshold == UINT64_C(1) << 63);
    CTEST_CHECK(parse_ok("alloc:p=0.0000000000000000001", &s)); /* 19 digits */
    CTEST_CHECK(parse_ok("seed=18446744073709551615", &s) && s.seed == UINT64_MAX);
    CTEST_CHECK(parse_ok("stream_fail:after=0,device=65535", &s) && s.rules[0].device == 65535);
    CTEST_CHECK(parse_ok("peer_death:rank=4095;coll_timeout:device=3", &s));
    CTEST_CHECK(s.rules[0].rank == 4095 && s.rules[1].device == 3 && s.rules[1].rank == -1);
    char many[2048] = "";
    for (int i = 0; i < HAL_FAULTS_MAX_RULES; i++)
        strcat(many, "alloc;");
    CTEST_CHECK(parse_ok(many, &s) && s.nrules == HAL_FAULTS_MAX_RULES);
    return CTEST_PASS;
}

typedef struct bad_case {
    const char *spec;
    const char *token; /* must appear quoted in the message */
    const char *why;   /* and this */
} bad_case_t;

CTEST(faults_spec, malformed_specs_point_at_the_token)
{
    static const bad_case_t cases[] = {
        { "seed=42;device_lots:after=100", "'device_lots'", "unknown fault kind" },
        { "alloc:p=1.5", "'p=1.5'", "probability" },
        { "alloc:p=0.", "'p=0.'", "probability" },
        { "alloc:p=-0.1", "'p=-0.1'", "probability" },
        { "alloc:p=.5", "'p=.5'", "probability" },
        { "alloc:p=0.00000000000000000001", "'p=0.00000000000000000001'", "probability" },
        { "alloc:after=-1", "'after=-1'", "after" },
        { "alloc:after=18446744073709551615", "'after=18446744073709551615'", "after" },
        { "alloc:count=0", "'count=0'", "count" },
        { "alloc:device=65536", "'device=65536'", "device" },
        { "alloc:rank=1", "'rank=1'", "coll_timeout and peer_death" },
        { "peer_death:rank=4096", "'rank=4096'", "rank" },
        { "alloc:after=1,after=2", "'after=2'", "twice" },
        { "alloc:after", "'after'", "name=value" },
        { "alloc:,p=1", "''", "empty parameter" },
        { "alloc:p=1,", "''", "empty parameter" },
        { "alloc:speed=3", "'speed'", "unknown parameter" },
        { "seed=1;seed=2", "'seed=2'", "twice" },
        { "seed=x", "'seed=x'", "seed" },
        { "seed=18446744073709551616", "'seed=18446744073709551616'", "seed" },
        { "log=2", "'log=2'", "log" },
        { "color=red", "'color'", "unknown setting" },
        { ":p=1", "''", "unknown fault kind" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hal_faults_spec_t s;
        char msg[512];
        hal_status_t st = hal_faults_parse(cases[i].spec, &s, msg, sizeof(msg));
        if (st != HAL_ERROR_INVALID_ARGUMENT || !strstr(msg, cases[i].token) ||
            !strstr(msg, cases[i].why) || !strstr(msg, "HAL_FAULTS: at offset")) {
            fprintf(stderr, "'%s': %s: %s\n", cases[i].spec, hal_status_string(st), msg);
            return CTEST_FAIL;
        }
    }
    /* The offset is the token's. */
    hal_faults_spec_t s;
    char msg[512];
    CTEST_CHECK(hal_faults_parse("alloc; device_lost:devise=1", &s, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "at offset 19 ('devise')") != NULL);
    char many[2048] = "";
    for (int i = 0; i <= HAL_FAULTS_MAX_RULES; i++)
        strcat(many, "alloc;");
    CTEST_CHECK(hal_faults_parse(many, &s, msg, sizeof(msg)) == HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "more than 32 rules") != NULL);
    char *huge = malloc(HAL_FAULTS_MAX_SPEC + 2);
    CTEST_CHECK(huge != NULL);
    memset(huge, ' ', HAL_FAULTS_MAX_SPEC + 1);
    huge[HAL_FAULTS_MAX_SPEC + 1] = '\0';
    hal_status_t st = hal_faults_parse(huge, &s, msg, sizeof(msg));
    free(huge);
    CTEST_CHECK(st == HAL_ERROR_INVALID_ARGUMENT && strstr(msg, "longer than 4096"));
    return CTEST_PASS;
}

CTEST(faults_spec, draws_are_a_pure_function_of_seed_rule_key_and_call)
{
    hal_faults_spec_t a, b;
    CTEST_CHECK(parse_ok("seed=7;alloc:p=0.25;alloc:p=0.25", &a));
    CTEST_CHECK(parse_ok("seed=8;alloc:p=0.25;alloc:p=0.25", &b));
    unsigned fired = 0, same_as_other_seed = 0, same_as_other_rule = 0;
    for (uint64_t k = 1; k <= 4000; k++) {
        bool x = hal_faults_draw(&a, 0, 1, k);
        CTEST_CHECK(x == hal_faults_draw(&a, 0, 1, k)); /* repeatable */
        fired += x;
        same_as_other_seed += x == hal_faults_draw(&b, 0, 1, k);
        same_as_other_rule += x == hal_faults_draw(&a, 1, 1, k);
    }
    /* About a quarter fire; another seed or rule gives another pattern. */
    CTEST_CHECK(fired > 850 && fired < 1150);
    CTEST_CHECK(same_as_other_seed < 3600 && same_as_other_rule < 3600);
    /* after= holds calls back; p=1 always fires afterwards. */
    CTEST_CHECK(parse_ok("device_lost:after=3", &a));
    CTEST_CHECK(!hal_faults_draw(&a, 0, 0, 3) && hal_faults_draw(&a, 0, 0, 4));
    return CTEST_PASS;
}

CTEST(faults_spec, layers_variable)
{
    hal_layer_list_t l;
    CHECK_STATUS(hal_layers_parse(NULL, &l), HAL_OK);
    CTEST_CHECK(l.count == 0 && !hal_layers_keep_handles(&l));
    CHECK_STATUS(hal_layers_parse("trace, validation faults", &l), HAL_OK);
    CTEST_CHECK(l.count == 3 && l.layers[0] == &hal_trace_layer &&
                l.layers[1] == &hal_validation_layer && l.layers[2] == &hal_faults_layer);
    CTEST_CHECK(hal_layers_keep_handles(&l));
    CHECK_STATUS(hal_layers_parse("faults,trace", &l), HAL_OK);
    CTEST_CHECK(l.layers[0] == &hal_faults_layer && l.layers[1] == &hal_trace_layer);
    CTEST_CHECK(!hal_layers_keep_handles(&l));
    CHECK_STATUS(hal_layers_parse("validation,validation", &l), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("listed twice");
    CHECK_STATUS(hal_layers_parse("trace,faults,trace", &l), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("listed twice");
    CHECK_STATUS(hal_layers_parse("tracing", &l), HAL_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("unknown layer 'tracing'");
    char long_value[300];
    memset(long_value, 'a', sizeof(long_value) - 1);
    long_value[sizeof(long_value) - 1] = '\0';
    CHECK_STATUS(hal_layers_parse(long_value, &l), HAL_ERROR_INVALID_ARGUMENT);
    return CTEST_PASS;
}
