/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-bench's test data: the value every rank puts at every element (small integers that every
 * dtype holds exactly, so that results compare exactly), the buffers filled with it before the
 * checked call and the results checked element by element after it. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cohort/cohort.h"
#include "bench.h"

/* ------------------------------------------------------------------------------------------ */
/* Element access and test data                                                                */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (exp == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0) {
        if (!mant) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Values are small integers, so the conversions below are exact. */
static void put(void *buf, size_t i, cohort_dtype_t dt, double v)
{
    switch (dt) {
    case COHORT_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case COHORT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case COHORT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case COHORT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case COHORT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case COHORT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case COHORT_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case COHORT_BFLOAT16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case COHORT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COHORT_FLOAT64: ((double *)buf)[i] = v; break;
    }
}

static double get(const void *buf, size_t i, cohort_dtype_t dt)
{
    switch (dt) {
    case COHORT_INT8: return ((const int8_t *)buf)[i];
    case COHORT_UINT8: return ((const uint8_t *)buf)[i];
    case COHORT_INT32: return ((const int32_t *)buf)[i];
    case COHORT_UINT32: return ((const uint32_t *)buf)[i];
    case COHORT_INT64: return (double)((const int64_t *)buf)[i];
    case COHORT_UINT64: return (double)((const uint64_t *)buf)[i];
    case COHORT_FLOAT16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case COHORT_BFLOAT16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case COHORT_FLOAT32: return ((const float *)buf)[i];
    case COHORT_FLOAT64: return ((const double *)buf)[i];
    }
    return NAN;
}

/* Input of rank r at logical element i. Chosen so that every partial and final result is a
 * small integer that every dtype holds exactly (bf16: |x| <= 256, fp16: 2048, int8: 127):
 *  sum:  values in [0, m) (shifted to be centred on 0 for signed types), (m-1) * n <= limit;
 *  prod: 1, except one rank per element gives 2 and (signed types) one gives -1;
 *  avg:  a(i) on every rank plus n on one rank, so the sum n*(a+1) divides exactly;
 *  min, max and the non-reducing collectives: (37 r + 11 i + 13 seed) mod 97 (minus 48 for
 *  signed types), which also tells the source rank and position apart. */
valspec_t bench_valspec(int n, cohort_dtype_t dt, cohort_op_t op, int reducing, unsigned seed)
{
    valspec_t v;
    double limit;
    switch (dt) {
    case COHORT_INT8: limit = 127; break;
    case COHORT_UINT8: limit = 255; break;
    case COHORT_FLOAT16: limit = 2048; break;
    case COHORT_BFLOAT16: limit = 256; break;
    default: limit = 1 << 20; break;
    }
    v.n = n;
    v.dt = dt;
    v.op = op;
    v.reducing = reducing;
    v.is_signed = !(dt == COHORT_UINT8 || dt == COHORT_UINT32 || dt == COHORT_UINT64);
    v.seed = seed;
    v.m = (double)n > limit ? 1 : (uint64_t)(limit / n) + 1;
    if (v.m > 16)
        v.m = 16;
    return v;
}

static double val(const valspec_t *v, int r, size_t i)
{
    uint64_t ur = (uint64_t)r, ui = (uint64_t)i;
    if (!v->reducing || v->op == COHORT_MIN || v->op == COHORT_MAX) {
        double w = (double)((ur * 37 + (ui % 97) * 11 + v->seed * 13) % 97);
        return v->is_signed ? w - 48 : w;
    }
    switch (v->op) {
    case COHORT_SUM: {
        double b = (double)((ur * 5 + ui * 3 + v->seed) % v->m);
        return v->is_signed ? b - (double)((v->m - 1) / 2) : b;
    }
    case COHORT_PROD:
        if ((ui + v->seed) % (uint64_t)(v->n + 1) == ur)
            return 2;
        if (v->is_signed && (ui * 7 + v->seed + 1) % (uint64_t)(v->n + 2) == ur)
            return -1;
        return 1;
    case COHORT_AVG:
        if (v->m < 2)
            return 0;
        return (double)((ui * 3 + v->seed) % (v->m - 1)) +
               ((ui + v->seed) % (uint64_t)v->n == ur ? v->n : 0);
    default:
        return 0;
    }
}

/* Expected reduction over all ranks of logical element i. */
static double expect_reduced(const valspec_t *v, size_t i)
{
    double acc = val(v, 0, i);
    for (int r = 1; r < v->n; r++) {
        double x = val(v, r, i);
        switch (v->op) {
        case COHORT_SUM:
        case COHORT_AVG: acc += x; break;
        case COHORT_PROD: acc *= x; break;
        case COHORT_MIN: acc = x < acc ? x : acc; break;
        case COHORT_MAX: acc = x > acc ? x : acc; break;
        }
    }
    if (v->op == COHORT_AVG)
        acc = trunc(acc / v->n);
    return acc;
}

/* ------------------------------------------------------------------------------------------ */
/* Filling the buffers and checking the results                                                */

/* Sentinel for outputs: data the collective must overwrite. */
static void poison(void *buf, size_t count, size_t esize)
{
    memset(buf, 0xa5, count * esize);
}

void bench_fill(bench_t *b, const geom_t *g, const valspec_t *v, int inplace)
{
    cohort_dtype_t dt = v->dt;
    int me = b->rank;
    char *s = b->sendbuf, *r = b->recvbuf;
    switch (b->o.coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
        if (!inplace)
            poison(r, g->count, g->esize);
        for (size_t i = 0; i < g->count; i++)
            put(inplace ? r : s, i, dt, val(v, me, i));
        break;
    case C_BROADCAST:
        /* Non-roots start from their own (different) values. */
        for (size_t i = 0; i < g->count; i++)
            put(r, i, dt, val(v, me, i));
        break;
    case C_ALLGATHER:
        poison(r, g->recvcount, g->esize);
        for (size_t i = 0; i < g->count; i++) {
            if (inplace)
                put(r, (size_t)me * g->count + i, dt, val(v, me, i));
            else
                put(s, i, dt, val(v, me, i));
        }
        break;
    case C_REDUCE_SCATTER:
    case C_ALLTOALL:
        if (!inplace)
            poison(r, g->recvcount, g->esize);
        for (size_t i = 0; i < g->sendcount; i++)
            put(inplace ? r : s, i, dt, val(v, me, i));
        break;
    default:
        break;
    }
}

uint64_t bench_count_wrong(bench_t *b, const geom_t *g, const valspec_t *v, int inplace)
{
    cohort_dtype_t dt = v->dt;
    int me = b->rank, n = b->n;
    const char *r = b->recvbuf;
    uint64_t wrong = 0;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < g->count; i++)
            wrong += get(r, i, dt) != expect_reduced(v, i);
        break;
    case C_REDUCE:
        if (me == b->o.root)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, i, dt) != expect_reduced(v, i);
        break;
    case C_BROADCAST:
        for (size_t i = 0; i < g->count; i++)
            wrong += get(r, i, dt) != val(v, b->o.root, i);
        break;
    case C_ALLGATHER:
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, (size_t)k * g->count + i, dt) != val(v, k, i);
        break;
    case C_REDUCE_SCATTER: {
        const char *out = inplace ? r + (size_t)me * g->count * g->esize : r;
        for (size_t i = 0; i < g->count; i++)
            wrong += get(out, i, dt) != expect_reduced(v, (size_t)me * g->count + i);
        break;
    }
    case C_ALLTOALL:
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < g->count; i++)
                wrong += get(r, (size_t)k * g->count + i, dt) != val(v, k, (size_t)me * g->count + i);
        break;
    default:
        break;
    }
    return wrong;
}
