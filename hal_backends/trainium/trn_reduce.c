/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: reductions on the host, for the native collectives' cases the runtime does
 * not reduce itself (the product, 64-bit types, AVG's division; see trn_comm_ops.c). They follow
 * the HAL's definitions exactly as its host engine does, so both paths give the same bits:
 * integers add and multiply in their unsigned type (wrapping); f16 and bf16 are widened to float,
 * combined and rounded back to nearest even at each step; AVG divides the sum by the rank count
 * (integers in 64 bits, truncating toward zero; floats in their own type, f16 and bf16 in
 * float). fp8 never gets here: the trainium backend has no fp8 collectives. */
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

size_t trn_dtype_size(hal_dtype_t dtype)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
    case HAL_DTYPE_U8:
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2:
    case HAL_DTYPE_BOOL: /* program tensors only */
        return 1;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
    case HAL_DTYPE_I16: /* program tensors only */
    case HAL_DTYPE_U16:
        return 2;
    case HAL_DTYPE_I32:
    case HAL_DTYPE_U32:
    case HAL_DTYPE_F32:
        return 4;
    case HAL_DTYPE_I64:
    case HAL_DTYPE_U64:
    case HAL_DTYPE_F64:
        return 8;
    default:
        return 0;
    }
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static float f16_load(uint16_t h)
{
    /* Scaling the exponent and mantissa bits by 2^112 rebiases normal and subnormal values
     * alike; infinities and NaNs get the top exponent. */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t u = f2u(u2f(em << 13) * 0x1p112f);
    if (em >= 0x7c00u)
        u |= 0x7f800000u;
    return u2f(u | sign);
}

static uint16_t f16_store(float x)
{
    uint32_t f = f2u(x), sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= (127u + 16) << 23) {
        o = f > 255u << 23 ? 0x7e00u : 0x7c00u;
    } else if (f < 113u << 23) {
        o = (uint16_t)(f2u(u2f(f) + 0.5f) - f2u(0.5f));
    } else {
        uint32_t odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static float bf16_load(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

static uint16_t bf16_store(float x)
{
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* dst op= src for a native type T (integers combined in their unsigned type U). */
#define TRN_ACC_NATIVE(T, U)                  \
    do {                                      \
        T *d = dst;                           \
        const T *s = src;                     \
        for (size_t i = 0; i < n; i++) {      \
            T x = d[i], y = s[i];             \
            switch (op) {                     \
            case HAL_REDOP_PROD:              \
                d[i] = (T)((U)x * (U)y);      \
                break;                        \
            case HAL_REDOP_MAX:               \
                d[i] = x > y ? x : y;         \
                break;                        \
            case HAL_REDOP_MIN:               \
                d[i] = x < y ? x : y;         \
                break;                        \
            default: /* SUM, and AVG's sum */ \
                d[i] = (T)((U)x + (U)y);      \
                break;                        \
            }                                 \
        }                                     \
    } while (0)

/* dst op= src for f16 / bf16: widened, combined, rounded back; max and min keep the winner. */
#define TRN_ACC_NARROW(LOAD, STORE)               \
    do {                                          \
        uint16_t *d = dst;                        \
        const uint16_t *s = src;                  \
        for (size_t i = 0; i < n; i++) {          \
            float x = LOAD(d[i]), y = LOAD(s[i]); \
            switch (op) {                         \
            case HAL_REDOP_PROD:                  \
                d[i] = STORE(x * y);              \
                break;                            \
            case HAL_REDOP_MAX:                   \
                d[i] = x > y ? d[i] : s[i];       \
                break;                            \
            case HAL_REDOP_MIN:                   \
                d[i] = x < y ? d[i] : s[i];       \
                break;                            \
            default:                              \
                d[i] = STORE(x + y);              \
                break;                            \
            }                                     \
        }                                         \
    } while (0)

static void accumulate(hal_dtype_t dtype, hal_redop_t op, void *dst, const void *src, size_t n)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
        TRN_ACC_NATIVE(int8_t, uint8_t);
        break;
    case HAL_DTYPE_U8:
        TRN_ACC_NATIVE(uint8_t, uint8_t);
        break;
    case HAL_DTYPE_I32:
        TRN_ACC_NATIVE(int32_t, uint32_t);
        break;
    case HAL_DTYPE_U32:
        TRN_ACC_NATIVE(uint32_t, uint32_t);
        break;
    case HAL_DTYPE_I64:
        TRN_ACC_NATIVE(int64_t, uint64_t);
        break;
    case HAL_DTYPE_U64:
        TRN_ACC_NATIVE(uint64_t, uint64_t);
        break;
    case HAL_DTYPE_F32:
        TRN_ACC_NATIVE(float, float);
        break;
    case HAL_DTYPE_F64:
        TRN_ACC_NATIVE(double, double);
        break;
    case HAL_DTYPE_F16:
        TRN_ACC_NARROW(f16_load, f16_store);
        break;
    case HAL_DTYPE_BF16:
        TRN_ACC_NARROW(bf16_load, bf16_store);
        break;
    default:
        break;
    }
}

#define TRN_DIV_INT(T, W)                     \
    do {                                      \
        T *d = buf;                           \
        for (size_t i = 0; i < n; i++)        \
            d[i] = (T)((W)d[i] / (W)divisor); \
    } while (0)

#define TRN_DIV_FLOAT(T, LOAD, STORE)           \
    do {                                        \
        T *d = buf;                             \
        for (size_t i = 0; i < n; i++)          \
            d[i] = STORE(LOAD(d[i]) / divisor); \
    } while (0)

#define TRN_SAME(x) (x)

void trn_divide(hal_dtype_t dtype, void *buf, size_t n, int divisor)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
        TRN_DIV_INT(int8_t, int64_t);
        break;
    case HAL_DTYPE_U8:
        TRN_DIV_INT(uint8_t, uint64_t);
        break;
    case HAL_DTYPE_I32:
        TRN_DIV_INT(int32_t, int64_t);
        break;
    case HAL_DTYPE_U32:
        TRN_DIV_INT(uint32_t, uint64_t);
        break;
    case HAL_DTYPE_I64:
        TRN_DIV_INT(int64_t, int64_t);
        break;
    case HAL_DTYPE_U64:
        TRN_DIV_INT(uint64_t, uint64_t);
        break;
    case HAL_DTYPE_F32:
        TRN_DIV_FLOAT(float, TRN_SAME, TRN_SAME);
        break;
    case HAL_DTYPE_F64:
        TRN_DIV_FLOAT(double, TRN_SAME, TRN_SAME);
        break;
    case HAL_DTYPE_F16:
        TRN_DIV_FLOAT(uint16_t, f16_load, f16_store);
        break;
    case HAL_DTYPE_BF16:
        TRN_DIV_FLOAT(uint16_t, bf16_load, bf16_store);
        break;
    default:
        break;
    }
}

void trn_reduce(hal_dtype_t dtype, hal_redop_t op, void *dst, const void *const *srcs, int nsrc,
                size_t count, int nranks)
{
    if (dst != srcs[0])
        memcpy(dst, srcs[0], count * trn_dtype_size(dtype));
    for (int i = 1; i < nsrc; i++)
        accumulate(dtype, op, dst, srcs[i], count);
    if (op == HAL_REDOP_AVG && nranks > 1)
        trn_divide(dtype, dst, count, nranks);
}
