/* SPDX-License-Identifier: Apache-2.0 */
/* Conformance, collectives: exact-arithmetic inputs, expected results and the checked run of one
 * collective case.
 *
 * Inputs follow nccl-tests' verifiable approach: values for which every order of reduction gives
 * the same bits. Sums use small integers and halves (quarters for f32 and f64) whose partial
 * sums over at most four ranks stay exactly representable, down to bf16's 8 significant bits and
 * fp8's 4 or 3; products use factors whose products stay exact (1, 2, 3 and halves for the
 * narrow floats); max and min take any value (bit patterns of the type, NaN and -0 excluded);
 * data movement takes any bits. Results are compared bit for bit; only avg of floating-point
 * types, whose division rounds, may be within 2 units in the last place. Each element depends
 * on the rank, its index and the case, so misplaced data shows. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cts_comm.h"

const hal_dtype_t cc_all_dtypes[CC_NUM_DTYPES] = {
    HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16,    HAL_DTYPE_F64,
    HAL_DTYPE_I8,  HAL_DTYPE_U8,  HAL_DTYPE_I32,     HAL_DTYPE_U32,
    HAL_DTYPE_I64, HAL_DTYPE_U64, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2,
};

const hal_redop_t cc_all_ops[HAL_REDOP_COUNT] = {
    HAL_REDOP_SUM, HAL_REDOP_PROD, HAL_REDOP_MAX, HAL_REDOP_MIN, HAL_REDOP_AVG,
};

size_t cc_dtype_size(hal_dtype_t dtype)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
    case HAL_DTYPE_U8:
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2:
        return 1;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
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

const char *cc_dtype_name(hal_dtype_t dtype)
{
    static const char *const names[] = { "i8",  "u8",  "i32", "u32",  "i64",     "u64",
                                         "f16", "f32", "f64", "bf16", "f8_e4m3", "f8_e5m2" };
    return (unsigned)dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "unknown";
}

const char *cc_op_name(hal_redop_t op)
{
    static const char *const names[] = { "sum", "prod", "max", "min", "avg" };
    return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown";
}

const char *cc_kind_name(cc_kind_t kind)
{
    static const char *const names[] = { "allreduce", "broadcast",      "reduce",
                                         "allgather", "reduce_scatter", "alltoall" };
    return (unsigned)kind < CC_KIND_COUNT ? names[kind] : "unknown";
}

bool cc_is_fp8(hal_dtype_t dtype)
{
    return dtype == HAL_DTYPE_F8_E4M3 || dtype == HAL_DTYPE_F8_E5M2;
}

cc_class_t cc_op_class(hal_redop_t op)
{
    switch (op) {
    case HAL_REDOP_PROD:
        return CC_CLASS_MUL;
    case HAL_REDOP_MAX:
    case HAL_REDOP_MIN:
        return CC_CLASS_ORDER;
    default:
        return CC_CLASS_ADD;
    }
}

/* ---- Element formats ------------------------------------------------------------------------- */

typedef struct fmt {
    int e, m, bias;
    bool ieee; /* an all-ones exponent means infinity or NaN (not e4m3: only S.1111.111 is NaN) */
} fmt_t;

static const fmt_t fmt_f16 = { 5, 10, 15, true }, fmt_bf16 = { 8, 7, 127, true },
                   fmt_f32 = { 8, 23, 127, true }, fmt_f64 = { 11, 52, 1023, true },
                   fmt_e4m3 = { 4, 3, 7, false }, fmt_e5m2 = { 5, 2, 15, true };

static const fmt_t *float_fmt(hal_dtype_t dtype)
{
    switch (dtype) {
    case HAL_DTYPE_F16:
        return &fmt_f16;
    case HAL_DTYPE_BF16:
        return &fmt_bf16;
    case HAL_DTYPE_F32:
        return &fmt_f32;
    case HAL_DTYPE_F64:
        return &fmt_f64;
    case HAL_DTYPE_F8_E4M3:
        return &fmt_e4m3;
    case HAL_DTYPE_F8_E5M2:
        return &fmt_e5m2;
    default:
        return NULL;
    }
}

static bool is_signed_int(hal_dtype_t dtype)
{
    return dtype == HAL_DTYPE_I8 || dtype == HAL_DTYPE_I32 || dtype == HAL_DTYPE_I64;
}

