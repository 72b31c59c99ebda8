/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator, out-of-NEFF collectives (emu_cc_internal.h has the overview): element sizes,
 * f16/bf16 conversions and the host reduction of the contributions (integers wrap; f16 and bf16
 * are widened, combined and rounded to nearest even at each step). */
#include <string.h>

#include "hal_backends/trainium/emulator/emu_cc_internal.h"

/* Bytes per element; 0 for the types the collectives do not emulate. */
size_t cc_dtype_size(nrt_dtype_t dtype)
{
    switch (dtype) {
    case NRT_DTYPE_INT8:
    case NRT_DTYPE_UINT8:
        return 1;
    case NRT_DTYPE_INT16:
    case NRT_DTYPE_UINT16:
    case NRT_DTYPE_BFLOAT16:
    case NRT_DTYPE_FLOAT16:
        return 2;
    case NRT_DTYPE_INT32:
    case NRT_DTYPE_UINT32:
    case NRT_DTYPE_FLOAT32:
        return 4;
    case NRT_DTYPE_INT64:
    case NRT_DTYPE_UINT64:
        return 8;
    default:
        return 0; /* FP32R and the fp8 types are not emulated */
    }
}

/* f16 and bf16 widened to float and rounded back to nearest even. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    } else {
        float f = (float)mant * 0x1p-24f;
        memcpy(&u, &f, sizeof(u));
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float to IEEE half, rounded to nearest even. */
static uint16_t f32_to_f16(float x)
{
    uint32_t f;
    memcpy(&f, &x, sizeof(f));
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= (127u + 16) << 23) { /* too large: infinity, or NaN */
        o = f > 255u << 23 ? 0x7e00u : 0x7c00u;
    } else if (f < 113u << 23) { /* subnormal: adding 0.5 leaves it rounded at 2^-24 */
        float v, magic = 0.5f;
        memcpy(&v, &f, sizeof(v));
        v += magic;
        uint32_t u, m;
        memcpy(&u, &v, sizeof(u));
        memcpy(&m, &magic, sizeof(m));
        o = (uint16_t)(u - m);
    } else {
        uint32_t odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

/* bfloat16 to float (exact). */
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* float to bfloat16, rounded to nearest even (NaN stays a quiet NaN). */
static uint16_t f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#define CC_INT_ACC(T, U)                                             \
    do {                                                             \
        T *d = dst;                                                  \
        const T *s = src;                                            \
        for (size_t i = 0; i < n; i++)                               \
            d[i] = op == NRT_OP_ADD   ? (T)((U)d[i] + (U)s[i])       \
                   : op == NRT_OP_MAX ? (d[i] > s[i] ? d[i] : s[i])  \
                                      : (d[i] < s[i] ? d[i] : s[i]); \
    } while (0)

#define CC_NARROW_ACC(LOAD, STORE)                             \
    do {                                                       \
        uint16_t *d = dst;                                     \
        const uint16_t *s = src;                               \
        for (size_t i = 0; i < n; i++) {                       \
            float x = LOAD(d[i]), y = LOAD(s[i]);              \
            d[i] = op == NRT_OP_ADD   ? STORE(x + y)           \
                   : op == NRT_OP_MAX ? (x > y ? d[i] : s[i])  \
                                      : (x < y ? d[i] : s[i]); \
        }                                                      \
    } while (0)

/* dst[i] = dst[i] op src[i] for n elements. */
void cc_accumulate(void *dst, const void *src, size_t n, nrt_dtype_t dtype, nrt_op_type_t op)
{
    switch (dtype) {
    case NRT_DTYPE_INT8:
        CC_INT_ACC(int8_t, uint8_t);
        break;
    case NRT_DTYPE_UINT8:
        CC_INT_ACC(uint8_t, uint8_t);
        break;
    case NRT_DTYPE_INT16:
        CC_INT_ACC(int16_t, uint16_t);
        break;
    case NRT_DTYPE_UINT16:
        CC_INT_ACC(uint16_t, uint16_t);
        break;
    case NRT_DTYPE_INT32:
        CC_INT_ACC(int32_t, uint32_t);
        break;
    case NRT_DTYPE_UINT32:
        CC_INT_ACC(uint32_t, uint32_t);
        break;
    case NRT_DTYPE_INT64:
        CC_INT_ACC(int64_t, uint64_t);
        break;
    case NRT_DTYPE_UINT64:
        CC_INT_ACC(uint64_t, uint64_t);
        break;
    case NRT_DTYPE_FLOAT32: {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == NRT_OP_ADD   ? d[i] + s[i]
                   : op == NRT_OP_MAX ? (d[i] > s[i] ? d[i] : s[i])
                                      : (d[i] < s[i] ? d[i] : s[i]);
        break;
    }
    case NRT_DTYPE_FLOAT16:
        CC_NARROW_ACC(f16_to_f32, f32_to_f16);
        break;
    case NRT_DTYPE_BFLOAT16:
        CC_NARROW_ACC(bf16_to_f32, f32_to_bf16);
        break;
    default:
        break;
    }
}
