/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for the TCP transport's address blob and probe marker (transports/tcp/tcp_wire.h):
 * round trip, truncated and oversized blobs, candidate counts, versions and field checks; and its
 * handshake in the plugin kit's frame form (transports/common/kit_auth.h): a sealed hello, an
 * ack sealed to the hello it answers, each refused under another secret, with any byte changed,
 * or (the ack) against another hello; the kit's MAC over a list of parts. */
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cohort/plugin.h>
#include "core/hmac.h"
#include "transports/tcp/tcp_wire.h"

static tcp_addr_t sample(unsigned ncand)
{
    tcp_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = TCP_ADDR_MAGIC;
    a.version = TCP_PROTO_VERSION;
    a.ncand = (uint16_t)ncand;
    a.rank = 7;
    a.nranks = 4096;
    a.comm_id = 0x0123456789abcdefull;
    for (int i = 0; i < TCP_MAC_LEN; i++) a.job_hash[i] = (unsigned char)(0xa0 + i);
    for (int i = 0; i < TCP_NETNS_LEN; i++) a.netns[i] = (unsigned char)(0x30 + i);
    for (unsigned i = 0; i < ncand && i < TCP_ADDR_MAX_CANDS; i++) {
        tcp_cand_t *c = &a.cand[i];
        if (i % 2 == 0) {
            c->family = AF_INET;
            c->addr[0] = 10;
            c->addr[3] = (unsigned char)(i + 1);
            c->prefix_len = 24;
        } else {
            c->family = AF_INET6;
            c->addr[0] = 0xfd;
            c->addr[15] = (unsigned char)i;
            c->prefix_len = 64;
            c->scope_id = 3 + i;
        }
        c->port = (uint16_t)(40000 + i);
        c->flags = i == ncand - 1 ? TCP_CAND_LOOPBACK : 0;
        snprintf(c->ifname, sizeof c->ifname, "if%u", i);
    }
    return a;
}

START_TEST(addr_fits)
{
    ck_assert_uint_le(TCP_ADDR_MAX_SIZE, COHORT_ADDR_MAX);
    ck_assert_uint_eq(tcp_addr_size(1), 120);
    ck_assert_uint_eq(tcp_addr_size(TCP_ADDR_MAX_CANDS), TCP_ADDR_MAX_SIZE);
}
END_TEST

START_TEST(addr_round_trip)
{
    for (unsigned n = 1; n <= TCP_ADDR_MAX_CANDS; n++) {
        tcp_addr_t a = sample(n), b;
        unsigned char blob[COHORT_ADDR_MAX];
        size_t len = tcp_addr_encode(&a, blob, sizeof blob);
        ck_assert_uint_eq(len, tcp_addr_size(n));
        ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_OK);
        ck_assert_uint_eq(b.ncand, n);
        ck_assert_uint_eq(b.rank, 7);
        ck_assert_uint_eq(b.nranks, 4096);
        ck_assert(b.comm_id == a.comm_id);
        ck_assert(!memcmp(b.job_hash, a.job_hash, TCP_MAC_LEN));
        ck_assert(!memcmp(b.netns, a.netns, TCP_NETNS_LEN));
        for (unsigned i = 0; i < n; i++) {
            ck_assert_uint_eq(b.cand[i].family, a.cand[i].family);
            ck_assert_uint_eq(b.cand[i].port, a.cand[i].port);
            ck_assert_uint_eq(b.cand[i].prefix_len, a.cand[i].prefix_len);
            ck_assert_uint_eq(b.cand[i].flags, a.cand[i].flags);
            ck_assert_uint_eq(b.cand[i].scope_id, a.cand[i].scope_id);
            ck_assert(!memcmp(b.cand[i].addr, a.cand[i].addr, 16));
            ck_assert_str_eq(b.cand[i].ifname, a.cand[i].ifname);
        }
    }
}
END_TEST

