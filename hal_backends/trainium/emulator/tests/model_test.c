/* SPDX-License-Identifier: Apache-2.0 */
/* Models and tensor sets on the emulator's program container (a test double for NEFF): load
 * and its refusals, tensor info, binding by name, size checks, ops, stale handles, and what
 * nrt_close leaves. Emulator-only: a real runtime executes NEFF instead. */
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

static nrt_api_t api;

static const char program[] = "NRT-EMU-PROGRAM 1\n"
                              "# out = a + b; copy = a\n"
                              "input a 16\n"
                              "input b 16\n"
                              "output out 16\n"
                              "output copy 16\n"
                              "op add_f32 out a b\n"
                              "op copy copy a\n";

/* Opens and initialises the emulator on core 0; another libnrt skips the test. */
#define OPEN_EMULATOR()                                                                     \
    do {                                                                                    \
        CTEST_CHECK(nrt_test_open(&api));                                                   \
        if (!nrt_test_is_emulator(&api)) {                                                  \
            nrt_test_close(&api);                                                           \
            CTEST_SKIP("the program container is the emulator's; a real libnrt runs NEFF"); \
        }                                                                                   \
        setenv("NEURON_RT_VISIBLE_CORES", "0", 1);                                          \
        CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);                                    \
    } while (0)

static nrt_model_t *load_text(const char *text, NRT_STATUS *rc)
{
    nrt_model_t *m = NULL;
    *rc = api.load(text, strlen(text), 0, -1, &m);
    return m;
}

