/* SPDX-License-Identifier: Apache-2.0 */
/* A custom kernel for the cpu backend (HAL_PROGRAM_FORMAT_HOST_ELF, the host calling convention
 * of hal/include/hal/hal_program.h): out[i] = alpha * x[i] + y[i] over n float32 elements, the
 * elements split into one contiguous chunk per block. Built by scaled_add.py with the system's
 * C compiler. */
#include <stdint.h>

#include "hal/hal_program.h"

#define KERNEL __attribute__((visibility("default")))

/* x, y, out: pointers; n: 8 bytes; alpha: 8 bytes (double). */
KERNEL const char hal_signature_scaled_add[] = "ppp88";

KERNEL hal_status_t scaled_add(const hal_host_kernel_ctx_t *ctx, void *const *args)
{
    const float *x = *(const float *const *)args[0];
    const float *y = *(const float *const *)args[1];
    float *out = *(float *const *)args[2];
    uint64_t n = *(const uint64_t *)args[3];
    float alpha = (float)*(const double *)args[4]; /* as torch computes float32 * alpha */
    uint64_t blocks = (uint64_t)ctx->grid[0] * ctx->grid[1] * ctx->grid[2];
    uint64_t block = ctx->block_index[0] +
                     (uint64_t)ctx->grid[0] *
                         (ctx->block_index[1] + (uint64_t)ctx->grid[1] * ctx->block_index[2]);
    uint64_t chunk = (n + blocks - 1) / blocks;
    uint64_t begin = block * chunk, end = begin + chunk < n ? begin + chunk : n;
    for (uint64_t i = begin; i < end; i++)
        out[i] = alpha * x[i] + y[i];
    return HAL_OK;
}