START_TEST(addr_layout)
{
    /* The documented offsets: little-endian, no padding. */
    tcp_addr_t a = sample(2);
    unsigned char b[COHORT_ADDR_MAX];
    ck_assert_uint_eq(tcp_addr_encode(&a, b, sizeof b), 168);
    ck_assert(!memcmp(b, "CTAD", 4));
    ck_assert_uint_eq(b[4], TCP_PROTO_VERSION);
    ck_assert_uint_eq(b[6], 2);
    ck_assert_uint_eq(b[8], 7);
    ck_assert_uint_eq(b[16], 0xef);
    ck_assert_uint_eq(b[24], 0xa0);
    ck_assert_uint_eq(b[56], 0x30);
    ck_assert_uint_eq(kit_get_le16(b + 72), AF_INET);
    ck_assert_uint_eq(kit_get_le16(b + 74), 40000);
    ck_assert_uint_eq(b[76], 24);
    ck_assert_uint_eq(b[84], 10);
    ck_assert_str_eq((const char *)b + 100, "if0");
    ck_assert_uint_eq(kit_get_le16(b + 120), AF_INET6);
    ck_assert_uint_eq(b[125], TCP_CAND_LOOPBACK);
    ck_assert_uint_eq(kit_get_le32(b + 128), 4);
}
END_TEST

START_TEST(addr_long_ifname)
{
    /* A 16-character name fills its field without a NUL; decoding terminates it. */
    tcp_addr_t a = sample(1), b;
    memcpy(a.cand[0].ifname, "abcdefghijklmnop", 17);
    unsigned char blob[COHORT_ADDR_MAX];
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_OK);
    ck_assert_str_eq(b.cand[0].ifname, "abcdefghijklmnop");
    /* and garbage after it in the field never reaches the reader */
    memset(blob + tcp_addr_size(0) + 28, 'x', TCP_IFNAME_LEN);
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_OK);
    ck_assert_uint_eq(strlen(b.cand[0].ifname), TCP_IFNAME_LEN);
}
END_TEST

START_TEST(addr_truncated)
{
    tcp_addr_t a = sample(3), b;
    unsigned char blob[COHORT_ADDR_MAX];
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    for (size_t l = 0; l < TCP_ADDR_HDR_SIZE; l++)
        ck_assert_int_eq(tcp_addr_decode(blob, l, &b), TCP_ADDR_ESHORT);
    for (size_t l = TCP_ADDR_HDR_SIZE; l < len; l++)
        ck_assert_int_eq(tcp_addr_decode(blob, l, &b), TCP_ADDR_ELENGTH);
    ck_assert_int_eq(tcp_addr_decode(NULL, len, &b), TCP_ADDR_ESHORT);
}
END_TEST

START_TEST(addr_oversized)
{
    tcp_addr_t a = sample(3), b;
    unsigned char blob[COHORT_ADDR_MAX];
    memset(blob, 0, sizeof blob);
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    ck_assert_int_eq(tcp_addr_decode(blob, len + 1, &b), TCP_ADDR_ELENGTH);
    ck_assert_int_eq(tcp_addr_decode(blob, len + TCP_ADDR_CAND_SIZE, &b), TCP_ADDR_ELENGTH);
    ck_assert_int_eq(tcp_addr_decode(blob, COHORT_ADDR_MAX, &b), TCP_ADDR_ELENGTH);
}
END_TEST

START_TEST(addr_counts)
{
    tcp_addr_t a = sample(TCP_ADDR_MAX_CANDS), b;
    unsigned char blob[COHORT_ADDR_MAX];
    /* the encoder refuses 0 and more than 8 candidates, and a buffer that is too small */
    a.ncand = 0;
    ck_assert_uint_eq(tcp_addr_encode(&a, blob, sizeof blob), 0);
    a.ncand = TCP_ADDR_MAX_CANDS + 1;
    ck_assert_uint_eq(tcp_addr_encode(&a, blob, sizeof blob), 0);
    a.ncand = TCP_ADDR_MAX_CANDS;
    ck_assert_uint_eq(tcp_addr_encode(&a, blob, TCP_ADDR_MAX_SIZE - 1), 0);
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    ck_assert_uint_eq(len, TCP_ADDR_MAX_SIZE);
    /* the decoder refuses a count of 0 or 9, whatever the length */
    kit_put_le16(blob + 6, 0);
    ck_assert_int_eq(tcp_addr_decode(blob, TCP_ADDR_HDR_SIZE, &b), TCP_ADDR_ECOUNT);
    kit_put_le16(blob + 6, TCP_ADDR_MAX_CANDS + 1);
    ck_assert_int_eq(tcp_addr_decode(blob, tcp_addr_size(TCP_ADDR_MAX_CANDS + 1), &b),
                     TCP_ADDR_ECOUNT);
    kit_put_le16(blob + 6, 0xffff);
    ck_assert_int_eq(tcp_addr_decode(blob, sizeof blob, &b), TCP_ADDR_ECOUNT);
}
END_TEST

