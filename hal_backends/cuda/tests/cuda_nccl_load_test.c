/* SPDX-License-Identifier: Apache-2.0 */
/* The backend's NCCL loader, with HAL_NCCL_LIBRARY unset, loads the libnccl.so.2 recorded at
 * build time (the one beside the nccl.h the backend was compiled against, e.g. the
 * nvidia-nccl-cu13 wheel's, which no loader path names), and that library is the version of
 * that nccl.h. Needs no GPU: loading NCCL and ncclGetVersion touch no device. Defined only where
 * the build recorded a library. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"
#include "tools/ctest/ctest.h"

CTEST(CudaNccl, LoadsTheBuildsLibrary)
{
    const char *recorded = HAL_CUDA_NCCL_BUILD_LIBRARY;
    char want[PATH_MAX];
    if (realpath(recorded, want) == NULL) {
        fprintf(stderr,
                "%s, recorded at build time, is gone: re-run the configuration "
                "(bazel sync --only=local_cuda)\n",
                recorded);
        return CTEST_FAIL;
    }
    unsetenv(CUDA_ENV_LIBNCCL);
    char msg[CUDA_MSG_MAX] = "";
    const cuda_nccl_t *nccl = cuda_nccl_load(msg, sizeof(msg));
    if (nccl == NULL)
        fprintf(stderr, "cuda_nccl_load: %s\n", msg);
    CTEST_CHECK(nccl != NULL);
    printf("loaded NCCL %d from %s (built against nccl.h %d)\n", nccl->version, nccl->path,
           NCCL_VERSION_CODE);
    char got[PATH_MAX];
    CTEST_CHECK(realpath(nccl->path, got) != NULL);
    CTEST_CHECK(strcmp(got, want) == 0);
    CTEST_CHECK(nccl->version == NCCL_VERSION_CODE);
    return CTEST_PASS;
}
