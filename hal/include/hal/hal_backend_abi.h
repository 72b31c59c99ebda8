/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal backend ABI: what a backend library implements.
 *
 * A backend is a shared library exporting one symbol, HAL_BACKEND_ENTRY_SYMBOL, of type
 * hal_backend_entry_fn. It returns a static ops table (hal_backend_ops_t, generated from the slot
 * spec hal/abi/slots.toml). The table starts with struct_size and api_version and only ever grows
 * at the end. The loader rejects a table whose major version differs from its own, a table
 * shorter than the minor version it claims (HAL_BACKEND_OPS_SIZE_1_N), and a table that leaves a
 * required slot of that version NULL, naming the slot. An optional slot that is NULL, or beyond
 * struct_size, reads as HAL_ERROR_UNSUPPORTED (or selects the core's fallback); a device that
 * advertises a capability must have the slots the spec ties to it.
 *
 * The HAL core owns every handle the application sees and does all argument and handle
 * checking; backend slots receive their own objects (the void * they returned) and resolved
 * pointers, and may assume valid arguments. A slot that fails calls host->set_error() with a
 * message naming the native call, then returns the status; the core prefixes the backend and
 * HAL function names. Backends must not print to stdout, abort or exit. */
#ifndef HAL_BACKEND_ABI_H
#define HAL_BACKEND_ABI_H

/* clang-format off */
#include "hal/hal_backend_types.h"
#include "hal/hal_backend_ops.h" /* generated from hal/abi/slots.toml */
/* clang-format on */

#ifdef __cplusplus
extern "C" {
#endif

#define HAL_BACKEND_ENTRY_SYMBOL "hal_backend_get_ops"

/* The one symbol a backend exports.
 * [in]  host_api_version  HAL_API_VERSION of the loading core.
 * [out] ops               receives the backend's static table.
 * Returns HAL_OK, or HAL_ERROR_VERSION_MISMATCH if the backend cannot serve that version. */
typedef hal_status_t (*hal_backend_entry_fn)(uint32_t host_api_version,
                                             const hal_backend_ops_t **ops);

#if defined(__GNUC__)
#define HAL_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define HAL_BACKEND_EXPORT
#endif

/* Defines a backend's entry point: hands the loader `table` (a static hal_backend_ops_t) when
 * the loader speaks the same major version, HAL_ERROR_VERSION_MISMATCH otherwise. A backend that
 * needs more at that point writes the function itself. */
#define HAL_BACKEND_DEFINE_ENTRY(table)                                                \
    HAL_BACKEND_EXPORT hal_status_t hal_backend_get_ops(uint32_t host_api_version,     \
                                                        const hal_backend_ops_t **ops) \
    {                                                                                  \
        if (HAL_VERSION_MAJOR(host_api_version) != HAL_API_VERSION_MAJOR)              \
            return HAL_ERROR_VERSION_MISMATCH;                                         \
        *ops = &(table);                                                               \
        return HAL_OK;                                                                 \
    }

#ifdef __cplusplus
}
#endif

#endif /* HAL_BACKEND_ABI_H */
