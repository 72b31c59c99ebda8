/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: programs. The libnrt emulator loads its own program container (a test
 * double for NEFF), so this tests the backend's plumbing around nrt_load and nrt_execute:
 * tensor info as the kernel's signature, slices of HAL allocations bound into tensor sets,
 * stream order, errors latching, destroy with launches pending, and the refusal of a real NEFF. */
#include "hal_backends/trainium/tests/trn_test_util.h"

enum { N = 1024, BYTES = N * 4 };

/* out = a + b over 1024 floats. */
static const char add_program[] = "NRT-EMU-PROGRAM 1\n"
                                  "input a 4096\n"
                                  "input b 4096\n"
                                  "output out 4096\n"
                                  "op add_f32 out a b\n";

typedef struct fixture {
    hal_backend_t b;
    hal_device_t dev;
    hal_stream_t s;
    float *a, *b_, *out; /* out lies 4096 bytes into its allocation: a slice at an offset */
    float *out_base;
} fixture_t;

static bool fx_open(fixture_t *fx)
{
    memset(fx, 0, sizeof(*fx));
    tt_env_reset();
    if (!EXPECT_OK(tt_open(&fx->b)))
        return false;
    fx->dev = tt_device(fx->b, 0);
    return fx->dev && EXPECT_OK(hal_stream_create(fx->dev, 0, &fx->s)) &&
           EXPECT_OK(hal_mem_alloc(fx->dev, HAL_MEM_KIND_DEVICE, BYTES, 0, (void **)&fx->a)) &&
           EXPECT_OK(hal_mem_alloc(fx->dev, HAL_MEM_KIND_DEVICE, BYTES, 0, (void **)&fx->b_)) &&
           EXPECT_OK(
               hal_mem_alloc(fx->dev, HAL_MEM_KIND_DEVICE, 2 * BYTES, 0, (void **)&fx->out_base)) &&
           (fx->out = fx->out_base + N, true);
}

static void fx_close(fixture_t *fx)
{
    if (fx->b)
        hal_backend_close(fx->b); /* frees what is left */
}

static hal_status_t load(fixture_t *fx, const char *text, hal_program_t *p, hal_kernel_t *k)
{
    hal_status_t st = hal_program_create(fx->dev, HAL_PROGRAM_FORMAT_NEFF, text, strlen(text), p);
    if (st == HAL_OK && k)
        st = hal_program_get_kernel(*p, "main", k);
    return st;
}

/* Fills a with i and b with 100 * i, on the stream. */
static void fill_inputs(fixture_t *fx)
{
    static float ha[N], hb[N];
    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = 100.0f * (float)i;
    }
    EXPECT_OK(hal_memcpy_async(fx->a, ha, BYTES, fx->s));
    EXPECT_OK(hal_memcpy_async(fx->b_, hb, BYTES, fx->s));
    EXPECT_OK(hal_stream_synchronize(fx->s));
}

static int count_wrong(const float *host, float scale)
{
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += host[i] != scale * (float)i;
    return wrong;
}

/* NEFF always; StableHLO with a Neuron compiler or on the emulator (which executes it). */
CTEST(TrnProgram, DeviceLoadsNeffAndStablehlo)
{
    fixture_t fx;
    if (fx_open(&fx)) {
        hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
        EXPECT_OK(hal_device_get_properties(fx.dev, &props));
        CTEST_EXPECT(props.capabilities & HAL_DEVICE_CAP_PROGRAMS);
        uint32_t neff = 1u << HAL_PROGRAM_FORMAT_NEFF, shlo = 1u << HAL_PROGRAM_FORMAT_STABLEHLO;
        CTEST_EXPECT((props.program_formats & neff) && !(props.program_formats & ~(neff | shlo)));
        if (tt_on_emulator())
            CTEST_EXPECT(props.program_formats & shlo);
        hal_program_t p = NULL;
        EXPECT_STATUS(hal_program_create(fx.dev, HAL_PROGRAM_FORMAT_HOST_ELF, "x", 1, &p),
                      HAL_ERROR_UNSUPPORTED);
        CTEST_EXPECT(p == NULL);
    }
    fx_close(&fx);
    return CTEST_PASS;
}

/* A real NEFF (or anything that is not the container) gets the emulator's own explanation. */
CTEST(TrnProgram, EmulatorRefusesRealNeff)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    if (fx_open(&fx)) {
        static const char neff[] = "NEFF\x01\x00\x00\x00 compiled by neuronx-cc";
        hal_program_t p = NULL;
        EXPECT_STATUS(hal_program_create(fx.dev, HAL_PROGRAM_FORMAT_NEFF, neff, sizeof(neff), &p),
                      HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("nrt_load");
        EXPECT_MESSAGE("does not execute NEFF");
        EXPECT_STATUS(load(&fx, "NRT-EMU-PROGRAM 1\ninput a 8\nop bogus a\n", &p, NULL),
                      HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("NRT_INVALID"); /* the detail is in the runtime's log */
        CTEST_EXPECT(p == NULL);
    }
    fx_close(&fx);
    return CTEST_PASS;
}

/* The kernel "main" takes the model's tensors in order; a launch runs the model on slices of
 * the allocations, in stream order. */
CTEST(TrnProgram, LaunchExecutesInStreamOrder)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    hal_program_t p = NULL;
    hal_kernel_t k = NULL;
    if (fx_open(&fx) && EXPECT_OK(load(&fx, add_program, &p, &k))) {
        hal_kernel_info_t info = HAL_KERNEL_INFO_INIT;
        EXPECT_OK(hal_kernel_get_info(k, &info));
        CTEST_EXPECT(info.nargs == 3);
        for (uint32_t i = 0; i < info.nargs && i < 3; i++)
            CTEST_EXPECT(info.args[i].kind == HAL_KERNEL_ARG_POINTER);
        fill_inputs(&fx);
        hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
        hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(fx.a, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.b_, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.out, BYTES) };
        EXPECT_OK(hal_kernel_launch(fx.s, k, &one, args, 3));
        /* a = out, then out = a + b again: 201 * i, only if the copy and both launches keep
         * their order. */
        EXPECT_OK(hal_memcpy_async(fx.a, fx.out, BYTES, fx.s));
        EXPECT_OK(hal_kernel_launch(fx.s, k, &one, args, 3));
        static float host[N];
        EXPECT_OK(hal_memcpy_async(host, fx.out, BYTES, fx.s));
        EXPECT_OK(hal_stream_synchronize(fx.s));
        CTEST_EXPECT(count_wrong(host, 201.0f) == 0);
        EXPECT_OK(hal_program_destroy(p));
    }
    fx_close(&fx);
    return CTEST_PASS;
}

