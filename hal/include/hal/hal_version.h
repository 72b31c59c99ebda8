/* SPDX-License-Identifier: Apache-2.0 */
/* torch-hal public API: version numbers and the export marker. */
#ifndef HAL_VERSION_H
#define HAL_VERSION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A version packs a 16-bit major and a 16-bit minor number. Minor versions only append
 * (functions, ops-table slots, struct fields); a major version change breaks the ABI. */
#define HAL_MAKE_VERSION(major, minor) ((uint32_t)(((uint32_t)(major) << 16) | ((minor)&0xffffu)))
#define HAL_VERSION_MAJOR(version)     ((uint32_t)(version) >> 16)
#define HAL_VERSION_MINOR(version)     ((uint32_t)(version)&0xffffu)

#define HAL_API_VERSION_MAJOR 1
#define HAL_API_VERSION_MINOR 3
#define HAL_API_VERSION       HAL_MAKE_VERSION(HAL_API_VERSION_MAJOR, HAL_API_VERSION_MINOR)

/* Marks the functions of the public API: the only symbols libhal.so.1 exports (it is built with
 * -fvisibility=hidden and the version script hal/libhal.map). */
#if defined(__GNUC__)
#define HAL_API __attribute__((visibility("default")))
#else
#define HAL_API
#endif

#ifdef __cplusplus
}
#endif

#endif /* HAL_VERSION_H */
