/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for core/reduce.c: every dtype x op against a reference computed independently here
 * (64-bit integer arithmetic, double arithmetic, and fp16/bf16 encoders built on frexp/nearbyint),
 * plus hand-checked fp16/bf16 rounding cases, NaN, +-0, +-inf, overflow, subnormals, integer wrap,
 * AVG finish, odd counts and misaligned / aliased buffers. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reduce.h"

static const size_t ESZ[COHORT_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

static int is_float(cohort_dtype_t dt)
{
    return dt == COHORT_FLOAT16 || dt == COHORT_BFLOAT16 || dt == COHORT_FLOAT32 ||
           dt == COHORT_FLOAT64;
}

static int is_signed_int(cohort_dtype_t dt)
{
    return dt == COHORT_INT8 || dt == COHORT_INT32 || dt == COHORT_INT64;
}

/* ---- reference fp16 / bf16 codecs (double based, independent of reduce.c) ------------------- */

static double ref_fp16_decode(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0x1f)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(mant, -24);
    else
        v = ldexp(1024 + mant, exp - 25);
    return (h & 0x8000) ? -v : v;
}

static double ref_bf16_decode(uint16_t b)
{
    int exp = (b >> 7) & 0xff, mant = b & 0x7f;
    double v;
    if (exp == 0xff)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(mant, -133);
    else
        v = ldexp(128 + mant, exp - 134);
    return (b & 0x8000) ? -v : v;
}

/* Round |x| to a format with `bits` significand bits (incl. the implicit one), exponent bias
 * `bias` and all-ones exponent emax_field; nearbyint rounds to nearest even. */
static uint16_t ref_encode(double x, int bits, int bias, int emax_field, uint16_t qnan)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    int mbits = bits - 1;
    if (isnan(x))
        return (uint16_t)(sign | qnan);
    x = fabs(x);
    uint16_t inf = (uint16_t)(sign | (emax_field << mbits));
    if (isinf(x))
        return inf;
    int e;
    double f = frexp(x, &e);                       /* x = f * 2^e, f in [0.5, 1) */
    if (x == 0 || e - 1 < 1 - bias) {              /* subnormal range: units of 2^(1-bias-mbits) */
        double m = nearbyint(ldexp(x, bias - 1 + mbits));
        return (uint16_t)(sign | (uint16_t)m);     /* m == 2^mbits is the smallest normal */
    }
    double m = nearbyint(ldexp(f, bits));          /* in [2^(bits-1), 2^bits] */
    if (m == ldexp(1, bits)) {
        m /= 2;
        e++;
    }
    int field = e - 1 + bias;
    if (field >= emax_field)
        return inf;
    return (uint16_t)(sign | (field << mbits) | ((uint16_t)m - (1 << mbits)));
}

static uint16_t ref_fp16_encode(double x) { return ref_encode(x, 11, 15, 0x1f, 0x7e00); }
static uint16_t ref_bf16_encode(double x) { return ref_encode(x, 8, 127, 0xff, 0x7fc0); }

/* ---- element access and reference operation ------------------------------------------------- */

static uint64_t load_bits(cohort_dtype_t dt, const unsigned char *p)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    switch (ESZ[dt]) {
    case 1: memcpy(&u8, p, 1); return u8;
    case 2: memcpy(&u16, p, 2); return u16;
    case 4: memcpy(&u32, p, 4); return u32;
    default: memcpy(&u64, p, 8); return u64;
    }
}