START_TEST(addr_version_magic)
{
    tcp_addr_t a = sample(1), b;
    unsigned char blob[COHORT_ADDR_MAX];
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    kit_put_le16(blob + 4, 1);   /* a version-1 reader's blob is refused, not misread */
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EVERSION);
    kit_put_le16(blob + 4, TCP_PROTO_VERSION + 1);
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EVERSION);
    kit_put_le16(blob + 4, TCP_PROTO_VERSION);
    blob[0] = 'X';
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EMAGIC);
    /* the 80-byte version-1 blob is refused too */
    unsigned char v1[80];
    memset(v1, 0, sizeof v1);
    memcpy(v1, "CTAD", 4);
    kit_put_le16(v1 + 4, 1);
    ck_assert_int_eq(tcp_addr_decode(v1, sizeof v1, &b), TCP_ADDR_EVERSION);
    ck_assert_str_ne(tcp_addr_strerror(TCP_ADDR_EVERSION), "invalid");
}
END_TEST

START_TEST(addr_fields)
{
    tcp_addr_t a = sample(2), b;
    unsigned char blob[COHORT_ADDR_MAX];
    size_t len = tcp_addr_encode(&a, blob, sizeof blob);
    unsigned char *c1 = blob + tcp_addr_size(1);
    kit_put_le16(c1, 99);   /* unknown family */
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EFAMILY);
    kit_put_le16(c1, AF_INET6);
    kit_put_le16(c1 + 2, 0);   /* port 0 */
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EPORT);
    kit_put_le16(c1 + 2, 1);
    c1[4] = 129;   /* prefix too long for IPv6 */
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EPREFIX);
    c1[4] = 128;
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_OK);
    blob[TCP_ADDR_HDR_SIZE + 4] = 33;   /* prefix too long for IPv4 */
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_EPREFIX);
    blob[TCP_ADDR_HDR_SIZE + 4] = 32;
    /* bytes 4..15 of an IPv4 address are not carried over */
    memset(blob + TCP_ADDR_HDR_SIZE + 16, 0x55, 12);
    ck_assert_int_eq(tcp_addr_decode(blob, len, &b), TCP_ADDR_OK);
    for (int i = 4; i < 16; i++) ck_assert_uint_eq(b.cand[0].addr[i], 0);
}
END_TEST

START_TEST(probe_marker)
{
    unsigned char m[TCP_PROBE_SIZE];
    tcp_probe_encode(m);
    ck_assert(!memcmp(m, "CTPR", 4));
    ck_assert_uint_eq(kit_get_le32(m + 4), TCP_PROTO_VERSION);
    /* never mistaken for a hello or an address */
    ck_assert_uint_ne(kit_get_le32(m), TCP_HELLO_MAGIC);
    ck_assert_uint_ne(kit_get_le32(m), TCP_ADDR_MAGIC);
    ck_assert_uint_lt(TCP_PROBE_SIZE, TCP_HELLO_SIZE);
}
END_TEST

/* ---- the handshake's frames --------------------------------------------------------------- */

/* Two hosts whose auth is HMAC-SHA256 under two different secrets (only auth is used). */
static void auth_a(const void *data, size_t len, unsigned char out[32])
{
    cohort_hmac_sha256("secret-a", 8, data, len, out);
}

static void auth_b(const void *data, size_t len, unsigned char out[32])
{
    cohort_hmac_sha256("secret-b", 8, data, len, out);
}

static const cohort_host_v1_t host_a = { .size = sizeof(cohort_host_v1_t), .auth = auth_a };
static const cohort_host_v1_t host_b = { .size = sizeof(cohort_host_v1_t), .auth = auth_b };

static void sample_hello(unsigned char b[TCP_HELLO_SIZE], unsigned char nonce_seed)
{
    tcp_hello_t h;
    memset(&h, 0, sizeof h);
    h.magic = TCP_HELLO_MAGIC;
    h.version = TCP_PROTO_VERSION;
    snprintf(h.job_id, sizeof h.job_id, "job-1234");
    h.comm_id = 7;
    h.src = 1;
    h.dst = 2;
    h.nranks = 4;
    h.sock_idx = 1;
    h.nsocks = 2;
    for (int i = 0; i < TCP_NONCE_LEN; i++) h.nonce[i] = (unsigned char)(nonce_seed + i);
    tcp_hello_encode(&h, b);
    tcp_hello_seal(&host_a, b);
}