CTEST(nrt_model, load_refuses_what_is_not_the_container)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_test_stderr_begin();
    CTEST_CHECK(load_text("NEFF binary", &rc) == NULL);
    const char *log = nrt_test_stderr_end();
    CTEST_CHECK(rc == NRT_UNSUPPORTED_NEFF_VERSION);
    CTEST_CHECK(strstr(log, "does not execute NEFF") != NULL);
    static const char *const bad[] = {
        "NRT-EMU-PROGRAM 1\n",                                          /* no tensors */
        "NRT-EMU-PROGRAM 1\ninput a\n",                                 /* no size */
        "NRT-EMU-PROGRAM 1\ninput a 8\ninput a 8\n",                    /* a name twice */
        "NRT-EMU-PROGRAM 1\ninput a 8\nop copy a a\n",                  /* writes an input */
        "NRT-EMU-PROGRAM 1\ninput a 8\noutput o 4\nop copy o a\n",      /* sizes differ */
        "NRT-EMU-PROGRAM 1\ninput a 6\noutput o 6\nop add_f32 o a a\n", /* not whole floats */
        "NRT-EMU-PROGRAM 1\ninput a 8\nop fail 0\n",                    /* fail needs a status */
        "NRT-EMU-PROGRAM 1\nbogus\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CTEST_CHECK(load_text(bad[i], &rc) == NULL);
        CTEST_CHECK(rc == NRT_INVALID);
    }
    nrt_model_t *m = NULL;
    CTEST_CHECK(api.load(program, sizeof(program) - 1, 5, -1, &m) == NRT_INVALID); /* no core 5 */
    CTEST_CHECK(api.load(NULL, 8, 0, -1, &m) == NRT_INVALID);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_model, tensor_info_lists_the_declarations)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(program, &rc);
    CTEST_CHECK(rc == NRT_SUCCESS && m != NULL);
    nrt_tensor_info_array_t *info = NULL;
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_SUCCESS);
    CTEST_CHECK(info->tensor_count == 4);
    CTEST_CHECK(strcmp(info->tensor_array[0].name, "a") == 0);
    CTEST_CHECK(info->tensor_array[0].usage == NRT_TENSOR_USAGE_INPUT);
    CTEST_CHECK(strcmp(info->tensor_array[3].name, "copy") == 0);
    CTEST_CHECK(info->tensor_array[3].usage == NRT_TENSOR_USAGE_OUTPUT);
    CTEST_CHECK(info->tensor_array[3].size == 16);
    CTEST_CHECK(api.free_model_tensor_info(info) == NRT_SUCCESS);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    CTEST_CHECK(api.unload(m) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.get_model_tensor_info(m, &info) == NRT_INVALID_HANDLE);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_model, execute_binds_by_name_and_runs_the_ops)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text(program, &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_t *whole = NULL, *t[4] = { NULL };
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "whole", &whole) ==
                NRT_SUCCESS);
    static const char *const names[4] = { "a", "b", "out", "copy" };
    for (int i = 0; i < 4; i++) /* slices of one allocation, as the backend binds them */
        CTEST_CHECK(api.tensor_allocate_slice(whole, 16u * (unsigned)i, 16, names[i], &t[i]) ==
                    NRT_SUCCESS);
    float a[4] = { 1, 2, 3, 4 }, b[4] = { 10, 20, 30, 40 }, out[4], copy[4];
    CTEST_CHECK(api.tensor_write(t[0], a, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(t[1], b, 0, 16) == NRT_SUCCESS);
    nrt_tensor_set_t *in = NULL, *outs = NULL;
    CTEST_CHECK(api.allocate_tensor_set(&in) == NRT_SUCCESS);
    CTEST_CHECK(api.allocate_tensor_set(&outs) == NRT_SUCCESS);
    CTEST_CHECK(api.add_tensor_to_tensor_set(in, "a", t[1]) == NRT_SUCCESS);
    CTEST_CHECK(api.add_tensor_to_tensor_set(in, "a", t[0]) == NRT_SUCCESS); /* replaces */
    CTEST_CHECK(api.add_tensor_to_tensor_set(in, "b", t[1]) == NRT_SUCCESS);
    CTEST_CHECK(api.add_tensor_to_tensor_set(outs, "out", t[2]) == NRT_SUCCESS);
    CTEST_CHECK(api.execute(m, in, outs) == NRT_INVALID); /* "copy" is missing */
    CTEST_CHECK(api.add_tensor_to_tensor_set(outs, "copy", whole) == NRT_SUCCESS);
    CTEST_CHECK(api.execute(m, in, outs) == NRT_INVALID); /* 64 bytes where 16 are declared */
    CTEST_CHECK(api.add_tensor_to_tensor_set(outs, "copy", t[3]) == NRT_SUCCESS);
    CTEST_CHECK(api.execute(m, in, outs) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t[2], out, 0, 16) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t[3], copy, 0, 16) == NRT_SUCCESS);
    for (int i = 0; i < 4; i++)
        CTEST_CHECK(out[i] == a[i] + b[i] && copy[i] == a[i]);
    CTEST_CHECK(api.execute(m, outs, NULL) == NRT_INVALID_HANDLE);
    nrt_tensor_set_t *stale = in;
    api.destroy_tensor_set(&in);
    CTEST_CHECK(in == NULL);
    CTEST_CHECK(api.execute(m, stale, outs) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.add_tensor_to_tensor_set(stale, "a", t[0]) == NRT_INVALID_HANDLE);
    api.destroy_tensor_set(&outs);
    for (int i = 0; i < 4; i++)
        api.tensor_free(&t[i]);
    api.tensor_free(&whole);
    CTEST_CHECK(api.unload(m) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_model, fail_op_returns_its_status_and_close_drops_models)
{
    OPEN_EMULATOR();
    NRT_STATUS rc;
    nrt_model_t *m = load_text("NRT-EMU-PROGRAM 1\noutput o 4\nop fail 1004\n", &rc);
    CTEST_CHECK(m != NULL);
    nrt_tensor_t *o = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4, "o", &o) == NRT_SUCCESS);
    nrt_tensor_set_t *in = NULL, *out = NULL;
    CTEST_CHECK(api.allocate_tensor_set(&in) == NRT_SUCCESS);
    CTEST_CHECK(api.allocate_tensor_set(&out) == NRT_SUCCESS);
    CTEST_CHECK(api.add_tensor_to_tensor_set(out, "o", o) == NRT_SUCCESS);
    CTEST_CHECK(api.execute(m, in, out) == NRT_EXEC_COMPLETED_WITH_ERR);
    /* Left loaded: nrt_close frees the model and the sets, and a new runtime starts empty. */
    api.close();
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.unload(m) == NRT_INVALID_HANDLE);
    nrt_test_close(&api);
    return CTEST_PASS;
}