static void store_bits(cohort_dtype_t dt, unsigned char *p, uint64_t v)
{
    uint8_t u8 = (uint8_t)v;
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    switch (ESZ[dt]) {
    case 1: memcpy(p, &u8, 1); break;
    case 2: memcpy(p, &u16, 2); break;
    case 4: memcpy(p, &u32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

/* Signed integer value of the low `bytes` of bits (two's complement). */
static int64_t sext(uint64_t bits, size_t bytes)
{
    if (bytes == 8)
        return (int64_t)bits;
    uint64_t sign = 1ull << (bytes * 8 - 1);
    return bits & sign ? -(int64_t)((sign << 1) - bits) : (int64_t)bits;
}

static double to_double(cohort_dtype_t dt, uint64_t bits)
{
    float f;
    double d;
    uint32_t u32 = (uint32_t)bits;
    switch (dt) {
    case COHORT_FLOAT16: return ref_fp16_decode((uint16_t)bits);
    case COHORT_BFLOAT16: return ref_bf16_decode((uint16_t)bits);
    case COHORT_FLOAT32: memcpy(&f, &u32, 4); return f;
    default: memcpy(&d, &bits, 8); return d;
    }
}

static uint64_t from_double(cohort_dtype_t dt, double v)
{
    float f;
    uint32_t u32;
    uint64_t u64;
    switch (dt) {
    case COHORT_FLOAT16: return ref_fp16_encode(v);
    case COHORT_BFLOAT16: return ref_bf16_encode(v);
    case COHORT_FLOAT32: f = (float)v; memcpy(&u32, &f, 4); return u32;
    default: memcpy(&u64, &v, 8); return u64;
    }
}

/* IEEE 754-2019 minimum / maximum: NaN wins, -0 < +0. */
static double ref_minmax(double x, double y, int want_min)
{
    if (isnan(x) || isnan(y))
        return NAN;
    if (x == y)
        return (signbit(x) != 0) == want_min ? x : y;
    return (x < y) == want_min ? x : y;
}

static uint64_t ref_float_op(cohort_dtype_t dt, cohort_op_t op, uint64_t a, uint64_t b)
{
    double x = to_double(dt, a), y = to_double(dt, b);
    double r;
    switch (op) {
    case COHORT_PROD: r = x * y; break;
    case COHORT_MIN: r = ref_minmax(x, y, 1); break;
    case COHORT_MAX: r = ref_minmax(x, y, 0); break;
    default: r = x + y; break;                 /* SUM, AVG */
    }
    return from_double(dt, r);
}

static uint64_t ref_int_op(cohort_dtype_t dt, cohort_op_t op, uint64_t a, uint64_t b)
{
    size_t n = ESZ[dt];
    int64_t sa = sext(a, n), sb = sext(b, n);
    switch (op) {
    case COHORT_PROD:   /* 64-bit products/sums wrap mod 2^64, hence mod 2^(8n) too */
        return (uint64_t)sa * (uint64_t)sb;
    case COHORT_MIN:
        if (is_signed_int(dt))
            return (uint64_t)(sa < sb ? sa : sb);
        return a < b ? a : b;
    case COHORT_MAX:
        if (is_signed_int(dt))
            return (uint64_t)(sa > sb ? sa : sb);
        return a > b ? a : b;
    default:
        return (uint64_t)sa + (uint64_t)sb;
    }
}

static uint64_t ref_op(cohort_dtype_t dt, cohort_op_t op, uint64_t a, uint64_t b)
{
    uint64_t mask = ESZ[dt] == 8 ? ~0ull : (1ull << (ESZ[dt] * 8)) - 1;
    uint64_t r = is_float(dt) ? ref_float_op(dt, op, a, b) : ref_int_op(dt, op, a, b);
    return r & mask;
}

static int is_nan_bits(cohort_dtype_t dt, uint64_t v)
{
    return is_float(dt) && isnan(to_double(dt, v));
}

static uint64_t quiet_bit(cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_FLOAT16: return 0x200;
    case COHORT_BFLOAT16: return 0x40;
    case COHORT_FLOAT32: return 0x400000;
    default: return 1ull << 51;
    }
}

/* Same value, or both NaN with the result quiet. */
static int same_result(cohort_dtype_t dt, uint64_t got, uint64_t want)
{
    if (is_nan_bits(dt, want))
        return is_nan_bits(dt, got) && (got & quiet_bit(dt));
    return got == want;
}

/* ---- random test data ----------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const uint32_t F32_SPECIAL[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc00123,
    0x7f7fffff, 0xff7fffff, 0x00800000, 0x00000001, 0x807fffff, 0x3f800000, 0xbf800000,
    0x33800000, 0x34000000, 0x477fe000, 0x477ff000};
static const uint64_t F64_SPECIAL[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
    0xfff0000000000000ull, 0x7ff8000000000000ull, 0x7ff0000000000001ull,
    0x7fefffffffffffffull, 0x0000000000000001ull, 0x0010000000000000ull,
    0x3ff0000000000000ull, 0xbff0000000000000ull, 0x3ca0000000000000ull};

/* A value of dtype: mostly "ordinary" numbers (so sums exercise rounding rather than NaN), with
 * specials and raw random bit patterns mixed in. */
static uint64_t random_value(cohort_dtype_t dt)
{
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r >> 60);
    switch (dt) {
    case COHORT_FLOAT16:
    case COHORT_BFLOAT16:
        return rnd() & 0xffff;                    /* every class occurs */
    case COHORT_FLOAT32:
        if (kind < 3)
            return F32_SPECIAL[rnd() % (sizeof F32_SPECIAL / sizeof F32_SPECIAL[0])];
        if (kind < 6)
            return rnd() & 0xffffffffu;
        return from_double(dt, ldexp((double)(int32_t)(rnd() % 2000001) - 1000000, -10));
    case COHORT_FLOAT64:
        if (kind < 3)
            return F64_SPECIAL[rnd() % (sizeof F64_SPECIAL / sizeof F64_SPECIAL[0])];
        if (kind < 6)
            return rnd();
        return from_double(dt, ldexp((double)(int64_t)(rnd() % 2000001) - 1000000,
                                     (int)(rnd() % 41) - 20));
    default:
        if (kind == 0)
            return 0;
        if (kind == 1)
            return ~0ull;                         /* -1 / max */
        if (kind == 2)
            return 1ull << (ESZ[dt] * 8 - 1);     /* INT_MIN / 2^(n-1) */
        if (kind == 3)
            return (1ull << (ESZ[dt] * 8 - 1)) - 1;
        return r;
    }
}

static unsigned char *random_buffer(cohort_dtype_t dt, size_t count, size_t offset,
                                    unsigned char **base)
{
    *base = malloc(count * ESZ[dt] + offset + 1);
    ck_assert_ptr_nonnull(*base);
    unsigned char *p = *base + offset;
    for (size_t i = 0; i < count; i++)
        store_bits(dt, p + i * ESZ[dt], random_value(dt));
    return p;
}

/* ---- generic dtype x op checks -------------------------------------------------------------- */

static const size_t COUNTS[] = {1, 3, 17, 1023};

static void check_elems(cohort_dtype_t dt, cohort_op_t op, const unsigned char *got,
                        const unsigned char *a, const unsigned char *b, size_t count,
                        const char *how)
{
    size_t n = ESZ[dt];
    for (size_t i = 0; i < count; i++) {
        uint64_t x = load_bits(dt, a + i * n), y = load_bits(dt, b + i * n);
        uint64_t want = ref_op(dt, op, x, y), g = load_bits(dt, got + i * n);
        if (!same_result(dt, g, want))
            ck_abort_msg("dtype %d op %d, %s, count %zu, elem %zu: 0x%llx op 0x%llx = 0x%llx, "
                         "want 0x%llx", (int)dt, (int)op, how, count, i, (unsigned long long)x,
                         (unsigned long long)y, (unsigned long long)g,
                         (unsigned long long)want);
    }
}

/* Bitwise identical, except that NaNs from float SUM/PROD/AVG may differ in payload (the
 * compiler may swap the operands of + and *). MIN/MAX pick their NaN explicitly, so there the
 * operand order, kept on every path, must show in the bits. */
static void expect_same_bits(const unsigned char *got, const unsigned char *want, size_t bytes,
                             cohort_dtype_t dt, cohort_op_t op, size_t count, const char *how)
{
    int any_nan = is_float(dt) && op != COHORT_MIN && op != COHORT_MAX;
    size_t n = ESZ[dt];
    for (size_t i = 0; i < bytes / n; i++) {
        uint64_t g = load_bits(dt, got + i * n), w = load_bits(dt, want + i * n);
        if (g != w && !(any_nan && is_nan_bits(dt, g) && is_nan_bits(dt, w)))
            ck_abort_msg("dtype %d op %d count %zu elem %zu: %s gives 0x%llx, the out-of-place "
                         "call 0x%llx", (int)dt, (int)op, count, i, how, (unsigned long long)g,
                         (unsigned long long)w);
    }
}

/* All calling patterns for one dtype, op, count and misalignment offset (in bytes). Every
 * pattern computing a OP b must match the reference and agree with the others bitwise (see
 * expect_same_bits). */
static void check_pattern(cohort_dtype_t dt, cohort_op_t op, size_t count, size_t offset)
{
    size_t bytes = count * ESZ[dt];
    unsigned char *ba, *bb, *bo, *bs, *br;
    unsigned char *a = random_buffer(dt, count, offset, &ba);
    unsigned char *b = random_buffer(dt, count, offset, &bb);
    unsigned char *out = random_buffer(dt, count, offset, &bo);
    unsigned char *save = random_buffer(dt, count, 0, &bs);
    unsigned char *res = random_buffer(dt, count, 0, &br);

    /* out of place, all distinct */
    cohort_reduce_local3(out, a, b, count, dt, op);
    check_elems(dt, op, out, a, b, count, "local3");
    memcpy(res, out, bytes);

    /* in place: inout OP= in */
    memcpy(out, a, bytes);
    cohort_reduce_local(out, b, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local");

    /* out == a, out == b */
    memcpy(save, a, bytes);
    memcpy(out, a, bytes);
    cohort_reduce_local3(out, save, b, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local3 (staged copy of a)");
    memcpy(out, a, bytes);
    cohort_reduce_local3(out, out, b, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local3 out==a");
    memcpy(out, b, bytes);
    cohort_reduce_local3(out, a, out, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local3 out==b");

    /* a == b (both only read), then everything the same buffer */
    cohort_reduce_local3(out, a, a, count, dt, op);
    check_elems(dt, op, out, a, a, count, "local3 a==b");
    memcpy(res, out, bytes);
    memcpy(out, a, bytes);
    cohort_reduce_local(out, out, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local inout==in");
    memcpy(out, a, bytes);
    cohort_reduce_local3(out, out, out, count, dt, op);
    expect_same_bits(out, res, bytes, dt, op, count, "local3 all equal");

    free(ba);
    free(bb);
    free(bo);
    free(bs);
    free(br);
}

/* _i indexes dtype x op. */
START_TEST(dtype_op_matrix)
{
    cohort_dtype_t dt = (cohort_dtype_t)(_i / COHORT_OP_COUNT);
    cohort_op_t op = (cohort_op_t)(_i % COHORT_OP_COUNT);
    static const size_t offsets[] = {0, 1, 3};     /* bytes; 1 and 3 misalign every wide type */
    rng_state = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    for (size_t c = 0; c < sizeof COUNTS / sizeof COUNTS[0]; c++) {
        for (size_t o = 0; o < 3; o++)
            check_pattern(dt, op, COUNTS[c], offsets[o]);
        check_pattern(dt, op, COUNTS[c], ESZ[dt]);  /* element aligned, not vector aligned */
    }
    /* Larger than the 4 KiB staging buffer, misaligned, so several chunks are used. */
    check_pattern(dt, op, 5000, 1);
}
END_TEST

/* The same checks for fp16 on the portable loops, where F16C would otherwise be taken. */
START_TEST(fp16_portable_matrix)
{
    cohort_op_t op = (cohort_op_t)_i;
    rng_state = 0x51ed270b27b3d2c1ull + (uint64_t)_i;
    cohort_reduce_use_f16c(0);
    for (size_t c = 0; c < sizeof COUNTS / sizeof COUNTS[0]; c++)
        for (size_t o = 0; o < 3; o++)
            check_pattern(COHORT_FLOAT16, op, COUNTS[c], o);
    check_pattern(COHORT_FLOAT16, op, 5000, 1);
    cohort_reduce_use_f16c(1);
}
END_TEST

/* F16C and the portable loops give the same bits, NaN payloads included, for every fp16 value
 * against 48 others (specials and random ones), with every op and AVG's division; the length is
 * neither a multiple of 8 nor of the F16C path's block, and one buffer is reused as output. */
START_TEST(fp16_f16c_matches_portable)
{
    enum { NB = 48, N = 65536 * NB + 5 };
    static const uint16_t special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe3f,
                                       0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                                       0xbc00, 0x3555};
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    uint16_t *fast = malloc(N * sizeof *fast), *slow = malloc(N * sizeof *slow);
    ck_assert(a && b && fast && slow);
    rng_state = 0x2545f4914f6cdd1dull;
    for (size_t j = 0; j < NB; j++) {
        uint16_t y = j < sizeof special / sizeof special[0] ? special[j] : (uint16_t)rnd();
        for (size_t x = 0; x < 65536; x++) {
            a[j * 65536 + x] = (uint16_t)x;
            b[j * 65536 + x] = y;
        }
    }
    for (size_t i = 65536 * NB; i < N; i++) a[i] = b[i] = (uint16_t)(0x3c00 + i);
    for (int op = 0; op < COHORT_OP_COUNT; op++) {
        for (int pass = 0; pass < 2; pass++) {
            uint16_t *out = pass ? slow : fast;
            cohort_reduce_use_f16c(!pass);
            memcpy(out, b, N * sizeof *out);
            cohort_reduce_local3(out, a, out, N, COHORT_FLOAT16, (cohort_op_t)op);
            cohort_reduce_finish(out, N, COHORT_FLOAT16, (cohort_op_t)op, 3);
        }
        cohort_reduce_use_f16c(1);
        for (size_t i = 0; i < N; i++)
            if (fast[i] != slow[i])
                ck_abort_msg("op %d: 0x%04x op 0x%04x: F16C 0x%04x, portable 0x%04x", op, a[i],
                             b[i], fast[i], slow[i]);
    }
    free(a);
    free(b);
    free(fast);
    free(slow);
}
END_TEST

START_TEST(zero_count_and_bad_args_are_noops)
{
    uint32_t a[2] = {1, 2}, b[2] = {3, 4};
    cohort_reduce_local(a, b, 0, COHORT_UINT32, COHORT_SUM);
    cohort_reduce_local(a, b, 2, (cohort_dtype_t)99, COHORT_SUM);
    cohort_reduce_local(a, b, 2, COHORT_UINT32, (cohort_op_t)99);
    cohort_reduce_local3(a, a, b, 2, (cohort_dtype_t)-1, COHORT_SUM);
    cohort_reduce_finish(a, 2, COHORT_UINT32, COHORT_SUM, 2);
    cohort_reduce_finish(a, 2, COHORT_UINT32, COHORT_AVG, 0);
    cohort_reduce_finish(a, 2, COHORT_UINT32, COHORT_AVG, 1);
    cohort_reduce_finish(a, 2, (cohort_dtype_t)99, COHORT_AVG, 2);
    ck_assert_uint_eq(a[0], 1);
    ck_assert_uint_eq(a[1], 2);
}
END_TEST

/* ---- AVG finish ----------------------------------------------------------------------------- */

static uint64_t ref_finish(cohort_dtype_t dt, uint64_t v, int n)
{
    uint64_t mask = ESZ[dt] == 8 ? ~0ull : (1ull << (ESZ[dt] * 8)) - 1;
    if (is_float(dt))
        return from_double(dt, to_double(dt, v) / n) & mask;
    if (dt == COHORT_UINT64)
        return v / (uint64_t)n;
    if (is_signed_int(dt)) {          /* divide the magnitude, then restore the sign */
        int64_t s = sext(v, ESZ[dt]);
        uint64_t mag = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
        uint64_t q = mag / (uint64_t)n;
        return (s < 0 ? 0 - q : q) & mask;
    }
    return v / (uint64_t)n;
}

START_TEST(avg_finish)
{
    static const int ranks[] = {2, 3, 7, 8, 1000, 65537};
    cohort_dtype_t dt = (cohort_dtype_t)_i;
    rng_state = 0x1234567ull + (uint64_t)_i;
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        for (size_t off = 0; off < 2; off++) {
            unsigned char *base, *save_base;
            size_t count = 1023;
            unsigned char *buf = random_buffer(dt, count, off, &base);
            unsigned char *save = random_buffer(dt, count, 0, &save_base);
            memcpy(save, buf, count * ESZ[dt]);
            cohort_reduce_finish(buf, count, dt, COHORT_AVG, ranks[r]);
            for (size_t i = 0; i < count; i++) {
                uint64_t v = load_bits(dt, save + i * ESZ[dt]);
                uint64_t want = ref_finish(dt, v, ranks[r]);
                uint64_t got = load_bits(dt, buf + i * ESZ[dt]);
                if (!same_result(dt, got, want))
                    ck_abort_msg("avg finish dtype %d, nranks %d: 0x%llx -> 0x%llx, want 0x%llx",
                                 (int)dt, ranks[r], (unsigned long long)v,
                                 (unsigned long long)got, (unsigned long long)want);
            }
            free(base);
            free(save_base);
        }
    }
}
END_TEST

START_TEST(avg_finish_truncates_toward_zero)
{
    int8_t i8[4] = {-7, 7, -128, 127};
    cohort_reduce_finish(i8, 4, COHORT_INT8, COHORT_AVG, 2);
    ck_assert_int_eq(i8[0], -3);
    ck_assert_int_eq(i8[1], 3);
    ck_assert_int_eq(i8[2], -64);
    ck_assert_int_eq(i8[3], 63);
    int64_t i64[2] = {INT64_MIN, -5};
    cohort_reduce_finish(i64, 2, COHORT_INT64, COHORT_AVG, 3);
    ck_assert(i64[0] == INT64_MIN / 3);
    ck_assert(i64[1] == -1);
    uint8_t u8 = 255;
    cohort_reduce_finish(&u8, 1, COHORT_UINT8, COHORT_AVG, 200);   /* nranks > type max */
    ck_assert_uint_eq(u8, 1);
    int8_t s8 = -100;
    cohort_reduce_finish(&s8, 1, COHORT_INT8, COHORT_AVG, 300);
    ck_assert_int_eq(s8, 0);
    uint64_t u64 = UINT64_MAX;
    cohort_reduce_finish(&u64, 1, COHORT_UINT64, COHORT_AVG, 3);
    ck_assert(u64 == UINT64_MAX / 3);
    float f = 1.0f;
    cohort_reduce_finish(&f, 1, COHORT_FLOAT32, COHORT_AVG, 3);
    ck_assert(f == (float)(1.0 / 3.0));
    uint16_t h = 0x3c00;                                         /* fp16 1.0 / 3 */
    cohort_reduce_finish(&h, 1, COHORT_FLOAT16, COHORT_AVG, 3);
    ck_assert_uint_eq(h, 0x3555);
}
END_TEST

/* AVG accumulates exactly like SUM. */
START_TEST(avg_accumulates_as_sum)
{
    int32_t a[3] = {INT32_MAX, -4, 10}, b[3] = {1, -6, 5};
    cohort_reduce_local(a, b, 3, COHORT_INT32, COHORT_AVG);
    ck_assert_int_eq(a[0], INT32_MIN);
    ck_assert_int_eq(a[1], -10);
    ck_assert_int_eq(a[2], 15);
    cohort_reduce_finish(a, 3, COHORT_INT32, COHORT_AVG, 4);
    ck_assert_int_eq(a[1], -2);
    ck_assert_int_eq(a[2], 3);
}
END_TEST

/* ---- hand-checked cases --------------------------------------------------------------------- */

static uint16_t h16(cohort_dtype_t dt, cohort_op_t op, uint16_t a, uint16_t b)
{
    cohort_reduce_local(&a, &b, 1, dt, op);
    return a;
}

START_TEST(fp16_rounding_cases)
{
    const cohort_dtype_t F = COHORT_FLOAT16;
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x3c00, 0x3c00), 0x4000);       /* 1 + 1 = 2 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x3c00, 0x1000), 0x3c00);       /* 1 + 2^-11: tie, even */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x3c01, 0x1000), 0x3c02);       /* odd + half: up */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x3c00, 0x1001), 0x3c01);       /* just above half */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x7bff, 0x4c00), 0x7c00);       /* 65504 + 16: inf */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x7bff, 0x4800), 0x7bff);       /* 65504 + 8: stays */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0xfbff, 0xcc00), 0xfc00);       /* -> -inf */
    ck_assert_uint_eq(h16(F, COHORT_PROD, 0x7bff, 0x4000), 0x7c00);      /* 65504 * 2 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x0001, 0x0001), 0x0002);       /* subnormals */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x03ff, 0x0001), 0x0400);       /* -> smallest normal */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x0400, 0x8001), 0x03ff);       /* -> subnormal */
    ck_assert_uint_eq(h16(F, COHORT_PROD, 0x0001, 0x3800), 0x0000);      /* 2^-25: tie to 0 */
    ck_assert_uint_eq(h16(F, COHORT_PROD, 0x0003, 0x3800), 0x0002);      /* 1.5 ulp: tie, even */
    ck_assert_uint_eq(h16(F, COHORT_PROD, 0x0001, 0x3a00), 0x0001);      /* 0.75 ulp: up */
    ck_assert_uint_eq(h16(F, COHORT_PROD, 0x0001, 0xb400), 0x8000);      /* -0.25 ulp: -0 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x8000, 0x8000), 0x8000);       /* -0 + -0 = -0 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x8000, 0x0000), 0x0000);       /* -0 + +0 = +0 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x7c00, 0x3c00), 0x7c00);       /* inf + 1 */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x7c00, 0xfc00) & 0x7e00, 0x7e00); /* inf - inf: NaN */
    ck_assert_uint_eq(h16(F, COHORT_SUM, 0x7c01, 0x3c00) & 0x7e00, 0x7e00); /* sNaN -> qNaN */
    ck_assert_uint_eq(h16(F, COHORT_MIN, 0x3c00, 0x7e00) & 0x7e00, 0x7e00); /* NaN wins min */
    ck_assert_uint_eq(h16(F, COHORT_MAX, 0x7e00, 0x3c00) & 0x7e00, 0x7e00); /* and max */
    ck_assert_uint_eq(h16(F, COHORT_MIN, 0x0000, 0x8000), 0x8000);       /* -0 < +0 */
    ck_assert_uint_eq(h16(F, COHORT_MIN, 0x8000, 0x0000), 0x8000);
    ck_assert_uint_eq(h16(F, COHORT_MAX, 0x8000, 0x0000), 0x0000);
    ck_assert_uint_eq(h16(F, COHORT_MAX, 0x0000, 0x8000), 0x0000);
    ck_assert_uint_eq(h16(F, COHORT_MAX, 0xfc00, 0x0001), 0x0001);
}
END_TEST