static uint64_t mask_of(hal_dtype_t dtype)
{
    size_t bits = 8 * cc_dtype_size(dtype);
    return bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
}

static int64_t to_signed(hal_dtype_t dtype, uint64_t bits)
{
    size_t w = 8 * cc_dtype_size(dtype);
    if (w < 64 && (bits >> (w - 1)) & 1)
        bits |= ~(uint64_t)0 << w;
    return (int64_t)bits;
}

static bool is_nan_or_inf(const fmt_t *f, uint64_t bits)
{
    uint64_t emax = ((uint64_t)1 << f->e) - 1, mmax = ((uint64_t)1 << f->m) - 1;
    uint64_t exp = (bits >> f->m) & emax, man = bits & mmax;
    if (f->ieee)
        return exp == emax;
    return exp == emax && man == mmax;
}

static double decode_float(hal_dtype_t dtype, uint64_t bits)
{
    if (dtype == HAL_DTYPE_F32) {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    if (dtype == HAL_DTYPE_F64) {
        double d;
        memcpy(&d, &bits, sizeof(d));
        return d;
    }
    const fmt_t *f = float_fmt(dtype);
    uint64_t emax = ((uint64_t)1 << f->e) - 1, mmax = ((uint64_t)1 << f->m) - 1;
    bool neg = (bits >> (f->e + f->m)) & 1;
    uint64_t exp = (bits >> f->m) & emax, man = bits & mmax;
    double v;
    if (is_nan_or_inf(f, bits))
        v = man != 0 || !f->ieee ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)man, 1 - f->bias - f->m);
    else
        v = ldexp((double)(man | ((uint64_t)1 << f->m)), (int)exp - f->bias - f->m);
    return neg ? -v : v;
}

/* Encodes v, which must be exactly representable; returns false if it is not. */
static bool encode_float(hal_dtype_t dtype, double v, uint64_t *bits)
{
    if (dtype == HAL_DTYPE_F32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        *bits = u;
        return (double)f == v || (isnan(v) && isnan(f));
    }
    if (dtype == HAL_DTYPE_F64) {
        memcpy(bits, &v, sizeof(v));
        return true;
    }
    const fmt_t *f = float_fmt(dtype);
    uint64_t sign = signbit(v) ? (uint64_t)1 << (f->e + f->m) : 0;
    double a = fabs(v);
    if (a == 0) {
        *bits = sign;
        return true;
    }
    int e2 = 0;
    frexp(a, &e2);
    int lead = e2 - 1;
    int biased = lead + f->bias;
    double scaled;
    uint64_t exp;
    if (biased >= 1) {
        scaled = ldexp(a, f->m - lead) - ldexp(1.0, f->m);
        exp = (uint64_t)biased;
    } else {
        scaled = ldexp(a, f->bias - 1 + f->m);
        exp = 0;
    }
    if (scaled != floor(scaled) || scaled >= ldexp(1.0, f->m))
        return false;
    *bits = sign | exp << f->m | (uint64_t)scaled;
    return !is_nan_or_inf(f, *bits) && exp < ((uint64_t)1 << f->e);
}

static double ulp_of(hal_dtype_t dtype, double x)
{
    const fmt_t *f = float_fmt(dtype);
    double a = fabs(x);
    if (a == 0)
        return ldexp(1.0, 1 - f->bias - f->m);
    int e2 = 0;
    frexp(a, &e2);
    int lead = e2 - 1;
    if (lead < 1 - f->bias)
        lead = 1 - f->bias;
    return ldexp(1.0, lead - f->m);
}

static void format_element(hal_dtype_t dtype, uint64_t bits, char *buf, size_t size)
{
    int digits = (int)(2 * cc_dtype_size(dtype));
    if (float_fmt(dtype) != NULL)
        snprintf(buf, size, "%.10g (0x%0*llx)", decode_float(dtype, bits), digits,
                 (unsigned long long)bits);
    else if (is_signed_int(dtype))
        snprintf(buf, size, "%lld (0x%0*llx)", (long long)to_signed(dtype, bits), digits,
                 (unsigned long long)bits);
    else
        snprintf(buf, size, "%llu (0x%0*llx)", (unsigned long long)bits, digits,
                 (unsigned long long)bits);
}

