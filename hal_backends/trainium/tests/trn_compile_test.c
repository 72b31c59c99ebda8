/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: StableHLO programs through the Neuron compiler's path (trn_compile.c). The
 * real neuronx-cc installs only with AWS's Neuron SDK, so a stand-in (neuronx_cc_standin.sh)
 * plays it: it records its command line and writes the module itself as the "NEFF", which the
 * libnrt emulator executes with XLA's CPU compiler. What is tested is the backend's side: AWS's
 * command line with NEURON_CC_FLAGS, target and LNC from the instance, the NEFF cache (hits,
 * two processes filling one entry), failures naming the compiler's log, and the program then
 * running. */
#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/trainium/tests/trn_test_util.h"

#define STANDIN "hal_backends/trainium/tests/neuronx_cc_standin.sh"

/* out = a + b * 2 over f32[256]; `tag` makes modules differ (a comment). */
static void module_text(char *out, size_t size, const char *tag)
{
    snprintf(out, size,
             "// %s\n"
             "module @m {\n"
             "  func.func public @main(%%arg0: tensor<256xf32>, %%arg1: tensor<256xf32>) -> "
             "(tensor<256xf32>) {\n"
             "    %%c = stablehlo.constant dense<2.0> : tensor<256xf32>\n"
             "    %%0 = stablehlo.multiply %%arg1, %%c : tensor<256xf32>\n"
             "    %%1 = stablehlo.add %%arg0, %%0 : tensor<256xf32>\n"
             "    return %%1 : tensor<256xf32>\n"
             "  }\n"
             "}\n",
             tag);
}

/* Sets the stand-in up: compiler, log and cache under TEST_TMPDIR/<name>. */
static void use_standin(const char *name, char *log, char *cache, size_t size)
{
    char dir[1024], cmd[2200];
    tt_tmp_path(dir, sizeof(dir), name);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not reset %s\n", dir);
    snprintf(log, size, "%s/commands.txt", dir);
    snprintf(cache, size, "%s/cache", dir);
    tt_setenv("NEURON_CC", STANDIN);
    tt_setenv("NEURONX_CC_STANDIN_LOG", log);
    tt_setenv("NEURON_COMPILE_CACHE_URL", cache);
    tt_setenv("NEURON_CC_FLAGS", NULL);
}

/* Lines in a file (0 if it is missing); the first into first. */
static int count_lines(const char *path, char *first, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (n == 0 && first)
            snprintf(first, size, "%.*s", (int)strcspn(line, "\n"), line);
        n++;
    }
    fclose(f);
    return n;
}

