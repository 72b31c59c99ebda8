/* SPDX-License-Identifier: Apache-2.0 */
/* Opening the CUDA backend where it cannot work fails cleanly, with the status and a message
 * naming what is missing: no CUDA runtime at all and, when the toolkit's own libcudart is given
 * (CUDA_TEST_REAL_LIBCUDART, set by the test target), the real runtime on this machine: without
 * an NVIDIA GPU and driver it reports cudaErrorInsufficientDriver or cudaErrorNoDevice. On a
 * machine with a GPU that last test skips. */
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/tests/cuda_test_util.h"

CTEST(CudaNoDevice, MissingRuntime)
{
    char saved[4096] = "";
    const char *cur = getenv("HAL_CUDA_LIBCUDART");
    if (cur != NULL)
        snprintf(saved, sizeof(saved), "%s", cur);
    setenv("HAL_CUDA_LIBCUDART", "/nonexistent/libcudart.so.13", 1);
    hal_backend_t b = NULL;
    EXPECT_STATUS(hal_backend_open("cuda", &b), HAL_ERROR_NOT_FOUND);
    EXPECT_MESSAGE("cuda: hal_backend_open");
    EXPECT_MESSAGE("/nonexistent/libcudart.so.13");
    EXPECT_MESSAGE("HAL_CUDA_LIBCUDART");
    CTEST_EXPECT(b == NULL);
    if (saved[0] != '\0')
        setenv("HAL_CUDA_LIBCUDART", saved, 1);
    else
        unsetenv("HAL_CUDA_LIBCUDART");
    return CTEST_PASS;
}

CTEST(CudaNoDevice, RealRuntimeWithoutGpu)
{
    const char *real = getenv("CUDA_TEST_REAL_LIBCUDART");
    if (real == NULL || real[0] == '\0')
        CTEST_SKIP("CUDA_TEST_REAL_LIBCUDART is not set (no libcudart in the toolkit)");
    setenv("HAL_CUDA_LIBCUDART", real, 1);
    hal_backend_t b = NULL;
    hal_status_t st = hal_backend_open("cuda", &b);
    if (st == HAL_OK) {
        uint32_t n = 0;
        hal_device_count(b, &n);
        hal_backend_close(b);
        CTEST_SKIP("this machine has %u NVIDIA GPU(s): nothing to check here", n);
    }
    fprintf(stderr, "hal_backend_open(\"cuda\") with %s: %s: %s\n", real, hal_status_string(st),
            hal_last_error_message());
    CTEST_EXPECT(st == HAL_ERROR_NOT_FOUND || st == HAL_ERROR_DEVICE_LOST);
    EXPECT_MESSAGE("cudaGetDeviceCount returned cudaError");
    CTEST_EXPECT(strstr(hal_last_error_message(), "cudaErrorInsufficientDriver") != NULL ||
                 strstr(hal_last_error_message(), "cudaErrorNoDevice") != NULL);
    EXPECT_MESSAGE("no usable NVIDIA GPU");
    CTEST_EXPECT(b == NULL);
    /* The failure leaves nothing behind: the next attempt fails the same way. */
    EXPECT_STATUS(hal_backend_open("cuda", &b), st);
    CTEST_EXPECT(b == NULL);
    return CTEST_PASS;
}