/* ---- Values ---------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint32_t cc_seed(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    uint64_t h = mix64(a);
    h = mix64(h ^ b);
    h = mix64(h ^ c);
    return (uint32_t)mix64(h ^ d);
}

static uint64_t from_int(hal_dtype_t dtype, int64_t v)
{
    return (uint64_t)v & mask_of(dtype);
}

static uint64_t from_double(hal_dtype_t dtype, double v)
{
    uint64_t bits = 0;
    encode_float(dtype, v, &bits); /* exact by construction of the classes below */
    return bits;
}

/* The values of one rank in one case: element i is shaped from the i-th number of a
 * splitmix64 stream keyed by (seed, rank, class, dtype). */
typedef struct gen {
    hal_dtype_t dtype;
    cc_class_t cls;
    uint64_t key, mask;
} gen_t;

static gen_t gen_make(hal_dtype_t dtype, cc_class_t cls, int rank, uint32_t seed)
{
    gen_t g = { dtype, cls,
                mix64((uint64_t)seed << 32 ^ (uint64_t)(uint32_t)rank << 12 ^ (uint64_t)cls << 8 ^
                      (uint64_t)dtype),
                mask_of(dtype) };
    return g;
}

static uint64_t gen_at(const gen_t *g, size_t i)
{
    const hal_dtype_t dtype = g->dtype;
    const cc_class_t cls = g->cls;
    uint64_t h = mix64(g->key + (uint64_t)i * 0xd1b54a32d192ed03ull);
    static const int64_t mul_i8[] = { -3, -2, -1, 1, 2, 3 };
    static const double mul_narrow[] = { -2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2 };
    static const double mul_fp8[] = { -2, -1, -0.5, 0.5, 1, 2 };
    switch (cls) {
    case CC_CLASS_BITS:
        return h & g->mask;
    case CC_CLASS_ORDER: {
        const fmt_t *f = float_fmt(dtype);
        if (f == NULL)
            return h & mask_of(dtype);
        uint64_t bits = h & mask_of(dtype);
        while (is_nan_or_inf(f, bits)) {
            h = mix64(h + 1);
            bits = h & mask_of(dtype);
        }
        if (bits == (uint64_t)1 << (f->e + f->m))
            bits = 0; /* -0 would make max(-0, +0) ambiguous */
        return bits;
    }
    case CC_CLASS_ADD:
        switch (dtype) {
        case HAL_DTYPE_I8:
            return from_int(dtype, (int64_t)(h % 63) - 31);
        case HAL_DTYPE_U8:
            return h % 64;
        case HAL_DTYPE_I32:
            return from_int(dtype, (int64_t)(h % ((1u << 29) + 1)) - (1 << 28));
        case HAL_DTYPE_U32:
            return h % (1u << 30);
        case HAL_DTYPE_I64:
            return from_int(dtype, (int64_t)(h % (UINT64_C(1) << 61)) - (INT64_C(1) << 60));
        case HAL_DTYPE_U64:
            return h % (UINT64_C(1) << 62);
        case HAL_DTYPE_F32:
            return from_double(dtype, (double)((int64_t)(h % (1u << 22)) - (1 << 21)) / 4);
        case HAL_DTYPE_F64:
            return from_double(
                dtype, (double)((int64_t)(h % (UINT64_C(1) << 50)) - (INT64_C(1) << 49)) / 4);
        case HAL_DTYPE_F16:
            return from_double(dtype, (double)((int64_t)(h % 511) - 255) / 2);
        case HAL_DTYPE_BF16:
            return from_double(dtype, (double)((int64_t)(h % 127) - 63) / 2);
        case HAL_DTYPE_F8_E4M3:
            return from_double(dtype, (double)((int64_t)(h % 7) - 3));
        case HAL_DTYPE_F8_E5M2:
            return from_double(dtype, (double)((int64_t)(h % 5) - 2));
        default:
            return 0;
        }
    case CC_CLASS_MUL:
        switch (dtype) {
        case HAL_DTYPE_I8:
            return from_int(dtype, mul_i8[h % 6]);
        case HAL_DTYPE_U8:
            return 1 + h % 3;
        case HAL_DTYPE_I32:
            return from_int(dtype, (int64_t)(h % 255) - 127);
        case HAL_DTYPE_U32:
            return h % 256;
        case HAL_DTYPE_I64:
            return from_int(dtype, (int64_t)(h % 65535) - 32767);
        case HAL_DTYPE_U64:
            return h % 65536;
        case HAL_DTYPE_F32:
            return from_double(dtype, (double)((int64_t)(h % 33) - 16) / 4);
        case HAL_DTYPE_F64:
            return from_double(dtype, (double)((int64_t)(h % 2049) - 1024) / 8);
        case HAL_DTYPE_F16:
        case HAL_DTYPE_BF16:
            return from_double(dtype, mul_narrow[h % 8]);
        case HAL_DTYPE_F8_E4M3:
        case HAL_DTYPE_F8_E5M2:
            return from_double(dtype, mul_fp8[h % 6]);
        default:
            return 0;
        }
    }
    return 0;
}

