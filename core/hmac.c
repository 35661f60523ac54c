/* SPDX-License-Identifier: BSD-3-Clause */
/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104).
 *
 * All arithmetic is on uint32_t / uint64_t; bytes are widened to uint32_t before shifting so no
 * shift ever touches the sign bit of a promoted int. */
#include "core/hmac.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

static uint32_t load_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void sha256_block(uint32_t h[8], const unsigned char block[64])
{
    uint32_t w[64], v[8];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    memcpy(v, h, sizeof v);
    for (int t = 0; t < 64; t++) {
        uint32_t a = v[0], e = v[4];
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & v[5]) ^ (~e & v[6]);
        uint32_t t1 = v[7] + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]);
        memmove(v + 1, v, 7 * sizeof v[0]);   /* h=g, g=f, ..., b=a */
        v[4] += t1;                           /* e = d + t1 (d moved into slot 4) */
        v[0] = t1 + S0 + maj;
    }
    for (int i = 0; i < 8; i++)
        h[i] += v[i];
}

void cohort_sha256_init(cohort_sha256_t *s)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->used = 0;
}

void cohort_sha256_update(cohort_sha256_t *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->len += (uint64_t)len;
    while (len > 0) {
        if (s->used == 0 && len >= 64) {      /* whole blocks straight from the input */
            sha256_block(s->h, p);
            p += 64;
            len -= 64;
            continue;
        }
        size_t n = 64 - s->used < len ? 64 - s->used : len;
        memcpy(s->buf + s->used, p, n);
        s->used += n;
        p += n;
        len -= n;
        if (s->used == 64) {
            sha256_block(s->h, s->buf);
            s->used = 0;
        }
    }
}

void cohort_sha256_final(cohort_sha256_t *s, unsigned char out[32])
{
    uint64_t bits = s->len * 8u;
    s->buf[s->used++] = 0x80;
    if (s->used > 56) {
        memset(s->buf + s->used, 0, 64 - s->used);
        sha256_block(s->h, s->buf);
        s->used = 0;
    }
    memset(s->buf + s->used, 0, 56 - s->used);
    store_be32(s->buf + 56, (uint32_t)(bits >> 32));
    store_be32(s->buf + 60, (uint32_t)bits);
    sha256_block(s->h, s->buf);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->h[i]);
    memset(s, 0, sizeof *s);                  /* no key material left behind */
}

void cohort_sha256(const void *data, size_t len, unsigned char out[32])
{
    cohort_sha256_t s;
    cohort_sha256_init(&s);
    cohort_sha256_update(&s, data, len);
    cohort_sha256_final(&s, out);
}

void cohort_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        unsigned char out[32])
{
    unsigned char k[64] = {0}, pad[64], inner[32];
    cohort_sha256_t s;

    if (keylen > sizeof k)
        cohort_sha256(key, keylen, k);        /* long keys are hashed first */
    else if (keylen > 0)
        memcpy(k, key, keylen);

    for (int i = 0; i < 64; i++)
        pad[i] = (unsigned char)(k[i] ^ 0x36);
    cohort_sha256_init(&s);
    cohort_sha256_update(&s, pad, sizeof pad);
    cohort_sha256_update(&s, data, len);
    cohort_sha256_final(&s, inner);

    for (int i = 0; i < 64; i++)
        pad[i] = (unsigned char)(k[i] ^ 0x5c);
    cohort_sha256_init(&s);
    cohort_sha256_update(&s, pad, sizeof pad);
    cohort_sha256_update(&s, inner, sizeof inner);
    cohort_sha256_final(&s, out);

    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
}

int cohort_digest_equal(const unsigned char *a, const unsigned char *b, size_t len)
{
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}