START_TEST(bf16_rounding_cases)
{
    const cohort_dtype_t B = COHORT_BFLOAT16;
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x3f80, 0x3f80), 0x4000);       /* 1 + 1 */
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x3f80, 0x3b80), 0x3f80);       /* 1 + 2^-8: tie, even */
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x3f81, 0x3b80), 0x3f82);       /* odd + half: up */
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x7f7f, 0x7f7f), 0x7f80);       /* max + max: inf */
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x0001, 0x0001), 0x0002);       /* subnormals */
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x007f, 0x0001), 0x0080);
    ck_assert_uint_eq(h16(B, COHORT_PROD, 0x0001, 0x3f00), 0x0000);      /* half ulp: to even */
    ck_assert_uint_eq(h16(B, COHORT_PROD, 0x0003, 0x3f00), 0x0002);
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x8000, 0x8000), 0x8000);
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x8000, 0x0000), 0x0000);
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0xff80, 0x7f80) & 0x7fc0, 0x7fc0);
    ck_assert_uint_eq(h16(B, COHORT_SUM, 0x7f81, 0x0000) & 0x7fc0, 0x7fc0); /* sNaN -> qNaN */
    ck_assert_uint_eq(h16(B, COHORT_MIN, 0x7fc0, 0xff80) & 0x7fc0, 0x7fc0);
    ck_assert_uint_eq(h16(B, COHORT_MIN, 0x0000, 0x8000), 0x8000);
    ck_assert_uint_eq(h16(B, COHORT_MAX, 0x8000, 0x0000), 0x0000);
}
END_TEST