START_TEST(hello_sealed)
{
    unsigned char b[TCP_HELLO_SIZE];
    sample_hello(b, 0x10);
    ck_assert(!memcmp(b, "CTCH", 4));
    ck_assert(tcp_hello_valid(&host_a, b));
    /* the MAC is the kit's: over the fields before it, which start with the magic */
    unsigned char mac[TCP_MAC_LEN];
    auth_a(b, TCP_HELLO_MAC_OFF, mac);
    ck_assert(!memcmp(mac, b + TCP_HELLO_MAC_OFF, TCP_MAC_LEN));
    /* another secret */
    ck_assert(!tcp_hello_valid(&host_b, b));
    /* any byte changed, fields or MAC */
    for (int i = 0; i < TCP_HELLO_SIZE; i++) {
        b[i] ^= 0x01;
        ck_assert_msg(!tcp_hello_valid(&host_a, b), "byte %d changed and still valid", i);
        b[i] ^= 0x01;
    }
    ck_assert(tcp_hello_valid(&host_a, b));
}
END_TEST

START_TEST(ack_sealed_to_hello)
{
    unsigned char hello[TCP_HELLO_SIZE], other[TCP_HELLO_SIZE], ack[TCP_ACK_SIZE];
    sample_hello(hello, 0x10);
    sample_hello(other, 0x20);   /* the same hello with another nonce */
    tcp_ack_seal(&host_a, ack, hello, 2, 1);
    ck_assert(!memcmp(ack, "CTCK", 4));
    ck_assert_uint_eq(kit_get_le32(ack + 4), TCP_PROTO_VERSION);
    ck_assert_uint_eq(kit_get_le32(ack + 8), 2);
    ck_assert_uint_eq(kit_get_le32(ack + 12), 1);
    ck_assert(tcp_ack_valid(&host_a, ack, hello));
    ck_assert_ptr_null(tcp_ack_check(ack, tcp_ack_valid(&host_a, ack, hello), 2, 1));
    /* the MAC covers the ack's fields, then every byte of the hello it answers */
    unsigned char in[TCP_ACK_MAC_OFF + TCP_HELLO_SIZE], mac[TCP_MAC_LEN];
    memcpy(in, ack, TCP_ACK_MAC_OFF);
    memcpy(in + TCP_ACK_MAC_OFF, hello, TCP_HELLO_SIZE);
    auth_a(in, sizeof in, mac);
    ck_assert(!memcmp(mac, ack + TCP_ACK_MAC_OFF, TCP_MAC_LEN));
    /* bound to another hello (another nonce): refused */
    ck_assert(!tcp_ack_valid(&host_a, ack, other));
    const char *why = tcp_ack_check(ack, tcp_ack_valid(&host_a, ack, other), 2, 1);
    ck_assert_ptr_nonnull(why);
    ck_assert_ptr_nonnull(strstr(why, "HMAC does not verify"));
    /* any byte of the hello changed */
    for (int i = 0; i < TCP_HELLO_SIZE; i++) {
        hello[i] ^= 0x80;
        ck_assert_msg(!tcp_ack_valid(&host_a, ack, hello), "hello byte %d changed, ack valid", i);
        hello[i] ^= 0x80;
    }
    /* another secret */
    ck_assert(!tcp_ack_valid(&host_b, ack, hello));
    unsigned char forged[TCP_ACK_SIZE];
    tcp_ack_seal(&host_b, forged, hello, 2, 1);
    ck_assert(!tcp_ack_valid(&host_a, forged, hello));
    /* any byte of the ack changed */
    for (int i = 0; i < TCP_ACK_SIZE; i++) {
        ack[i] ^= 0x01;
        ck_assert_msg(!tcp_ack_valid(&host_a, ack, hello), "ack byte %d changed, still valid", i);
        ack[i] ^= 0x01;
    }
    ck_assert(tcp_ack_valid(&host_a, ack, hello));
    /* an ack sealed on its own (not to the hello), or the hello's own MAC, does not pass */
    unsigned char loose[TCP_ACK_SIZE];
    memcpy(loose, ack, TCP_ACK_SIZE);
    kit_frame_seal(&host_a, loose, TCP_ACK_SIZE);
    ck_assert(!tcp_ack_valid(&host_a, loose, hello));
    memcpy(loose + TCP_ACK_MAC_OFF, hello + TCP_HELLO_MAC_OFF, TCP_MAC_LEN);
    ck_assert(!tcp_ack_valid(&host_a, loose, hello));
    /* the other refusals keep their order and words */
    ck_assert_str_eq(tcp_ack_check(ack, 1, 3, 1), "it answers for another rank or socket");
    ck_assert_str_eq(tcp_ack_check(ack, 1, 2, 0), "it answers for another rank or socket");
    ck_assert_str_eq(tcp_ack_check(hello, 1, 2, 1), "not a cohort tcp acknowledgement");
    kit_put_le32(ack + 4, TCP_PROTO_VERSION - 1);
    ck_assert_str_eq(tcp_ack_check(ack, 1, 2, 1), "protocol version differs");
}
END_TEST

