/* SPDX-License-Identifier: BSD-3-Clause */
/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), for authenticating handshakes. */
#ifndef COHORT_CORE_HMAC_H
#define COHORT_CORE_HMAC_H

#include <stddef.h>
#include <stdint.h>

typedef struct cohort_sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t used;
} cohort_sha256_t;

void cohort_sha256_init(cohort_sha256_t *s);
void cohort_sha256_update(cohort_sha256_t *s, const void *data, size_t len);
void cohort_sha256_final(cohort_sha256_t *s, unsigned char out[32]);
void cohort_sha256(const void *data, size_t len, unsigned char out[32]);
void cohort_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        unsigned char out[32]);
/* Constant-time comparison: 1 if equal. */
int cohort_digest_equal(const unsigned char *a, const unsigned char *b, size_t len);

#endif