START_TEST(float_specials)
{
    float a[6] = {NAN, 1.0f, 0.0f, -0.0f, INFINITY, 3e38f};
    float b[6] = {1.0f, NAN, -0.0f, 0.0f, -INFINITY, 3e38f};
    float r[6];
    cohort_reduce_local3(r, a, b, 6, COHORT_FLOAT32, COHORT_MIN);
    ck_assert(isnan(r[0]) && isnan(r[1]));
    ck_assert(r[2] == 0 && signbit(r[2]) && r[3] == 0 && signbit(r[3]));
    ck_assert(r[4] == -INFINITY && r[5] == 3e38f);
    cohort_reduce_local3(r, a, b, 6, COHORT_FLOAT32, COHORT_MAX);
    ck_assert(isnan(r[0]) && isnan(r[1]));
    ck_assert(r[2] == 0 && !signbit(r[2]) && r[3] == 0 && !signbit(r[3]));
    ck_assert(r[4] == INFINITY);
    cohort_reduce_local3(r, a, b, 6, COHORT_FLOAT32, COHORT_SUM);
    ck_assert(isnan(r[0]) && isnan(r[1]) && isnan(r[4]));
    ck_assert(r[5] == INFINITY);                                   /* overflow to inf */
    double d[2] = {-0.0, NAN}, e[2] = {0.0, -INFINITY};
    cohort_reduce_local(d, e, 2, COHORT_FLOAT64, COHORT_MIN);
    ck_assert(d[0] == 0 && signbit(d[0]) && isnan(d[1]));
}
END_TEST

