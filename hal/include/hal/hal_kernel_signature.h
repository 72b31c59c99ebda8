/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal backend SDK, since 1.2: the kernel signature strings of hal_program.h
 * ("hal_signature_<kernel>": 'p' a pointer, '1' '2' '4' '8' or 'x' a scalar of that many bytes),
 * parsed the same way by every backend whose image format carries them. Header-only: backends do
 * not link the core. */
#ifndef HAL_KERNEL_SIGNATURE_H
#define HAL_KERNEL_SIGNATURE_H

#include <stdint.h>

#include "hal/hal_program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a NUL-terminated signature into info->nargs and info->args.
 * [in]  sig   the signature.
 * [out] info  nargs and args[0..nargs) are written on success.
 * [out] bad   on failure, the index of the offending character (HAL_KERNEL_ARGS_MAX when the
 *             signature is too long).
 * Returns: HAL_OK; HAL_ERROR_INVALID_ARGUMENT (an unknown letter, more than HAL_KERNEL_ARGS_MAX
 * arguments). Pure; thread safe. */
static inline hal_status_t hal_kernel_signature_parse(const char *sig, hal_kernel_info_t *info,
                                                      uint32_t *bad)
{
    uint32_t n = 0;
    for (const char *c = sig; *c; c++, n++) {
        if (n == HAL_KERNEL_ARGS_MAX) {
            *bad = n;
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        uint32_t size = *c == 'x' ? 16u : (*c >= '1' && *c <= '8') ? (uint32_t)(*c - '0') : 0u;
        if (*c == 'p') {
            info->args[n].kind = HAL_KERNEL_ARG_POINTER;
            info->args[n].size = 0;
        } else if (size == 1 || size == 2 || size == 4 || size == 8 || size == 16) {
            info->args[n].kind = HAL_KERNEL_ARG_SCALAR;
            info->args[n].size = size;
        } else {
            *bad = n;
            return HAL_ERROR_INVALID_ARGUMENT;
        }
    }
    info->nargs = n;
    return HAL_OK;
}

/* What a malformed signature's message says after "hal_signature_<kernel> ". */
#define HAL_KERNEL_SIGNATURE_HELP \
    "use 'p' for a pointer, '1', '2', '4', '8' or 'x' for a scalar of that many bytes"

#ifdef __cplusplus
}
#endif

#endif /* HAL_KERNEL_SIGNATURE_H */
