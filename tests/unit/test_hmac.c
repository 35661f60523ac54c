/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for core/hmac.c: FIPS 180-4 SHA-256 examples and RFC 4231 HMAC-SHA256 vectors. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hmac.h"

static void hex(const unsigned char d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha(const void *msg, size_t len, const char *want)
{
    unsigned char d[32];
    char h[65];
    cohort_sha256(msg, len, d);
    hex(d, h);
    ck_assert_str_eq(h, want);
}

static void check_hmac(const void *key, size_t keylen, const void *msg, size_t len,
                       const char *want)
{
    unsigned char d[32];
    char h[65];
    cohort_hmac_sha256(key, keylen, msg, len, d);
    hex(d, h);
    ck_assert_str_eq(h, want);
}

/* ---- SHA-256 (FIPS 180-4 / NIST examples) --------------------------------------------------- */

START_TEST(sha_abc)
{
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(sha_empty)
{
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(sha_448bit)
{
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ck_assert_uint_eq(strlen(m) * 8, 448);
    check_sha(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(sha_896bit)
{
    const char *m = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                    "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    ck_assert_uint_eq(strlen(m) * 8, 896);
    check_sha(m, strlen(m), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}
END_TEST

START_TEST(sha_million_a)
{
    /* Fed in uneven pieces to exercise the buffering path. */
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    cohort_sha256_t s;
    cohort_sha256_init(&s);
    size_t left = 1000000;
    while (left > 0) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        cohort_sha256_update(&s, chunk, n);
        left -= n;
    }
    unsigned char d[32];
    char h[65];
    cohort_sha256_final(&s, d);
    hex(d, h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* Every split of a 200-byte message into two updates gives the one-shot digest; lengths around
 * the 55/56/64-byte padding boundaries are covered. */
START_TEST(sha_incremental_splits)
{
    unsigned char msg[200], ref[32], got[32];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (unsigned char)(i * 7 + 3);
    for (size_t len = 0; len <= sizeof msg; len++) {
        cohort_sha256(msg, len, ref);
        for (size_t cut = 0; cut <= len; cut += 13) {
            cohort_sha256_t s;
            cohort_sha256_init(&s);
            cohort_sha256_update(&s, msg, cut);
            cohort_sha256_update(&s, msg + cut, len - cut);
            cohort_sha256_final(&s, got);
            ck_assert_mem_eq(got, ref, 32);
        }
    }
}
END_TEST

/* ---- HMAC-SHA256 (RFC 4231) ----------------------------------------------------------------- */

START_TEST(hmac_rfc4231_1)
{
    unsigned char key[20];
    memset(key, 0x0b, sizeof key);
    check_hmac(key, sizeof key, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}
END_TEST

START_TEST(hmac_rfc4231_2)
{
    const char *data = "what do ya want for nothing?";
    check_hmac("Jefe", 4, data, strlen(data),
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}
END_TEST

START_TEST(hmac_rfc4231_3)
{
    unsigned char key[20], data[50];
    memset(key, 0xaa, sizeof key);
    memset(data, 0xdd, sizeof data);
    check_hmac(key, sizeof key, data, sizeof data,
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}
END_TEST

START_TEST(hmac_rfc4231_4)
{
    unsigned char key[25], data[50];
    for (int i = 0; i < 25; i++)
        key[i] = (unsigned char)(i + 1);
    memset(data, 0xcd, sizeof data);
    check_hmac(key, sizeof key, data, sizeof data,
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}
END_TEST

START_TEST(hmac_rfc4231_6)
{
    unsigned char key[131];
    const char *data = "Test Using Larger Than Block-Size Key - Hash Key First";
    memset(key, 0xaa, sizeof key);
    check_hmac(key, sizeof key, data, strlen(data),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

START_TEST(hmac_rfc4231_7)
{
    unsigned char key[131];
    const char *data = "This is a test using a larger than block-size key and a larger than "
                       "block-size data. The key needs to be hashed before being used by the "
                       "HMAC algorithm.";
    memset(key, 0xaa, sizeof key);
    check_hmac(key, sizeof key, data, strlen(data),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}
END_TEST

/* Edge cases not in RFC 4231; expected values computed with Python's hmac/hashlib. */
START_TEST(hmac_edges)
{
    check_hmac(NULL, 0, NULL, 0,
               "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    unsigned char key[64], data[200];
    memset(key, 'k', sizeof key);     /* exactly one block: used as is, not hashed */
    memset(data, 'x', sizeof data);
    check_hmac(key, sizeof key, data, sizeof data,
               "3c469482eb841790ea999241b8c6238f7a2df12b5bf79eb6d7ab592729ed9954");
}
END_TEST

START_TEST(digest_equal)
{
    unsigned char a[32], b[32];
    memset(a, 0x5a, sizeof a);
    memcpy(b, a, sizeof b);
    ck_assert_int_eq(cohort_digest_equal(a, b, 32), 1);
    ck_assert_int_eq(cohort_digest_equal(a, b, 0), 1);
    for (int i = 0; i < 32; i++) {
        b[i] ^= 0x80;
        ck_assert_int_eq(cohort_digest_equal(a, b, 32), 0);
        b[i] ^= 0x80;
    }
    b[31] ^= 1;
    ck_assert_int_eq(cohort_digest_equal(a, b, 31), 1);
}
END_TEST

static Suite *hmac_suite(void)
{
    Suite *s = suite_create("hmac");
    TCase *sha = tcase_create("sha256");
    tcase_add_test(sha, sha_abc);
    tcase_add_test(sha, sha_empty);
    tcase_add_test(sha, sha_448bit);
    tcase_add_test(sha, sha_896bit);
    tcase_add_test(sha, sha_million_a);
    tcase_add_test(sha, sha_incremental_splits);
    tcase_set_timeout(sha, 30);
    suite_add_tcase(s, sha);

    TCase *mac = tcase_create("hmac");
    tcase_add_test(mac, hmac_rfc4231_1);
    tcase_add_test(mac, hmac_rfc4231_2);
    tcase_add_test(mac, hmac_rfc4231_3);
    tcase_add_test(mac, hmac_rfc4231_4);
    tcase_add_test(mac, hmac_rfc4231_6);
    tcase_add_test(mac, hmac_rfc4231_7);
    tcase_add_test(mac, hmac_edges);
    tcase_add_test(mac, digest_equal);
    suite_add_tcase(s, mac);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hmac_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