START_TEST(integer_wrap)
{
    int8_t a8 = 127, b8 = 1;
    cohort_reduce_local(&a8, &b8, 1, COHORT_INT8, COHORT_SUM);
    ck_assert_int_eq(a8, -128);
    a8 = -128, b8 = -1;
    cohort_reduce_local(&a8, &b8, 1, COHORT_INT8, COHORT_PROD);
    ck_assert_int_eq(a8, -128);
    int32_t a32 = INT32_MAX, b32 = 2;
    cohort_reduce_local(&a32, &b32, 1, COHORT_INT32, COHORT_PROD);
    ck_assert_int_eq(a32, -2);
    int64_t a64 = INT64_MIN, b64 = -1;
    cohort_reduce_local(&a64, &b64, 1, COHORT_INT64, COHORT_SUM);
    ck_assert(a64 == INT64_MAX);
    a64 = INT64_MIN, b64 = -1;
    cohort_reduce_local(&a64, &b64, 1, COHORT_INT64, COHORT_PROD);
    ck_assert(a64 == INT64_MIN);
    uint32_t u32a = UINT32_MAX, u32b = 2;
    cohort_reduce_local(&u32a, &u32b, 1, COHORT_UINT32, COHORT_SUM);
    ck_assert_uint_eq(u32a, 1);
    uint8_t u8a = 16, u8b = 17;
    cohort_reduce_local(&u8a, &u8b, 1, COHORT_UINT8, COHORT_PROD);
    ck_assert_uint_eq(u8a, 16);
}
END_TEST

