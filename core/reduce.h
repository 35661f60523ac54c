/* SPDX-License-Identifier: BSD-3-Clause */
/* Reduction kernels. fp16/bf16 are reduced in float32 and rounded to nearest even. */
#ifndef COHORT_CORE_REDUCE_H
#define COHORT_CORE_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "cohort/cohort.h"

/* inout[i] = inout[i] OP in[i] for i < count. AVG accumulates like SUM (the caller divides once
 * at the end with cohort_reduce_finish). Buffers may not overlap unless equal. */
void cohort_reduce_local(void *inout, const void *in, size_t count, cohort_dtype_t dtype,
                         cohort_op_t op);
/* out[i] = a[i] OP b[i] (out may equal a or b). */
void cohort_reduce_local3(void *out, const void *a, const void *b, size_t count,
                          cohort_dtype_t dtype, cohort_op_t op);
/* For AVG: buf[i] /= nranks (integers: truncating division); no-op for other ops. */
void cohort_reduce_finish(void *buf, size_t count, cohort_dtype_t dtype, cohort_op_t op,
                          int nranks);

/* 0: fp16 reductions and conversions take the portable loops even where the CPU has F16C (the
 * tests compare the two paths); 1: F16C where the CPU has it (the default). */
void cohort_reduce_use_f16c(int on);

/* Half-precision conversions (round to nearest even; NaN stays NaN; overflow -> inf). */
float cohort_fp16_to_float(uint16_t h);
uint16_t cohort_float_to_fp16(float f);
float cohort_bf16_to_float(uint16_t b);
uint16_t cohort_float_to_bf16(float f);

/* Wire compression of float32 (wire: COHORT_FLOAT16 or COHORT_BFLOAT16; round to nearest
 * even): dst[i] = encode(src[i]); dst[i] = decode(src[i]); out[i] = own[i] + decode(src[i])
 * (out may equal own). */
void cohort_wire_encode(void *dst, const float *src, size_t n, cohort_dtype_t wire);
void cohort_wire_decode(float *dst, const void *src, size_t n, cohort_dtype_t wire);
void cohort_wire_decode_add(float *out, const float *own, const void *src, size_t n,
                            cohort_dtype_t wire);

#endif
