/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: the TCP transport's wire format and the checks of what peers send
 * (transports/tcp/tcp_wire.h): the bytes a peer or a stranger sends to a listening rank, and
 * the message headers an authenticated peer sends. data[0] % 6 picks what the rest is:
 *   0  a handshake hello (TCP_HELLO_SIZE bytes; shorter input is zero padded, as the acceptor's
 *      buffer is, longer is cut): decode, re-encode, the job hash's MAC input
 *   1  an address blob of exactly the remaining length (what a peer publishes): decode; when
 *      valid, encode and decode again
 *   2  a message header against the receive posted for it: {expected tag u64, receive size u64,
 *      nsocks u8, message length u8} then the header {tag u64, length u64} (tcp_msg_check,
 *      and the striping of its payload over the sockets, tcp_msg_nslices / tcp_msg_slice)
 *   3  an ack (TCP_ACK_SIZE bytes) and the reachability probe marker
 *   4  the acceptor's checks of a hello: {flags u8 (bit 0: its MAC verifies, bit 1: it carries
 *      this job's id), nranks - 1 u16, rank u16 (mod nranks), comm id u64} then the hello
 *      (tcp_hello_check_id, then tcp_hello_check_peer where the MAC verifies)
 *   5  the connector's check of an ack: {peer u8, socket u8, the expected MAC[32]} then the ack
 *      (tcp_ack_check, told that the MAC verifies when the ack carries the expected one)
 * Oracles: decoding then encoding gives the same bytes back (hello, header), a valid blob survives
 * a round trip unchanged, decoded names are NUL-terminated and counts are in range, every
 * refusal has a reason; each check agrees with a reference reading written out here (the same
 * verdict, the first failing field), a hello or header it accepts has every field within the
 * limits it promises (ranks, socket index and count, length within the receive), the slices of
 * a payload are contiguous, balanced and cover exactly its length, and the reasons are printable
 * text (nothing of the peer's bytes reaches the log raw) that fits the buffer given, however
 * short. ASan sees every read and write, since each buffer is a copy of exactly its size. */
#include "fuzz.h"

#include <sys/socket.h>

#include "transports/tcp/tcp_wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

/* A malloc'd copy of data[1..] of exactly `want` bytes: cut, or zero padded. */
static unsigned char *fixed_copy(const uint8_t *data, size_t size, size_t want)
{
    unsigned char *b = calloc(1, want);
    if (!b) abort();
    size_t n = size - 1 < want ? size - 1 : want;
    if (n) memcpy(b, data + 1, n);
    return b;
}

static void hello(const uint8_t *data, size_t size)
{
    unsigned char *b = fixed_copy(data, size, TCP_HELLO_SIZE);
    tcp_hello_t h;
    tcp_hello_decode(b, &h);
    FUZZ_CHECK(h.magic == (uint32_t)(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24),
               "magic 0x%08x is not the first four bytes little-endian", (unsigned)h.magic);
    unsigned char again[TCP_HELLO_SIZE];
    tcp_hello_encode(&h, again);
    FUZZ_CHECK(memcmp(again, b, TCP_HELLO_SIZE) == 0, "hello decode + encode changed the bytes");
    unsigned char jin[TCP_JOB_MAC_INPUT];
    tcp_job_mac_input(h.job_id, jin);
    FUZZ_CHECK(memcmp(jin + sizeof TCP_LABEL_JOB, b + 8, TCP_JOBID_LEN) == 0,
               "the job MAC input does not hold the hello's job id");
    free(b);
}

static void check_cands(const tcp_addr_t *a)
{
    FUZZ_CHECK(a->ncand >= 1 && a->ncand <= TCP_ADDR_MAX_CANDS, "ncand %u accepted",
               (unsigned)a->ncand);
    for (unsigned i = 0; i < a->ncand; i++) {
        const tcp_cand_t *c = &a->cand[i];
        FUZZ_CHECK(strnlen(c->ifname, sizeof c->ifname) <= TCP_IFNAME_LEN,
                   "candidate %u's interface name is not NUL-terminated", i);
        FUZZ_CHECK(c->family == AF_INET || c->family == AF_INET6, "family %u accepted",
                   (unsigned)c->family);
        FUZZ_CHECK(c->port != 0, "port 0 accepted");
        FUZZ_CHECK(c->prefix_len <= (c->family == AF_INET ? 32 : 128), "prefix /%u accepted",
                   (unsigned)c->prefix_len);
        if (c->family == AF_INET)
            for (int k = 4; k < 16; k++)
                FUZZ_CHECK(c->addr[k] == 0, "IPv4 candidate %u keeps address byte %d", i, k);
    }
}

static void addr(const uint8_t *data, size_t size)
{
    size_t len = size - 1;
    unsigned char *blob = malloc(len ? len : 1);
    if (!blob) abort();
    if (len) memcpy(blob, data + 1, len);
    tcp_addr_t a;
    int e = tcp_addr_decode(blob, len, &a);
    const char *why = tcp_addr_strerror(e);
    FUZZ_CHECK(why && *why, "no reason for code %d", e);
    FUZZ_CHECK(e <= 0 && e >= TCP_ADDR_EPREFIX, "unknown code %d", e);
    if (e == TCP_ADDR_OK) {
        FUZZ_CHECK(len == tcp_addr_size(a.ncand), "length %zu accepted for %u candidates", len,
                   (unsigned)a.ncand);
        FUZZ_CHECK(a.magic == TCP_ADDR_MAGIC && a.version == TCP_PROTO_VERSION,
                   "magic/version accepted");
        check_cands(&a);
        unsigned char out[TCP_ADDR_MAX_SIZE];
        size_t n = tcp_addr_encode(&a, out, sizeof out);
        FUZZ_CHECK(n == len, "re-encoded a valid blob of %zu bytes into %zu", len, n);
        tcp_addr_t b;
        FUZZ_CHECK(tcp_addr_decode(out, n, &b) == TCP_ADDR_OK, "re-encoded blob refused");
        /* interface names are C strings: what follows the NUL is not carried over */
        for (unsigned i = 0; i < a.ncand; i++) {
            size_t l = strlen(a.cand[i].ifname);
            memset(a.cand[i].ifname + l, 0, sizeof a.cand[i].ifname - l);
        }
        FUZZ_CHECK(memcmp(&a, &b, sizeof a) == 0, "a valid blob changed in a round trip");
        /* too small a buffer is refused, never overrun */
        FUZZ_CHECK(tcp_addr_encode(&a, out, n - 1) == 0, "encoded into a short buffer");
    }
    free(blob);
}

/* why (a reason of a refusal) is printable text and ends within len bytes. */
static void check_reason(const char *why, size_t len, int refused)
{
    size_t n = strnlen(why, len);
    FUZZ_CHECK(n < len, "the reason is not NUL-terminated within its %zu bytes", len);
    FUZZ_CHECK(refused ? n > 0 || len == 1 : n == 0, "%s reason '%s'",
               refused ? "no" : "an acceptance with a", why);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK((unsigned char)why[i] >= 0x20 && (unsigned char)why[i] <= 0x7e,
                   "byte %zu of the reason is 0x%02x, not printable", i, (unsigned char)why[i]);
}

static void slices(uint64_t len64, int nsocks)
{
    size_t len = (size_t)len64;
    int n = tcp_msg_nslices(len, nsocks);
    FUZZ_CHECK(n >= 1 && n <= nsocks, "%d slices over %d sockets", n, nsocks);
    FUZZ_CHECK((n > 1) == (len >= TCP_SPLIT_MIN && nsocks > 1),
               "%d slices for %zu bytes over %d sockets", n, len, nsocks);
    size_t at = 0, lo = SIZE_MAX, hi = 0;
    for (int k = 0; k < n; k++) {
        size_t off, sl;
        tcp_msg_slice(len, n, k, &off, &sl);
        FUZZ_CHECK(off == at, "slice %d starts at %zu, not %zu", k, off, at);
        FUZZ_CHECK(sl <= len - off, "slice %d [%zu, +%zu) ends past %zu", k, off, sl, len);
        at = off + sl;
        if (sl < lo) lo = sl;
        if (sl > hi) hi = sl;
    }
    FUZZ_CHECK(at == len, "the slices cover %zu of %zu bytes", at, len);
    FUZZ_CHECK(hi - lo <= 1, "slices of %zu and %zu bytes", lo, hi);
}

static void msg_header(const uint8_t *data, size_t size)
{
    enum { IN = 8 + 8 + 1 + 1 + TCP_MSG_HDR_SIZE };
    unsigned char *in = fixed_copy(data, size, IN);
    uint64_t want = kit_get_le64(in), cap64 = kit_get_le64(in + 8);
    size_t cap = (size_t)cap64;
    int nsocks = 1 + in[16] % TCP_MAX_NSOCKS;
    size_t whylen = 1 + (in[17] ? in[17] : 320);   /* 2..256, or 321 (tcp.c's 320) */
    unsigned char *b = malloc(TCP_MSG_HDR_SIZE);   /* the header: exactly its bytes */
    if (!b) abort();
    memcpy(b, in + 18, TCP_MSG_HDR_SIZE);
    uint64_t tag, len;
    tcp_msg_hdr_decode(b, &tag, &len);
    unsigned char again[TCP_MSG_HDR_SIZE];
    tcp_msg_hdr_encode(again, tag, len);
    FUZZ_CHECK(memcmp(again, b, TCP_MSG_HDR_SIZE) == 0, "header decode + encode changed it");
    FUZZ_CHECK(kit_get_le16(b) == (uint16_t)tag && kit_get_le32(b) == (uint32_t)tag,
               "16/32/64-bit readers disagree on the same bytes");
    char *why = malloc(whylen);
    if (!why) abort();
    int e = tcp_msg_check(tag, len, want, cap, 3, "192.0.2.1:4000", why, whylen);
    int ref = tag != want ? TCP_MSG_ETAG : len > (uint64_t)cap ? TCP_MSG_ELENGTH : TCP_MSG_OK;
    FUZZ_CHECK(e == ref, "verdict %d, the reference reading says %d (tag %llu/%llu, %llu "
               "bytes into %zu)", e, ref, (unsigned long long)tag, (unsigned long long)want,
               (unsigned long long)len, cap);
    check_reason(why, whylen, e != TCP_MSG_OK);
    static const char named[] = "tcp: message from rank 3 (192.0.2.1:4000)";
    if (e != TCP_MSG_OK && whylen >= sizeof named)
        FUZZ_CHECK(strncmp(why, named, sizeof named - 1) == 0,
                   "the reason does not name the peer: '%s'", why);
    if (e == TCP_MSG_OK) FUZZ_CHECK(len <= cap && tag == want, "accepted past the receive");
    /* accepted payloads are read in these slices, refused ones drained in them */
    slices(len, nsocks);
    free(why);
    free(b);
    free(in);
}

static void ack_probe(const uint8_t *data, size_t size)
{
    unsigned char *b = fixed_copy(data, size, TCP_ACK_SIZE);
    unsigned char probe[TCP_PROBE_SIZE];
    tcp_probe_encode(probe);
    int is_probe = kit_get_le32(b) == TCP_PROBE_MAGIC && kit_get_le32(b + 4) == TCP_PROTO_VERSION;
    FUZZ_CHECK(is_probe == (memcmp(b, probe, TCP_PROBE_SIZE) == 0),
               "the probe marker is not what tcp_probe_encode writes");
    FUZZ_CHECK(!(kit_get_le32(b) == TCP_ACK_MAGIC && is_probe), "an ack that is also a probe");
    free(b);
}

/* The acceptor's checks of a hello, against a reference reading of its fields. */
static void hello_check(const uint8_t *data, size_t size)
{
    enum { PRE = 1 + 2 + 2 + 8 };
    unsigned char *in = fixed_copy(data, size, PRE + TCP_HELLO_SIZE);
    unsigned flags = in[0];
    int nranks = 1 + kit_get_le16(in + 1);
    int rank = kit_get_le16(in + 3) % nranks;
    uint64_t comm = kit_get_le64(in + 5);
    unsigned char *b = malloc(TCP_HELLO_SIZE);
    if (!b) abort();
    memcpy(b, in + PRE, TCP_HELLO_SIZE);
    tcp_hello_t h;
    tcp_hello_decode(b, &h);
    char job[TCP_JOBID_LEN] = "job-1234";   /* make_corpus's sample hello */
    if (flags & 2) memcpy(job, h.job_id, TCP_JOBID_LEN);
    const tcp_hello_want_t w = { job, comm, rank, nranks };
    size_t whylen = 256;   /* tcp.c's */
    char *why = malloc(whylen);
    if (!why) abort();

    int e = tcp_hello_check_id(&h, &w, why, whylen);
    int ref = h.magic != TCP_HELLO_MAGIC ? TCP_HELLO_EMAGIC
            : h.version != TCP_PROTO_VERSION ? TCP_HELLO_EVERSION
            : memcmp(h.job_id, job, TCP_JOBID_LEN) ? TCP_HELLO_EJOB : TCP_HELLO_OK;
    FUZZ_CHECK(e == ref, "tcp_hello_check_id says %d, the reference reading %d", e, ref);
    check_reason(why, whylen, e != TCP_HELLO_OK);
    if (e == TCP_HELLO_OK && (flags & 1)) {   /* its MAC verifies: the peer's fields */
        e = tcp_hello_check_peer(&h, &w, why, whylen);
        ref = h.comm_id != comm ? TCP_HELLO_ECOMM
            : h.nranks != (uint32_t)nranks ? TCP_HELLO_ENRANKS
            : h.src >= (uint32_t)nranks ? TCP_HELLO_ESRC
            : h.dst != (uint32_t)rank ? TCP_HELLO_EDST
            : h.nsocks < 1 || h.nsocks > TCP_MAX_NSOCKS || h.sock_idx >= h.nsocks
                ? TCP_HELLO_ESOCK : TCP_HELLO_OK;
        FUZZ_CHECK(e == ref, "tcp_hello_check_peer says %d, the reference reading %d", e, ref);
        check_reason(why, whylen, e != TCP_HELLO_OK);
        if (e == TCP_HELLO_OK) {
            /* what the acceptor then indexes with: in range */
            FUZZ_CHECK(h.src < (uint32_t)nranks && h.dst == (uint32_t)rank &&
                       h.nsocks >= 1 && h.nsocks <= TCP_MAX_NSOCKS && h.sock_idx < h.nsocks,
                       "accepted src %u dst %u socket %u of %u (rank %d of %d)",
                       (unsigned)h.src, (unsigned)h.dst, (unsigned)h.sock_idx,
                       (unsigned)h.nsocks, rank, nranks);
            unsigned char again[TCP_HELLO_SIZE];
            tcp_hello_encode(&h, again);
            FUZZ_CHECK(memcmp(again, b, TCP_HELLO_SIZE) == 0, "an accepted hello re-encodes "
                       "differently");
        }
    }
    free(why);
    free(b);
    free(in);
}

/* The connector's check of an ack. */
static void ack_check(const uint8_t *data, size_t size)
{
    enum { PRE = 1 + 1 + TCP_MAC_LEN };
    unsigned char *in = fixed_copy(data, size, PRE + TCP_ACK_SIZE);
    int peer = in[0], idx = in[1];
    unsigned char *mac = malloc(TCP_MAC_LEN), *ack = malloc(TCP_ACK_SIZE);
    if (!mac || !ack) abort();
    memcpy(mac, in + 2, TCP_MAC_LEN);
    memcpy(ack, in + PRE, TCP_ACK_SIZE);
    /* the MAC verifies when it is the expected one (tcp_ack_valid's verdict, without a secret) */
    const char *why = tcp_ack_check(ack, kit_ct_equal(mac, ack + TCP_ACK_MAC_OFF, TCP_MAC_LEN),
                                    peer, idx);
    int ok = kit_get_le32(ack) == TCP_ACK_MAGIC && kit_get_le32(ack + 4) == TCP_PROTO_VERSION &&
             memcmp(mac, ack + TCP_ACK_MAC_OFF, TCP_MAC_LEN) == 0 &&
             kit_get_le32(ack + 8) == (uint32_t)peer && kit_get_le32(ack + 12) == (uint32_t)idx;
    FUZZ_CHECK(ok == (why == NULL), "tcp_ack_check says '%s', the reference reading %s",
               why ? why : "(accepted)", ok ? "accepts" : "refuses");
    if (why) check_reason(why, strlen(why) + 1, 1);
    free(ack);
    free(mac);
    free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 6) {
    case 0: hello(data, size); break;
    case 1: addr(data, size); break;
    case 2: msg_header(data, size); break;
    case 3: ack_probe(data, size); break;
    case 4: hello_check(data, size); break;
    default: ack_check(data, size); break;
    }
    return 0;
}