/* ---- conversions ---------------------------------------------------------------------------- */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(half_decode_exhaustive)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = cohort_fp16_to_float((uint16_t)h);
        double want = ref_fp16_decode((uint16_t)h);
        uint16_t back = cohort_float_to_fp16(f);
        if (isnan(want)) {
            if (!isnan(f) || !(fbits(f) & 0x400000) || (back != (h | 0x200)))
                ck_abort_msg("fp16 NaN 0x%04x -> 0x%08x -> 0x%04x", h, fbits(f), back);
        } else if ((double)f != want || !signbit(f) != !signbit(want) || back != h) {
            ck_abort_msg("fp16 0x%04x -> %a (want %a) -> 0x%04x", h, f, want, back);
        }

        f = cohort_bf16_to_float((uint16_t)h);
        want = ref_bf16_decode((uint16_t)h);
        back = cohort_float_to_bf16(f);
        if (isnan(want)) {
            if (!isnan(f) || !(fbits(f) & 0x400000) || (back != (h | 0x40)))
                ck_abort_msg("bf16 NaN 0x%04x -> 0x%08x -> 0x%04x", h, fbits(f), back);
        } else if ((double)f != want || !signbit(f) != !signbit(want) || back != h) {
            ck_abort_msg("bf16 0x%04x -> %a (want %a) -> 0x%04x", h, f, want, back);
        }
    }
}
END_TEST