/* Entries MODULE_* under <cache>/neuronxcc-2.99.0.0+standin holding module.neff. */
static int count_entries(const char *cache)
{
    char dir[1200];
    snprintf(dir, sizeof(dir), "%s/neuronxcc-2.99.0.0+standin", cache);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char neff[1600];
        snprintf(neff, sizeof(neff), "%s/%s/module.neff", dir, e->d_name);
        if (strncmp(e->d_name, "MODULE_", 7) == 0 && strlen(e->d_name) == 7 + 64 &&
            access(neff, R_OK) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Runs the module's program once on device 0 of b and checks out = a + 2 b. */
static bool run_add(hal_backend_t b, hal_program_t p)
{
    hal_device_t dev = tt_device(b, 0);
    hal_kernel_t k = NULL;
    hal_stream_t s = NULL;
    float *x = NULL, *y = NULL, *out = NULL, host[3][256];
    bool ok = EXPECT_OK(hal_program_get_kernel(p, "main", &k)) &&
              EXPECT_OK(hal_stream_create(dev, 0, &s));
    for (int i = 0; i < 3 && ok; i++)
        ok = EXPECT_OK(hal_mem_alloc(dev, HAL_MEM_KIND_DEVICE, sizeof(host[0]), 0,
                                     (void **)(i == 0   ? &x
                                               : i == 1 ? &y
                                                        : &out)));
    if (!ok)
        return false;
    for (int i = 0; i < 256; i++) {
        host[0][i] = (float)i;
        host[1][i] = (float)(i % 7);
    }
    hal_tensor_desc_t t = { .dtype = HAL_DTYPE_F32, .rank = 1, .dims = { 256 } };
    hal_kernel_arg_t args[3] = { HAL_KERNEL_ARG_TENSOR_OF(x, &t), HAL_KERNEL_ARG_TENSOR_OF(y, &t),
                                 HAL_KERNEL_ARG_TENSOR_OF(out, &t) };
    hal_launch_config_t one = HAL_LAUNCH_CONFIG_INIT(1, 1, 1);
    ok = EXPECT_OK(hal_memcpy_async(x, host[0], sizeof(host[0]), s)) &&
         EXPECT_OK(hal_memcpy_async(y, host[1], sizeof(host[1]), s)) &&
         EXPECT_OK(hal_kernel_launch(s, k, &one, args, 3)) &&
         EXPECT_OK(hal_memcpy_async(host[2], out, sizeof(host[2]), s)) &&
         EXPECT_OK(hal_stream_synchronize(s));
    for (int i = 0; i < 256 && ok; i++)
        ok = CTEST_EXPECT(host[2][i] == (float)i + 2.0f * (float)(i % 7));
    hal_mem_free(x);
    hal_mem_free(y);
    hal_mem_free(out);
    hal_stream_destroy(s);
    return ok;
}

CTEST(TrnCompile, CommandLineCacheAndRun)
{
    TT_REQUIRE_EMULATOR();
    char log[1200], cache[1200], first[2048] = "", text[1024];
    tt_env_reset();
    use_standin("cmdline", log, cache, sizeof(log));
    tt_setenv("NEURON_CC_FLAGS", "--verbose=35  --enable-fast-loading-neuron-binaries");
    hal_backend_t b = NULL;
    if (!EXPECT_OK(tt_open(&b)))
        return CTEST_FAIL;
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    hal_device_t dev = tt_device(b, 0);
    EXPECT_OK(hal_device_get_properties(dev, &props));
    CTEST_EXPECT(props.program_formats & (1u << HAL_PROGRAM_FORMAT_STABLEHLO));
    module_text(text, sizeof(text), "cmdline");
    hal_program_t p = NULL, q = NULL;
    if (EXPECT_OK(hal_program_create(dev, HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), &p))) {
        CTEST_EXPECT(count_lines(log, first, sizeof(first)) == 1);
        CTEST_EXPECT(strcmp(first,
                            "compile module.mlir --framework XLA --target trn1 --lnc 1 -O2 "
                            "--model-type transformer --auto-cast=none --verbose=35 "
                            "--enable-fast-loading-neuron-binaries --output module.neff") == 0);
        CTEST_EXPECT(count_entries(cache) == 1);
        /* The same module again: a cache hit, no compiler run. */
        EXPECT_OK(hal_program_create(dev, HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), &q));
        CTEST_EXPECT(count_lines(log, NULL, 0) == 1);
        run_add(b, p);
        run_add(b, q);
    }
    /* Other flags are another entry. */
    tt_setenv("NEURON_CC_FLAGS", "--verbose=35");
    hal_program_t r = NULL;
    EXPECT_OK(hal_program_create(dev, HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), &r));
    CTEST_EXPECT(count_lines(log, NULL, 0) == 2);
    CTEST_EXPECT(count_entries(cache) == 2);
    hal_program_destroy(p);
    hal_program_destroy(q);
    hal_program_destroy(r);
    hal_backend_close(b);
    return CTEST_PASS; /* failed expectations were recorded */
}