uint64_t cc_value(hal_dtype_t dtype, cc_class_t cls, int rank, size_t i, uint32_t seed)
{
    gen_t g = gen_make(dtype, cls, rank, seed);
    return gen_at(&g, i);
}

/* Element i of es bytes (the hot loops pass the size once). */
static inline void put_es(void *buf, size_t es, size_t i, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + i * es;
    if (es == 1) {
        uint8_t v = (uint8_t)bits;
        memcpy(p, &v, 1);
    } else if (es == 2) {
        uint16_t v = (uint16_t)bits;
        memcpy(p, &v, 2);
    } else if (es == 4) {
        uint32_t v = (uint32_t)bits;
        memcpy(p, &v, 4);
    } else {
        memcpy(p, &bits, 8);
    }
}

static inline uint64_t get_es(const void *buf, size_t es, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * es;
    if (es == 1) {
        uint8_t v;
        memcpy(&v, p, 1);
        return v;
    }
    if (es == 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    if (es == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

void cc_put(hal_dtype_t dtype, void *buf, size_t i, uint64_t bits)
{
    put_es(buf, cc_dtype_size(dtype), i, bits);
}

uint64_t cc_get(hal_dtype_t dtype, const void *buf, size_t i)
{
    return get_es(buf, cc_dtype_size(dtype), i);
}

void cc_fill(hal_dtype_t dtype, cc_class_t cls, int rank, size_t base, size_t n, uint32_t seed,
             void *buf)
{
    gen_t g = gen_make(dtype, cls, rank, seed);
    const size_t es = cc_dtype_size(dtype);
    for (size_t j = 0; j < n; j++)
        put_es(buf, es, j, gen_at(&g, base + j));
}

/* Ranks of a job (the suite runs at most 4; processes could be up to 8). */
#define CC_MAX_RANKS 8

/* Element i against op over the ranks' generators. */
static bool check_one(const gen_t *gens, int nranks, hal_dtype_t dtype, hal_redop_t op, size_t i,
                      uint64_t got, char *detail, size_t detail_size)
{
    uint64_t want = 0;
    bool ok;
    char g[96], w[96];
    if (float_fmt(dtype) != NULL) {
        double acc = decode_float(dtype, gen_at(&gens[0], i));
        for (int q = 1; q < nranks; q++) {
            double v = decode_float(dtype, gen_at(&gens[q], i));
            switch (op) {
            case HAL_REDOP_PROD:
                acc *= v;
                break;
            case HAL_REDOP_MAX:
                acc = v > acc ? v : acc;
                break;
            case HAL_REDOP_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        if (op == HAL_REDOP_AVG) {
            double expect = acc / nranks, have = decode_float(dtype, got);
            ok = !isnan(have) && fabs(have - expect) <= 2 * ulp_of(dtype, expect);
            if (!ok && detail != NULL) {
                format_element(dtype, got, g, sizeof(g));
                snprintf(detail, detail_size, "got %s, expected %.10g within 2 ulp (%.3g)", g,
                         expect, 2 * ulp_of(dtype, expect));
            }
            return ok;
        }
        if (!encode_float(dtype, acc, &want)) {
            if (detail != NULL)
                snprintf(detail, detail_size,
                         "test defect: the expected value %.17g is not exact in %s", acc,
                         cc_dtype_name(dtype));
            return false;
        }
    } else if (is_signed_int(dtype)) {
        int64_t acc = to_signed(dtype, gen_at(&gens[0], i));
        for (int q = 1; q < nranks; q++) {
            int64_t v = to_signed(dtype, gen_at(&gens[q], i));
            switch (op) {
            case HAL_REDOP_PROD:
                acc *= v;
                break;
            case HAL_REDOP_MAX:
                acc = v > acc ? v : acc;
                break;
            case HAL_REDOP_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        if (op == HAL_REDOP_AVG)
            acc /= nranks; /* truncates toward zero */
        want = from_int(dtype, acc);
    } else {
        uint64_t acc = gen_at(&gens[0], i);
        for (int q = 1; q < nranks; q++) {
            uint64_t v = gen_at(&gens[q], i);
            switch (op) {
            case HAL_REDOP_PROD:
                acc *= v;
                break;
            case HAL_REDOP_MAX:
                acc = v > acc ? v : acc;
                break;
            case HAL_REDOP_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        if (op == HAL_REDOP_AVG)
            acc /= (uint64_t)nranks;
        want = acc & mask_of(dtype);
    }
    ok = got == want;
    if (!ok && detail != NULL) {
        format_element(dtype, got, g, sizeof(g));
        format_element(dtype, want, w, sizeof(w));
        snprintf(detail, detail_size, "got %s, expected %s", g, w);
    }
    return ok;
}

static void gens_make(gen_t *gens, hal_dtype_t dtype, hal_redop_t op, int nranks, uint32_t seed)
{
    for (int q = 0; q < nranks && q < CC_MAX_RANKS; q++)
        gens[q] = gen_make(dtype, cc_op_class(op), q, seed);
}

bool cc_check_reduced(hal_dtype_t dtype, hal_redop_t op, int nranks, size_t i, uint32_t seed,
                      uint64_t got, char *detail, size_t detail_size)
{
    gen_t gens[CC_MAX_RANKS];
    if (nranks > CC_MAX_RANKS)
        return false;
    gens_make(gens, dtype, op, nranks, seed);
    return check_one(gens, nranks, dtype, op, i, got, detail, detail_size);
}

/* ---- Cases ----------------------------------------------------------------------------------- */

static bool is_reducing(cc_kind_t kind)
{
    return kind == CC_ALLREDUCE || kind == CC_REDUCE || kind == CC_REDUCE_SCATTER;
}

/* Elements of the send and receive buffers of a case on one rank. */
static void case_elems(const cc_case_t *c, int nranks, size_t *send, size_t *recv)
{
    size_t n = c->count, all = n * (size_t)nranks;
    switch (c->kind) {
    case CC_ALLGATHER:
        *send = n;
        *recv = all;
        break;
    case CC_REDUCE_SCATTER:
        *send = all;
        *recv = n;
        break;
    case CC_ALLTOALL:
        *send = *recv = all;
        break;
    default:
        *send = *recv = n;
        break;
    }
}

size_t cc_case_bytes(const cc_case_t *c, int nranks)
{
    size_t s, r;
    case_elems(c, nranks, &s, &r);
    return (s > r ? s : r) * cc_dtype_size(c->dtype) + CC_GUARD;
}

hal_status_t cc_issue(const cc_case_t *c, const void *send, void *recv, hal_comm_t comm,
                      hal_stream_t stream)
{
    switch (c->kind) {
    case CC_ALLREDUCE:
        return hal_allreduce(send, recv, c->count, c->dtype, c->op, comm, stream);
    case CC_BROADCAST:
        return hal_broadcast(send, recv, c->count, c->dtype, c->root, comm, stream);
    case CC_REDUCE:
        return hal_reduce(send, recv, c->count, c->dtype, c->op, c->root, comm, stream);
    case CC_ALLGATHER:
        return hal_allgather(send, recv, c->count, c->dtype, comm, stream);
    case CC_REDUCE_SCATTER:
        return hal_reduce_scatter(send, recv, c->count, c->dtype, c->op, comm, stream);
    case CC_ALLTOALL:
        return hal_alltoall(send, recv, c->count, c->dtype, comm, stream);
    default:
        return HAL_ERROR_INVALID_ARGUMENT;
    }
}

bool cc_bufs_alloc(cc_rank_t *r, cc_bufs_t *b, size_t bytes)
{
    memset(b, 0, sizeof(*b));
    b->bytes = bytes;
    if (CC_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_DEVICE, bytes, 0, &b->dev_a)) &&
        CC_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_DEVICE, bytes, 0, &b->dev_b)) &&
        CC_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, bytes, 0, &b->host_a)) &&
        CC_EXPECT_OK(r, hal_mem_alloc(r->device, HAL_MEM_KIND_HOST_PINNED, bytes, 0, &b->host_b)))
        return true;
    cc_break(r);
    cc_bufs_free(r, b);
    return false;
}

/* Stream-ordered frees: hal_mem_free waits for the device's (even the backend's) other streams,
 * and those may hold collectives of other ranks that wait for this rank's next one. */
static hal_status_t free_one(cc_rank_t *r, void *p)
{
    return r->stream != NULL ? hal_mem_free_async(p, r->stream) : hal_mem_free(p);
}

void cc_bufs_free(cc_rank_t *r, cc_bufs_t *b)
{
    void *all[] = { b->dev_a, b->dev_b, b->host_a, b->host_b };
    for (size_t i = 0; i < 4; i++) {
        if (all[i] == NULL)
            continue;
        hal_status_t st = free_one(r, all[i]);
        if (!r->broken)
            CC_EXPECT_STATUS(r, st, HAL_OK);
    }
    memset(b, 0, sizeof(*b));
}

void cc_bufs_release(cc_rank_t *r, cc_bufs_t *b)
{
    void *all[] = { b->dev_a, b->dev_b, b->host_a, b->host_b };
    for (size_t i = 0; i < 4; i++)
        if (all[i] != NULL)
            free_one(r, all[i]);
    memset(b, 0, sizeof(*b));
}

static void describe(const cc_case_t *c, char *buf, size_t size)
{
    char root[16] = "";
    if (c->kind == CC_BROADCAST || c->kind == CC_REDUCE)
        snprintf(root, sizeof(root), ", root %d", c->root);
    snprintf(buf, size, "%s %s%s%s, count %zu%s, %s", cc_kind_name(c->kind),
             cc_dtype_name(c->dtype), is_reducing(c->kind) ? " " : "",
             is_reducing(c->kind) ? cc_op_name(c->op) : "", c->count, root,
             c->in_place ? "in place" : "out of place");
}

static uint64_t pattern_word(size_t w, uint32_t seed)
{
    return ((uint64_t)w + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed + 1) * 0xd1b54a32d192ed03ull;
}

uint8_t cc_pattern_byte(size_t k, uint32_t seed)
{
    return (uint8_t)(pattern_word(k / 8, seed) >> (8 * (k % 8)));
}

void cc_pattern_fill(void *buf, size_t n, uint32_t seed)
{
    unsigned char *p = buf;
    size_t words = n / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t v = pattern_word(w, seed);
        unsigned char b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (unsigned char)(v >> (8 * j));
        memcpy(p + 8 * w, b, 8);
    }
    for (size_t k = words * 8; k < n; k++)
        p[k] = cc_pattern_byte(k, seed);
}

size_t cc_pattern_mismatch(const void *buf, size_t off, size_t n, uint32_t seed)
{
    const unsigned char *p = buf;
    for (size_t k = off; k < off + n; k++)
        if (p[k] != cc_pattern_byte(k, seed))
            return k;
    return SIZE_MAX;
}

bool cc_run_case(cc_rank_t *r, cc_bufs_t *b, const cc_case_t *c)
{
    if (r->broken)
        return false;
    const int nranks = r->nranks, me = r->rank;
    const hal_dtype_t dt = c->dtype;
    const size_t n = c->count, es = cc_dtype_size(dt);
    size_t ns, nr;
    case_elems(c, nranks, &ns, &nr);
    const size_t total = ns > nr ? ns : nr;
    const cc_class_t cls = is_reducing(c->kind) ? cc_op_class(c->op) : CC_CLASS_BITS;
    if (nranks > CC_MAX_RANKS) {
        CC_FAILF(r, "test defect: more than %d ranks", CC_MAX_RANKS);
        cc_break(r);
        return false;
    }
    const uint32_t pat_a = c->seed ^ 0xa5a5a5u, pat_b = c->seed ^ 0x5a5a5au;
    unsigned char *ha = b->host_a, *hb = b->host_b, *da = b->dev_a, *db = b->dev_b;
    size_t send_off = 0, recv_off = 0, region, send_region = ns * es + CC_GUARD;
    char what[160];
    describe(c, what, sizeof(what));
    if (cc_case_bytes(c, nranks) > b->bytes) {
        CC_FAILF(r, "test defect: %s needs %zu bytes, the buffers hold %zu", what,
                 cc_case_bytes(c, nranks), b->bytes);
        cc_break(r);
        return false;
    }
    /* What must hold a pattern before the call: the guard after the receive region, and all of
     * it while it is small or must stay untouched (a non-root's buffer of reduce). Large regions
     * that the collective overwrites keep data of an earlier case, which differs anyway. */
    const bool untouched = c->kind == CC_REDUCE && me != c->root && !c->in_place;
    const bool whole = untouched || total * es <= ((size_t)1 << 20);
    if (c->in_place) {
        if (c->kind == CC_ALLGATHER)
            send_off = (size_t)me * n;
        if (c->kind == CC_REDUCE_SCATTER)
            recv_off = (size_t)me * n;
        region = total * es;
    } else {
        region = nr * es;
        cc_pattern_fill(ha, send_region, pat_a);
        cc_fill(dt, cls, me, 0, ns, c->seed, ha);
    }
    if (whole)
        cc_pattern_fill(hb, region + CC_GUARD, pat_b);
    else
        for (size_t k = region; k < region + CC_GUARD; k++)
            hb[k] = cc_pattern_byte(k, pat_b);
    if (c->in_place)
        cc_fill(dt, cls, me, 0, ns, c->seed, hb + send_off * es);
    const void *send = c->in_place ? (const void *)(db + send_off * es) : (const void *)da;
    void *recv = db + recv_off * es;
    hal_status_t st = HAL_OK;
    if (!c->in_place)
        st = hal_memcpy_async(da, ha, send_region, r->stream);
    if (st == HAL_OK && whole)
        st = hal_memcpy_async(db, hb, region + CC_GUARD, r->stream);
    if (st == HAL_OK && !whole && c->in_place)
        st = hal_memcpy_async(db + send_off * es, hb + send_off * es, ns * es, r->stream);
    if (st == HAL_OK && !whole)
        st = hal_memcpy_async(db + region, hb + region, CC_GUARD, r->stream);
    region += CC_GUARD;
    if (st != HAL_OK) {
        CC_FAILF(r, "%s: uploading the inputs failed: %s: %s", what, hal_status_string(st),
                 hal_last_error_message());
        cc_break(r);
        return false;
    }
    st = cc_issue(c, send, recv, r->comm, r->stream);
    if (st != HAL_OK) {
        CC_FAILF(r, "%s: the call returned %s: %s", what, hal_status_string(st),
                 hal_last_error_message());
        cc_break(r);
        return false;
    }
    st = hal_memcpy_async(hb, db, region, r->stream);
    if (st == HAL_OK && !c->in_place)
        st = hal_memcpy_async(ha, da, send_region, r->stream);
    if (st == HAL_OK)
        st = hal_stream_synchronize(r->stream);
    if (st != HAL_OK) {
        CC_FAILF(r, "%s: the stream failed: %s: %s", what, hal_status_string(st),
                 hal_last_error_message());
        cc_break(r);
        return false;
    }

    /* The receive region. */
    const unsigned char *got = hb + recv_off * es;
    size_t bad = 0, first = SIZE_MAX;
    char detail[320] = "";
    gen_t gens[CC_MAX_RANKS];
    for (int q = 0; q < nranks && q < CC_MAX_RANKS; q++)
        gens[q] = gen_make(dt, cls, q, c->seed);
    for (size_t j = 0; j < nr && !untouched; j++) {
        uint64_t g = get_es(got, es, j), want = 0;
        bool ok;
        bool reduced = false;
        size_t idx = j;
        switch (c->kind) {
        case CC_ALLREDUCE:
            reduced = true;
            break;
        case CC_REDUCE_SCATTER:
            reduced = true;
            idx = (size_t)me * n + j;
            break;
        case CC_REDUCE:
            reduced = me == c->root;
            want = gen_at(&gens[me], j); /* a non-root's buffer keeps its input */
            break;
        case CC_BROADCAST:
            want = gen_at(&gens[c->root], j);
            break;
        case CC_ALLGATHER:
            want = gen_at(&gens[j / n], j % n);
            break;
        case CC_ALLTOALL:
            want = gen_at(&gens[j / n], (size_t)me * n + j % n);
            break;
        default:
            break;
        }
        if (reduced) {
            ok = check_one(gens, nranks, dt, c->op, idx, g, NULL, 0);
            if (!ok && first == SIZE_MAX)
                check_one(gens, nranks, dt, c->op, idx, g, detail, sizeof(detail));
        } else {
            ok = g == want;
            if (!ok && first == SIZE_MAX)
                snprintf(detail, sizeof(detail), "got 0x%llx, expected 0x%llx",
                         (unsigned long long)g, (unsigned long long)want);
        }
        if (!ok) {
            if (first == SIZE_MAX)
                first = j;
            bad++;
        }
    }
    if (bad > 0)
        CC_FAILF(r, "%s: %zu of %zu received elements wrong; the first, element %zu: %s", what, bad,
                 nr, first, detail);
    if (untouched) {
        size_t at = cc_pattern_mismatch(hb, 0, nr * es, pat_b);
        if (at != SIZE_MAX)
            CC_FAILF(r, "%s: the receive buffer of a non-root rank was written (byte %zu)", what,
                     at);
    }
    /* Nothing written past the receive region (or the whole in-place buffer). */
    size_t end = c->in_place ? total * es : nr * es;
    size_t at = cc_pattern_mismatch(hb, end, CC_GUARD, pat_b);
    if (at != SIZE_MAX)
        CC_FAILF(r, "%s: a byte after the receive buffer was overwritten (%zu bytes past its end)",
                 what, at - end);
    /* The send buffer is read only. */
    if (!c->in_place) {
        size_t wrong = SIZE_MAX;
        for (size_t j = 0; j < ns && wrong == SIZE_MAX; j++)
            if (get_es(ha, es, j) != gen_at(&gens[me], j))
                wrong = j;
        if (wrong != SIZE_MAX)
            CC_FAILF(r, "%s: the send buffer was modified (element %zu)", what, wrong);
        at = cc_pattern_mismatch(ha, ns * es, CC_GUARD, pat_a);
        if (at != SIZE_MAX)
            CC_FAILF(r, "%s: a byte after the send buffer was overwritten", what);
    }
    return true;
}

static const size_t sweep_counts[] = { 0, 1, 7, 1023, CC_LARGE_COUNT };

void cc_sweep(cc_rank_t *r, cc_kind_t kind)
{
    const bool fp8 = (r->props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) != 0;
    const bool reducing = is_reducing(kind), rooted = kind == CC_BROADCAST || kind == CC_REDUCE;
    cc_case_t big = { .kind = kind, .dtype = HAL_DTYPE_F32, .count = CC_LARGE_COUNT };
    cc_case_t wide = { .kind = kind, .dtype = HAL_DTYPE_F64, .count = 1023 };
    size_t need = cc_case_bytes(&big, r->nranks), need2 = cc_case_bytes(&wide, r->nranks);
    cc_bufs_t b;
    if (!cc_bufs_alloc(r, &b, need > need2 ? need : need2))
        return;
    for (int d = 0; d < CC_NUM_DTYPES; d++) {
        hal_dtype_t dt = cc_all_dtypes[d];
        if (cc_is_fp8(dt) && !fp8)
            continue;
        for (int o = 0; o < (reducing ? HAL_REDOP_COUNT : 1); o++) {
            hal_redop_t op = cc_all_ops[o];
            for (size_t k = 0; k < sizeof(sweep_counts) / sizeof(sweep_counts[0]); k++) {
                bool large = sweep_counts[k] == CC_LARGE_COUNT;
                if (large && ((dt != HAL_DTYPE_F32 && dt != HAL_DTYPE_I32) ||
                              (reducing && op != HAL_REDOP_SUM)))
                    continue;
                /* Every root, except for the large count: the last rank only. */
                for (int root = large && rooted ? r->nranks - 1 : 0;
                     root < (rooted ? r->nranks : 1); root++) {
                    for (int in_place = 0; in_place < 2; in_place++) {
                        cc_case_t c = {
                            .kind = kind,
                            .dtype = dt,
                            .op = op,
                            .count = sweep_counts[k],
                            .root = root,
                            .in_place = in_place != 0,
                            .seed =
                                cc_seed((uint32_t)kind, (uint32_t)dt, (uint32_t)op,
                                        (uint32_t)(k << 8 | (size_t)root << 1 | (size_t)in_place)),
                        };
                        if (!cc_run_case(r, &b, &c))
                            goto out;
                    }
                }
            }
        }
    }
out:
    cc_bufs_free(r, &b);
}