static void check_encode(uint32_t x)
{
    float f = bits_f(x);
    uint16_t h = cohort_float_to_fp16(f), wh = ref_fp16_encode(f);
    uint16_t b = cohort_float_to_bf16(f), wb = ref_bf16_encode(f);
    if (isnan(f)) {
        if ((h & 0x7e00) != 0x7e00 || (h & 0x8000) != (wh & 0x8000) || (b & 0x7fc0) != 0x7fc0)
            ck_abort_msg("NaN 0x%08x -> fp16 0x%04x bf16 0x%04x", x, h, b);
        return;
    }
    if (h != wh)
        ck_abort_msg("float 0x%08x (%a) -> fp16 0x%04x, want 0x%04x", x, f, h, wh);
    if (b != wb)
        ck_abort_msg("float 0x%08x (%a) -> bf16 0x%04x, want 0x%04x", x, f, b, wb);
}

/* Every exact midpoint between neighbouring fp16 / bf16 values (the ties), one float ulp each
 * side of it, and a stride through all float bit patterns. */
START_TEST(float_encode_sweep)
{
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double mid = (ref_fp16_decode((uint16_t)h) + ref_fp16_decode((uint16_t)(h + 1))) / 2;
        uint32_t x = fbits((float)mid);                 /* exact: fits in float */
        for (uint32_t s = 0; s < 2; s++)
            for (int d = -1; d <= 1; d++)
                check_encode((x + (uint32_t)d) | (s << 31));
    }
    for (uint32_t b = 0; b < 0x7f80; b++) {
        uint32_t x = ((uint32_t)b << 16) | 0x8000u;    /* bf16 midpoint */
        for (uint32_t s = 0; s < 2; s++)
            for (int d = -1; d <= 1; d++)
                check_encode((x + (uint32_t)d) | (s << 31));
    }
    for (uint64_t x = 0; x <= 0xffffffffull; x += 4099)
        check_encode((uint32_t)x);
    static const uint32_t special[] = {0x7f800000, 0xff800000, 0x7f7fffff, 0x477fefff, 0x477ff000,
                                       0x477ff001, 0x33000000, 0x33000001, 0x32ffffff,
                                       0x00000001, 0x80000001, 0x7fc00000, 0x7f800001};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_encode(special[i]);
}
END_TEST

/* The wire conversions of compression (F16C where the CPU has it) give the bits of the portable
 * conversions for every fp16 value and for floats at and around every fp16 rounding boundary
 * (NaN payloads aside: both give a NaN), in blocks whose lengths are not multiples of 8. */