START_TEST(frames_domain_separated)
{
    /* one key for every MAC: each kind's input starts with bytes of its own (the frames' magics,
     * the labels of the address blob's hashes), and no frame's magic is another's */
    unsigned char hello[TCP_HELLO_SIZE], ack[TCP_ACK_SIZE];
    sample_hello(hello, 0x10);
    tcp_ack_seal(&host_a, ack, hello, 2, 1);
    const unsigned char *lead[] = { hello, ack, (const unsigned char *)"CTAD",
                                    (const unsigned char *)"CTPR",
                                    (const unsigned char *)TCP_LABEL_JOB };
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            ck_assert_msg(memcmp(lead[i], lead[j], 4) != 0, "kinds %d and %d share a magic", i, j);
    ck_assert(!memcmp(TCP_LABEL_NETNS, TCP_LABEL_JOB, 4));   /* both labels: they differ later */
    ck_assert(memcmp(TCP_LABEL_JOB, TCP_LABEL_NETNS, sizeof TCP_LABEL_JOB) != 0);
}
END_TEST

START_TEST(kit_parts)
{
    /* a list of parts is MACed as their concatenation */
    const char *msg = "cohort-test-label and some bytes";
    unsigned char one[KIT_MAC_LEN], parts_mac[KIT_MAC_LEN];
    auth_a(msg, strlen(msg), one);
    const kit_part_t parts[3] = { { msg, 10 }, { msg + 10, 0 }, { msg + 10, strlen(msg) - 10 } };
    ck_assert_int_eq(kit_mac_parts(&host_a, parts, 3, parts_mac), 0);
    ck_assert(!memcmp(one, parts_mac, KIT_MAC_LEN));
    ck_assert(kit_mac_parts_valid(&host_a, parts, 3, one));
    ck_assert(!kit_mac_parts_valid(&host_b, parts, 3, one));
    one[31] ^= 1;
    ck_assert(!kit_mac_parts_valid(&host_a, parts, 3, one));
    /* too long for one input: refused, never a MAC that verifies */
    static unsigned char big[KIT_MAC_INPUT_MAX + 1];
    const kit_part_t huge[2] = { { big, KIT_MAC_INPUT_MAX }, { big, 1 } };
    unsigned char zero[KIT_MAC_LEN] = { 0 };
    ck_assert_int_eq(kit_mac_parts(&host_a, huge, 2, parts_mac), -1);
    ck_assert(!memcmp(parts_mac, zero, KIT_MAC_LEN));
    ck_assert(!kit_mac_parts_valid(&host_a, huge, 2, zero));
    const kit_part_t fits[1] = { { big, KIT_MAC_INPUT_MAX } };
    ck_assert_int_eq(kit_mac_parts(&host_a, fits, 1, parts_mac), 0);
    /* kit_frame_valid_to refuses a frame too short to hold a MAC */
    ck_assert(!kit_frame_valid_to(&host_a, big, KIT_MAC_LEN - 1, big, 4));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tcp_wire");
    TCase *tc = tcase_create("address");
    tcase_add_test(tc, addr_fits);
    tcase_add_test(tc, addr_round_trip);
    tcase_add_test(tc, addr_layout);
    tcase_add_test(tc, addr_long_ifname);
    tcase_add_test(tc, addr_truncated);
    tcase_add_test(tc, addr_oversized);
    tcase_add_test(tc, addr_counts);
    tcase_add_test(tc, addr_version_magic);
    tcase_add_test(tc, addr_fields);
    tcase_add_test(tc, probe_marker);
    suite_add_tcase(s, tc);
    TCase *hs = tcase_create("handshake");
    tcase_add_test(hs, hello_sealed);
    tcase_add_test(hs, ack_sealed_to_hello);
    tcase_add_test(hs, frames_domain_separated);
    tcase_add_test(hs, kit_parts);
    suite_add_tcase(s, hs);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
