/* SPDX-License-Identifier: BSD-3-Clause */
/* Element access and reference values for the multi-process tests (collcheck, nbcheck):
 * conversions independent of the library's own, and inputs chosen so that every reduction is
 * exact in every dtype. Header-only: each test program includes it once. */
#ifndef COHORT_TESTS_MP_ELEMS_H
#define COHORT_TESTS_MP_ELEMS_H

#include <cohort/cohort.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

static inline double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline uint16_t double_to_half(double v)  /* only for small integers and exact values */
{
    uint16_t sign = v < 0 ? 0x8000 : 0;
    v = fabs(v);
    if (v == 0) return sign;
    int e;
    double f = frexp(v, &e);   /* v = f * 2^e, f in [0.5,1) */
    int exp = e - 1 + 15;
    uint16_t mant = (uint16_t)lrint((f * 2 - 1) * 1024);
    return (uint16_t)(sign | (exp << 10) | mant);
}

static inline double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t double_to_bf16(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);   /* exact for the small integers used */
}

static inline double get(const void *buf, size_t i, cohort_dtype_t t)
{
    switch (t) {
    case COHORT_INT8: return ((const int8_t *)buf)[i];
    case COHORT_UINT8: return ((const uint8_t *)buf)[i];
    case COHORT_INT32: return ((const int32_t *)buf)[i];
    case COHORT_UINT32: return ((const uint32_t *)buf)[i];
    case COHORT_INT64: return (double)((const int64_t *)buf)[i];
    case COHORT_UINT64: return (double)((const uint64_t *)buf)[i];
    case COHORT_FLOAT16: return half_to_double(((const uint16_t *)buf)[i]);
    case COHORT_BFLOAT16: return bf16_to_double(((const uint16_t *)buf)[i]);
    case COHORT_FLOAT32: return ((const float *)buf)[i];
    case COHORT_FLOAT64: return ((const double *)buf)[i];
    }
    return 0;
}

static inline void put(void *buf, size_t i, cohort_dtype_t t, double v)
{
    switch (t) {
    case COHORT_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case COHORT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case COHORT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case COHORT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case COHORT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case COHORT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case COHORT_FLOAT16: ((uint16_t *)buf)[i] = double_to_half(v); break;
    case COHORT_BFLOAT16: ((uint16_t *)buf)[i] = double_to_bf16(v); break;
    case COHORT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COHORT_FLOAT64: ((double *)buf)[i] = v; break;
    }
}

static inline int is_signed(cohort_dtype_t t)
{
    return t != COHORT_UINT8 && t != COHORT_UINT32 && t != COHORT_UINT64;
}

/* Inputs chosen so every reduction is exact in every dtype: values in [-4, 4] (unsigned: [0, 8]),
 * for PROD only 1 and 2 (and -1 for signed) on at most a few ranks. */
static inline double input(int r, size_t i, cohort_dtype_t t, cohort_op_t op, int salt)
{
    unsigned h = (unsigned)(r * 7919 + (int)(i % 100003) * 131 + salt * 17) % 9u;
    if (op == COHORT_PROD) {
        if ((i + (size_t)r) % 3 != 0) return 1;
        return (h % 2) ? 2 : (is_signed(t) ? -1 : 1);
    }
    return is_signed(t) ? (double)h - 4 : (double)h;
}

static inline double ref_reduce_n(int nranks, size_t i, cohort_dtype_t t, cohort_op_t op, int salt,
                           int block_off)
{
    double acc = input(0, i + (size_t)block_off, t, op, salt);
    for (int r = 1; r < nranks; r++) {
        double v = input(r, i + (size_t)block_off, t, op, salt);
        switch (op) {
        case COHORT_SUM: case COHORT_AVG: acc += v; break;
        case COHORT_PROD: acc *= v; break;
        case COHORT_MIN: acc = v < acc ? v : acc; break;
        case COHORT_MAX: acc = v > acc ? v : acc; break;
        }
    }
    if (op == COHORT_AVG) {
        if (t == COHORT_FLOAT16 || t == COHORT_BFLOAT16 || t == COHORT_FLOAT32 ||
            t == COHORT_FLOAT64)
            acc = acc / nranks;
        else
            acc = trunc(acc / nranks);
    }
    return acc;
}

static inline int close_enough(double got, double want, cohort_dtype_t t)
{
    if (got == want) return 1;
    double tol = t == COHORT_BFLOAT16 ? 1e-2 : t == COHORT_FLOAT16 ? 1e-3
               : t == COHORT_FLOAT32 ? 1e-6 : t == COHORT_FLOAT64 ? 1e-12 : 0;
    return fabs(got - want) <= tol * fabs(want) + tol;
}

/* One check: counted in the program's passed/failed, the first 20 failures printed with the
 * program's rank. */
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (cond) passed++;                                                                  \
        else {                                                                               \
            failed++;                                                                        \
            if (failed <= 20) {                                                              \
                fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__);         \
                fprintf(stderr, __VA_ARGS__);                                                \
                fprintf(stderr, "\n");                                                       \
            }                                                                                \
        }                                                                                    \
    } while (0)

#endif