START_TEST(wire_matches_portable)
{
    enum { N = 0x7c00 * 6 + 13 };
    float *f = malloc(N * sizeof *f), *back = malloc(N * sizeof *back);
    float *acc = malloc(N * sizeof *acc);
    uint16_t *h = malloc(N * sizeof *h);
    ck_assert(f && back && acc && h);
    size_t n = 0;
    for (uint32_t v = 0; v < 0x7c00; v++) {
        double mid = (ref_fp16_decode((uint16_t)v) + ref_fp16_decode((uint16_t)(v + 1))) / 2;
        uint32_t x = fbits((float)mid);
        for (uint32_t sgn = 0; sgn < 2; sgn++)
            for (int d = -1; d <= 1; d++) f[n++] = bits_f((x + (uint32_t)d) | (sgn << 31));
    }
    for (; n < N; n++) f[n] = 65520.0f * (float)(n % 3) - 1e-8f;
    for (int wire = 0; wire < 2; wire++) {
        cohort_dtype_t w = wire ? COHORT_BFLOAT16 : COHORT_FLOAT16;
        cohort_wire_encode(h, f, N, w);
        for (size_t i = 0; i < N; i++) {
            uint16_t want = wire ? cohort_float_to_bf16(f[i]) : cohort_float_to_fp16(f[i]);
            ck_assert_msg(h[i] == want, "%s encode of %a: %04x, portable %04x",
                          wire ? "bf16" : "fp16", (double)f[i], h[i], want);
        }
        for (size_t i = 0; i < N; i++) h[i] = (uint16_t)(i * 7919u);
        cohort_wire_decode(back, h, N, w);
        for (size_t i = 0; i < N; i++) acc[i] = 0.5f;
        cohort_wire_decode_add(acc, acc, h, N, w);
        for (size_t i = 0; i < N; i++) {
            float want = wire ? cohort_bf16_to_float(h[i]) : cohort_fp16_to_float(h[i]);
            if (want != want) {
                ck_assert(back[i] != back[i]);
                continue;
            }
            ck_assert_msg(fbits(back[i]) == fbits(want), "decode of %04x: %a, portable %a",
                          h[i], (double)back[i], (double)want);
            ck_assert_msg(fbits(acc[i]) == fbits(0.5f + want), "decode-add of %04x", h[i]);
        }
    }
    free(f);
    free(back);
    free(acc);
    free(h);
}
END_TEST

START_TEST(conversion_examples)
{
    ck_assert_uint_eq(cohort_float_to_fp16(65504.0f), 0x7bff);
    ck_assert_uint_eq(cohort_float_to_fp16(65519.99f), 0x7bff);
    ck_assert_uint_eq(cohort_float_to_fp16(65520.0f), 0x7c00);
    ck_assert_uint_eq(cohort_float_to_fp16(-1e10f), 0xfc00);
    ck_assert_uint_eq(cohort_float_to_fp16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(cohort_float_to_fp16(0x1p-25f), 0x0000);
    ck_assert_uint_eq(cohort_float_to_fp16(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(cohort_float_to_fp16(-0.0f), 0x8000);
    ck_assert_uint_eq(cohort_float_to_fp16(0x1.ffcp-15f), 0x0400); /* rounds up to normal */
    ck_assert_uint_eq(cohort_float_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(cohort_float_to_fp16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
    ck_assert(cohort_fp16_to_float(0x0001) == 0x1p-24f);
    ck_assert(cohort_fp16_to_float(0x7bff) == 65504.0f);
    ck_assert(cohort_fp16_to_float(0xfc00) == -INFINITY);
    ck_assert_uint_eq(cohort_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    ck_assert_uint_eq(cohort_float_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
    ck_assert_uint_eq(cohort_float_to_bf16(3.4e38f), 0x7f80);       /* rounds past max: inf */
    ck_assert_uint_eq(cohort_float_to_bf16(bits_f(0x00000001)), 0x0000);
    ck_assert_uint_eq(cohort_float_to_bf16(bits_f(0x00008001)), 0x0001);
    ck_assert(cohort_bf16_to_float(0x3f80) == 1.0f);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *matrix = tcase_create("matrix");
    tcase_add_loop_test(matrix, dtype_op_matrix, 0, COHORT_DTYPE_COUNT * COHORT_OP_COUNT);
    tcase_add_loop_test(matrix, avg_finish, 0, COHORT_DTYPE_COUNT);
    tcase_add_loop_test(matrix, fp16_portable_matrix, 0, COHORT_OP_COUNT);
    tcase_add_test(matrix, fp16_f16c_matches_portable);
    tcase_add_test(matrix, zero_count_and_bad_args_are_noops);
    tcase_set_timeout(matrix, 60);
    suite_add_tcase(s, matrix);

    TCase *cases = tcase_create("cases");
    tcase_add_test(cases, avg_finish_truncates_toward_zero);
    tcase_add_test(cases, avg_accumulates_as_sum);
    tcase_add_test(cases, fp16_rounding_cases);
    tcase_add_test(cases, bf16_rounding_cases);
    tcase_add_test(cases, float_specials);
    tcase_add_test(cases, integer_wrap);
    suite_add_tcase(s, cases);

    TCase *conv = tcase_create("conversions");
    tcase_add_test(conv, half_decode_exhaustive);
    tcase_add_test(conv, float_encode_sweep);
    tcase_add_test(conv, conversion_examples);
    tcase_add_test(conv, wire_matches_portable);
    tcase_set_timeout(conv, 60);
    suite_add_tcase(s, conv);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reduce_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
