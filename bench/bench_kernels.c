/* SPDX-License-Identifier: Apache-2.0 */
/* Kernels of hal-bench part "launch" (bench_launch.c): a host shared object in the host calling
 * convention of hal/include/hal/hal_program.h. */
#include "hal/hal_program.h"

#define KERNEL __attribute__((visibility("default")))

/* No arguments, no work: what is left is the cost of the launch itself. */
KERNEL const char hal_signature_bench_empty[] = "";
KERNEL hal_status_t bench_empty(const hal_host_kernel_ctx_t *ctx, void *const *args)
{
    (void)ctx;
    (void)args;
    return HAL_OK;
}
