/* SPDX-License-Identifier: Apache-2.0 */
/* Element kernels of the host collective engine: reductions of every (dtype, op) pair, the
 * conversions of the narrow floating-point types, and bulk copies. Internal to the engine. */
#ifndef HAL_SRC_COMM_ENGINE_REDUCE_H
#define HAL_SRC_COMM_ENGINE_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_comm.h"

/* dst[i] = a[i] op b[i]; dst overlaps neither source. */
typedef void (*eng_reduce2_fn)(void *restrict dst, const void *restrict a, const void *restrict b,
                               size_t n);
/* dst[i] = dst[i] op src[i]; dst and src do not overlap. */
typedef void (*eng_accum_fn)(void *restrict dst, const void *restrict src, size_t n);
/* dst[i] = dst[i] / divisor (AVG's final step; integers truncate toward zero). */
typedef void (*eng_divide_fn)(void *dst, size_t n, int divisor);

typedef struct eng_reducer {
    eng_reduce2_fn reduce2;
    eng_accum_fn accum;
    eng_divide_fn divide; /* NULL unless the operation is AVG */
} eng_reducer_t;

/* Size in bytes of one element of dtype (0 for an unknown dtype).
 * Thread safety: safe (pure). */
size_t eng_dtype_size(hal_dtype_t dtype);

/* The kernels of (dtype, op), or NULL when the pair is unknown.
 * Thread safety: safe (returns a pointer into a constant table). */
const eng_reducer_t *eng_reducer(hal_dtype_t dtype, hal_redop_t op);

/* dst[0..n) = op over src[0..nsrc)[0..n) (n elements of esize bytes) in the order of src (a
 * fixed order gives bit-identical results wherever it runs); AVG then divides by nranks. dst
 * must not overlap any source; nsrc >= 1 (one source is a copy, divided for AVG).
 * Thread safety: safe on disjoint destinations. */
void eng_reduce_n(const eng_reducer_t *r, void *dst, const void *const *src, int nsrc, size_t n,
                  size_t esize, int nranks);

/* memcpy that bypasses the caches with non-temporal stores when `stream` is set and the CPU
 * has them (large transfers whose destination is not read again soon); followed by
 * eng_copy_fence before another rank may read the destination.
 * Thread safety: safe on disjoint destinations. */
void eng_copy(void *dst, const void *src, size_t bytes, bool stream);

/* Orders the non-temporal stores of eng_copy before later stores (a release for them).
 * Thread safety: safe. */
void eng_copy_fence(void);

/* Conversions between float and the narrow types, rounding to nearest even. fp8 e4m3 (no
 * infinities) saturates to +-448; e5m2 overflows to infinity as IEEE binary formats do.
 * Exposed for the tests. Thread safety: safe (pure). */
float eng_f16_to_f32(uint16_t h);
uint16_t eng_f32_to_f16(float f);
float eng_bf16_to_f32(uint16_t h);
uint16_t eng_f32_to_bf16(float f);
float eng_e4m3_to_f32(uint8_t v);
uint8_t eng_f32_to_e4m3(float f);
float eng_e5m2_to_f32(uint8_t v);
uint8_t eng_f32_to_e5m2(float f);

#endif /* HAL_SRC_COMM_ENGINE_REDUCE_H */