CTEST(TrnCompile, Trn2TargetAndLnc)
{
    TT_REQUIRE_EMULATOR();
    char log[1200], cache[1200], first[2048] = "", text[1024];
    tt_env_reset();
    use_standin("trn2", log, cache, sizeof(log));
    tt_setenv("NEURON_EMU_INSTANCE", "trn2.48xlarge");
    hal_backend_t b = NULL;
    if (!EXPECT_OK(tt_open(&b)))
        return CTEST_FAIL;
    module_text(text, sizeof(text), "trn2");
    hal_program_t p = NULL;
    if (EXPECT_OK(hal_program_create(tt_device(b, 0), HAL_PROGRAM_FORMAT_STABLEHLO, text,
                                     strlen(text), &p))) {
        count_lines(log, first, sizeof(first));
        CTEST_EXPECT(strstr(first, "--target trn2 --lnc 2 ") != NULL);
        run_add(b, p);
        hal_program_destroy(p);
    }
    hal_backend_close(b);
    return CTEST_PASS; /* failed expectations were recorded */
}

CTEST(TrnCompile, RefusedModuleNamesTheLog)
{
    TT_REQUIRE_EMULATOR();
    char log[1200], cache[1200], text[1024];
    tt_env_reset();
    use_standin("refused", log, cache, sizeof(log));
    hal_backend_t b = NULL;
    if (!EXPECT_OK(tt_open(&b)))
        return CTEST_FAIL;
    module_text(text, sizeof(text), "standin: refuse");
    hal_program_t p = (hal_program_t)(uintptr_t)1;
    EXPECT_STATUS(
        hal_program_create(tt_device(b, 0), HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), &p),
        HAL_ERROR_INVALID_ARGUMENT);
    CTEST_EXPECT(p == (hal_program_t)(uintptr_t)1);
    const char *msg = hal_last_error_message();
    CTEST_EXPECT(strstr(msg, "neuronx-cc refused") != NULL);
    const char *at = strstr(msg, "its log: ");
    if (CTEST_EXPECT(at != NULL)) {
        char first[2048] = "";
        count_lines(at + strlen("its log: "), first, sizeof(first));
        CTEST_EXPECT(strstr(first, "the stand-in refuses this module") != NULL);
    }
    CTEST_EXPECT(count_entries(cache) == 0);
    /* A remote cache is refused with its name. */
    tt_setenv("NEURON_COMPILE_CACHE_URL", "s3://bucket/cache");
    module_text(text, sizeof(text), "remote");
    EXPECT_STATUS(
        hal_program_create(tt_device(b, 0), HAL_PROGRAM_FORMAT_STABLEHLO, text, strlen(text), &p),
        HAL_ERROR_INVALID_ARGUMENT);
    CTEST_EXPECT(strstr(hal_last_error_message(), "s3://bucket/cache") != NULL);
    hal_backend_close(b);
    return CTEST_PASS; /* failed expectations were recorded */
}

/* Two processes, each on its own NeuronCore, compile the same new module into one cache at
 * once: both succeed, one entry results. */
CTEST(TrnCompile, TwoProcessesFillOneEntry)
{
    TT_REQUIRE_EMULATOR();
    char log[1200], cache[1200], text[1024];
    tt_env_reset();
    use_standin("two", log, cache, sizeof(log));
    module_text(text, sizeof(text), "two processes");
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            tt_setenv("NEURON_RT_VISIBLE_CORES", i == 0 ? "0" : "1");
            hal_backend_t b = NULL;
            hal_program_t p = NULL;
            int rc = tt_open(&b) == HAL_OK &&
                             hal_program_create(tt_device(b, 0), HAL_PROGRAM_FORMAT_STABLEHLO, text,
                                                strlen(text), &p) == HAL_OK &&
                             run_add(b, p)
                         ? 0
                         : 1;
            if (rc)
                fprintf(stderr, "child %d: %s\n", i, hal_last_error_message());
            if (b)
                hal_backend_close(b);
            _exit(rc);
        }
    }
    for (int i = 0; i < 2; i++) {
        int status = 0;
        CTEST_EXPECT(pids[i] > 0 && waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
                     WEXITSTATUS(status) == 0);
    }
    CTEST_EXPECT(count_entries(cache) == 1);
    return CTEST_PASS; /* failed expectations were recorded */
}
