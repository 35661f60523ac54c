/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): authentication helpers. The MACs
 * themselves come from the core (host->auth); comparing one must not tell an attacker, by its
 * timing, how many leading bytes were right. */
#ifndef COHORT_KIT_AUTH_H
#define COHORT_KIT_AUTH_H

#include <stddef.h>

/* 1 when the n bytes at a and b are equal; the time taken does not depend on where they
 * differ. */
static inline int kit_ct_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

#endif /* COHORT_KIT_AUTH_H */