CTEST(TrnProgram, BadLaunchesAreRefused)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    hal_program_t p = NULL;
    hal_kernel_t k = NULL;
    void *pinned = NULL, *small = NULL;
    if (fx_open(&fx) && EXPECT_OK(load(&fx, add_program, &p, &k))) {
        hal_kernel_t other = NULL;
        EXPECT_STATUS(hal_program_get_kernel(p, "add", &other), HAL_ERROR_NOT_FOUND);
        EXPECT_MESSAGE("one kernel, \"main\"");
        EXPECT_OK(hal_mem_alloc(fx.dev, HAL_MEM_KIND_HOST_PINNED, BYTES, 0, &pinned));
        EXPECT_OK(hal_mem_alloc(fx.dev, HAL_MEM_KIND_DEVICE, BYTES / 2, 0, &small));
        hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1),
                            two = HAL_LAUNCH_CONFIG_INIT(2, 1, 1);
        hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(fx.a, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.b_, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.out, BYTES) };
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &two, args, 3), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("(1, 1, 1)");
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 2), HAL_ERROR_INVALID_ARGUMENT);
        args[1] = HAL_KERNEL_ARG_PTR(pinned, BYTES);
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 3), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("must be device memory");
        args[1] = HAL_KERNEL_ARG_PTR(small, 0);
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 3), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_MESSAGE("needs 4096 bytes");
        args[1] = HAL_KERNEL_ARG_PTR(NULL, 0);
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 3), HAL_ERROR_INVALID_ARGUMENT);
        EXPECT_OK(hal_stream_synchronize(fx.s)); /* nothing was enqueued, nothing failed */
        EXPECT_OK(hal_program_destroy(p));
    }
    fx_close(&fx);
    return CTEST_PASS;
}

/* nrt_execute failing latches on the stream with the runtime's status named. */
CTEST(TrnProgram, ExecuteFailureLatches)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    hal_program_t p = NULL;
    hal_kernel_t k = NULL;
    static const char failing[] = "NRT-EMU-PROGRAM 1\n"
                                  "input a 4096\n"
                                  "output out 4096\n"
                                  "op fail 1002\n";
    if (fx_open(&fx) && EXPECT_OK(load(&fx, failing, &p, &k))) {
        hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
        hal_kernel_arg_t args[2] = { HAL_KERNEL_ARG_PTR(fx.a, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.out, BYTES) };
        EXPECT_OK(hal_kernel_launch(fx.s, k, &one, args, 2));
        EXPECT_STATUS(hal_stream_synchronize(fx.s), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_MESSAGE("nrt_execute");
        EXPECT_MESSAGE("NRT_EXEC_BAD_INPUT");
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 2), HAL_ERROR_BACKEND_SPECIFIC);
        EXPECT_OK(hal_program_destroy(p));
    }
    fx_close(&fx);
    return CTEST_PASS;
}

/* Launches queued behind a gate still run after their program was destroyed. */
CTEST(TrnProgram, DestroyWithPendingLaunches)
{
    TT_REQUIRE_EMULATOR();
    fixture_t fx;
    hal_program_t p = NULL;
    hal_kernel_t k = NULL;
    tt_gate_t gate;
    tt_gate_init(&gate);
    if (fx_open(&fx) && EXPECT_OK(load(&fx, add_program, &p, &k))) {
        fill_inputs(&fx);
        EXPECT_OK(hal_stream_add_callback(fx.s, tt_gate_cb, &gate));
        hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
        hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_PTR(fx.a, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.b_, BYTES),
                                     HAL_KERNEL_ARG_PTR(fx.out, BYTES) };
        EXPECT_OK(hal_kernel_launch(fx.s, k, &one, args, 3));
        EXPECT_OK(hal_program_destroy(p));
        EXPECT_STATUS(hal_kernel_launch(fx.s, k, &one, args, 3), HAL_ERROR_INVALID_HANDLE);
        tt_gate_open(&gate);
        static float host[N];
        EXPECT_OK(hal_memcpy_async(host, fx.out, BYTES, fx.s));
        EXPECT_OK(hal_stream_synchronize(fx.s));
        CTEST_EXPECT(count_wrong(host, 101.0f) == 0);
    } else {
        tt_gate_open(&gate);
    }
    fx_close(&fx);
    tt_gate_destroy(&gate);
    return CTEST_PASS;
}
