/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP transport: what goes on the wire (private to transports/tcp and its tests).
 *
 * Every integer is encoded little-endian byte by byte, so the layouts below have no padding and
 * no host-order dependence.
 *
 * Address blob (what ep_open publishes; tcp_addr_size(n) = 72 + 48 * n bytes, n = 1..8 candidate
 * addresses, at most 456 bytes, which fits COHORT_ADDR_MAX):
 *     0 magic "CTAD"   4 version u16 (TCP_PROTO_VERSION)   6 candidate count n u16
 *     8 rank u32      12 nranks u32   16 comm id u64
 *    24 job hash[32] = auth("cohort-tcp-job", job id[64])
 *    56 network namespace id[16]: auth("cohort-tcp-netns", boot id, dev and inode of
 *       /proc/self/ns/net) truncated; equal ids mean "same host, same network namespace", which
 *       is the only case in which a loopback candidate means anything to the reader
 *    72 n candidates in the publisher's order of preference, 48 bytes each:
 *        0 family u16 (AF_INET / AF_INET6)   2 port u16 (its own listening socket)
 *        4 prefix length u8   5 flags u8 (bit 0: loopback)   6 reserved u16 (0)
 *        8 IPv6 scope id u32 (0 unless link-local)   12 address[16] (network order; 4 bytes
 *          used for IPv4)   28 interface name[16] (NUL padded)   44 reserved u32 (0)
 *
 * Reachability probe: a prober connects to a candidate and sends TCP_PROBE_SIZE bytes,
 *     0 magic "CTPR"   4 version u32
 * then closes. A listener that reads this instead of a hello closes the socket quietly.
 *
 * Handshake, one per socket, in the plugin kit's frame form (transports/common/kit_auth.h). The
 * connector sends a hello, sealed (kit_frame_seal: its MAC covers the bytes before it, which
 * start with the magic "CTCH"):
 *     0 magic "CTCH"   4 version u32   8 job id[64] (NUL padded)   72 comm id u64
 *    80 src rank u32  84 dst rank u32 88 nranks u32  92 socket index u32  96 nsocks u32
 *   100 flags u32 (0) 104 nonce[16]   120 mac[32] = auth(bytes 0..120)
 * The acceptor checks everything and answers with an ack sealed to that hello
 * (kit_frame_seal_to: its MAC covers its own fields, which start with the magic "CTCK", followed
 * by all TCP_HELLO_SIZE bytes of the hello (the connector's fresh nonce among them), so an ack
 * cannot be replayed to another hello):
 *     0 magic "CTCK"   4 version u32   8 acceptor rank u32   12 socket index u32
 *    16 mac[32] = auth(ack bytes 0..16, hello bytes 0..152)
 * Anything wrong and the acceptor closes the socket without an answer. (Version 2 MACed
 * "cohort-tcp-hello" NUL + the hello's fields, and "cohort-tcp-ack" NUL + the hello's fields +
 * the ack's: a version 2 peer is refused for its version.)
 *
 * Messages: a header {tag u64, length u64} on socket 0, then the payload. A payload shorter
 * than TCP_SPLIT_MIN (or any payload when there is one socket) follows its header on socket 0;
 * a longer one is cut into nsocks contiguous slices, slice k on socket k. Both sides know the
 * length from the header, so each socket carries its slices in message order. The receiver
 * checks a header against the receive posted for it (tcp_msg_check: same tag, length within
 * the buffer) before any payload byte is stored; a header that fails is drained in the same
 * slices.
 *
 * The checks of what peers send (hello, ack, message header) are below, without sockets, so
 * that tests/fuzz/fuzz_tcp_wire.c runs them on arbitrary bytes.
 */
#ifndef COHORT_TCP_WIRE_H
#define COHORT_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>        /* snprintf: the refusals' messages */
#include <string.h>
#include <sys/socket.h>   /* AF_INET, AF_INET6 */

#include "transports/common/kit_auth.h"
#include "transports/common/kit_bytes.h"

#define TCP_PROTO_VERSION 3u   /* 2: multi-address blob and the reachability probe; 3: hello and
                                  ack in the kit's frame form */
#define TCP_ADDR_MAGIC    0x44415443u   /* "CTAD" read as little-endian */
#define TCP_HELLO_MAGIC   0x48435443u   /* "CTCH" */
#define TCP_ACK_MAGIC     0x4b435443u   /* "CTCK" */
#define TCP_PROBE_MAGIC   0x52505443u   /* "CTPR" */

#define TCP_JOBID_LEN 64
#define TCP_NONCE_LEN 16
#define TCP_MAC_LEN   32
#define TCP_MAX_NSOCKS 16
#define TCP_SPLIT_MIN ((size_t)64 * 1024)   /* messages this long or longer are striped */

#define TCP_ADDR_HDR_SIZE  72
#define TCP_ADDR_CAND_SIZE 48
#define TCP_ADDR_MAX_CANDS 8
#define TCP_ADDR_MAX_SIZE  (TCP_ADDR_HDR_SIZE + TCP_ADDR_MAX_CANDS * TCP_ADDR_CAND_SIZE)
#define TCP_IFNAME_LEN     16
#define TCP_NETNS_LEN      16
#define TCP_CAND_LOOPBACK  0x01u
#define TCP_PROBE_SIZE     8
#define TCP_HELLO_SIZE 152
#define TCP_HELLO_MAC_OFF 120
#define TCP_HELLO_NONCE_OFF 104
#define TCP_ACK_SIZE   48
#define TCP_ACK_MAC_OFF 16
#define TCP_MSG_HDR_SIZE 16

/* Labels of the MACs that are not frames (the address blob's job hash and network namespace
 * id); the frames' MACs start with their magic instead ("CTCH", "CTCK"). */
#define TCP_LABEL_JOB   "cohort-tcp-job"
#define TCP_LABEL_NETNS "cohort-tcp-netns"

/* Decoded hello. */
typedef struct tcp_hello {
    uint32_t magic, version;
    char job_id[TCP_JOBID_LEN];
    uint64_t comm_id;
    uint32_t src, dst, nranks, sock_idx, nsocks, flags;
    unsigned char nonce[TCP_NONCE_LEN];
    unsigned char mac[TCP_MAC_LEN];
} tcp_hello_t;

static inline void tcp_hello_encode(const tcp_hello_t *h, unsigned char *b)
{
    kit_put_le32(b + 0, h->magic);
    kit_put_le32(b + 4, h->version);
    memcpy(b + 8, h->job_id, TCP_JOBID_LEN);
    kit_put_le64(b + 72, h->comm_id);
    kit_put_le32(b + 80, h->src);
    kit_put_le32(b + 84, h->dst);
    kit_put_le32(b + 88, h->nranks);
    kit_put_le32(b + 92, h->sock_idx);
    kit_put_le32(b + 96, h->nsocks);
    kit_put_le32(b + 100, h->flags);
    memcpy(b + TCP_HELLO_NONCE_OFF, h->nonce, TCP_NONCE_LEN);
    memcpy(b + TCP_HELLO_MAC_OFF, h->mac, TCP_MAC_LEN);
}

static inline void tcp_hello_decode(const unsigned char *b, tcp_hello_t *h)
{
    h->magic = kit_get_le32(b + 0);
    h->version = kit_get_le32(b + 4);
    memcpy(h->job_id, b + 8, TCP_JOBID_LEN);
    h->comm_id = kit_get_le64(b + 72);
    h->src = kit_get_le32(b + 80);
    h->dst = kit_get_le32(b + 84);
    h->nranks = kit_get_le32(b + 88);
    h->sock_idx = kit_get_le32(b + 92);
    h->nsocks = kit_get_le32(b + 96);
    h->flags = kit_get_le32(b + 100);
    memcpy(h->nonce, b + TCP_HELLO_NONCE_OFF, TCP_NONCE_LEN);
    memcpy(h->mac, b + TCP_HELLO_MAC_OFF, TCP_MAC_LEN);
}

/* Seals an encoded hello: its MAC (bytes TCP_HELLO_MAC_OFF..) over bytes 0..TCP_HELLO_MAC_OFF. */
static inline void tcp_hello_seal(const cohort_host_v1_t *host,
                                  unsigned char hello[TCP_HELLO_SIZE])
{
    kit_frame_seal(host, hello, TCP_HELLO_SIZE);
}

/* 1 when the hello's MAC verifies (constant time), else 0. */
static inline int tcp_hello_valid(const cohort_host_v1_t *host,
                                  const unsigned char hello[TCP_HELLO_SIZE])
{
    return kit_frame_valid(host, hello, TCP_HELLO_SIZE);
}

/* Writes the ack of rank `rank` for socket sock_idx, sealed to the hello it answers (all its
 * TCP_HELLO_SIZE bytes). */
static inline void tcp_ack_seal(const cohort_host_v1_t *host, unsigned char ack[TCP_ACK_SIZE],
                                const unsigned char hello[TCP_HELLO_SIZE], uint32_t rank,
                                uint32_t sock_idx)
{
    kit_put_le32(ack, TCP_ACK_MAGIC);
    kit_put_le32(ack + 4, TCP_PROTO_VERSION);
    kit_put_le32(ack + 8, rank);
    kit_put_le32(ack + 12, sock_idx);
    (void)kit_frame_seal_to(host, ack, TCP_ACK_SIZE, hello, TCP_HELLO_SIZE);
}

/* 1 when the ack's MAC is the one an acceptor holding this job's secret seals to this hello
 * (constant time), else 0. */
static inline int tcp_ack_valid(const cohort_host_v1_t *host,
                                const unsigned char ack[TCP_ACK_SIZE],
                                const unsigned char hello[TCP_HELLO_SIZE])
{
    return kit_frame_valid_to(host, ack, TCP_ACK_SIZE, hello, TCP_HELLO_SIZE);
}

/* MAC input of the job hash in the address blob. */
#define TCP_JOB_MAC_INPUT (sizeof TCP_LABEL_JOB + TCP_JOBID_LEN)
static inline void tcp_job_mac_input(const char job_id[TCP_JOBID_LEN], unsigned char *in)
{
    memcpy(in, TCP_LABEL_JOB, sizeof TCP_LABEL_JOB);
    memcpy(in + sizeof TCP_LABEL_JOB, job_id, TCP_JOBID_LEN);
}

/* Decoded address blob. */
typedef struct tcp_cand {
    uint16_t family, port;
    uint8_t prefix_len, flags;
    uint32_t scope_id;
    unsigned char addr[16];
    char ifname[TCP_IFNAME_LEN + 1];   /* always NUL-terminated once decoded */
} tcp_cand_t;

typedef struct tcp_addr {
    uint32_t magic;
    uint16_t version, ncand;
    uint32_t rank, nranks;
    uint64_t comm_id;
    unsigned char job_hash[TCP_MAC_LEN];
    unsigned char netns[TCP_NETNS_LEN];
    tcp_cand_t cand[TCP_ADDR_MAX_CANDS];
} tcp_addr_t;

static inline size_t tcp_addr_size(unsigned ncand)
{
    return TCP_ADDR_HDR_SIZE + (size_t)ncand * TCP_ADDR_CAND_SIZE;
}

/* Writes the blob into b (cap bytes); returns its size, or 0 if a->ncand is not 1..8 or the blob
 * does not fit. */
static inline size_t tcp_addr_encode(const tcp_addr_t *a, unsigned char *b, size_t cap)
{
    if (a->ncand < 1 || a->ncand > TCP_ADDR_MAX_CANDS) return 0;
    size_t n = tcp_addr_size(a->ncand);
    if (cap < n) return 0;
    memset(b, 0, n);
    kit_put_le32(b + 0, a->magic);
    kit_put_le16(b + 4, a->version);
    kit_put_le16(b + 6, a->ncand);
    kit_put_le32(b + 8, a->rank);
    kit_put_le32(b + 12, a->nranks);
    kit_put_le64(b + 16, a->comm_id);
    memcpy(b + 24, a->job_hash, TCP_MAC_LEN);
    memcpy(b + 56, a->netns, TCP_NETNS_LEN);
    for (unsigned i = 0; i < a->ncand; i++) {
        const tcp_cand_t *c = &a->cand[i];
        unsigned char *p = b + tcp_addr_size(i);
        kit_put_le16(p + 0, c->family);
        kit_put_le16(p + 2, c->port);
        p[4] = c->prefix_len;
        p[5] = c->flags;
        kit_put_le32(p + 8, c->scope_id);
        memcpy(p + 12, c->addr, 16);
        size_t l = strnlen(c->ifname, TCP_IFNAME_LEN);
        memcpy(p + 28, c->ifname, l);
    }
    return n;
}

/* Why tcp_addr_decode refused a blob. */
enum {
    TCP_ADDR_OK = 0, TCP_ADDR_ESHORT = -1, TCP_ADDR_EMAGIC = -2, TCP_ADDR_EVERSION = -3,
    TCP_ADDR_ECOUNT = -4, TCP_ADDR_ELENGTH = -5, TCP_ADDR_EFAMILY = -6, TCP_ADDR_EPORT = -7,
    TCP_ADDR_EPREFIX = -8
};

static inline const char *tcp_addr_strerror(int e)
{
    switch (e) {
    case TCP_ADDR_OK: return "valid";
    case TCP_ADDR_ESHORT: return "shorter than a tcp address header";
    case TCP_ADDR_EMAGIC: return "not a tcp address (bad magic)";
    case TCP_ADDR_EVERSION: return "a tcp address of another protocol version (mixed cohort "
                                   "versions in one job?)";
    case TCP_ADDR_ECOUNT: return "candidate count out of range (1 to 8)";
    case TCP_ADDR_ELENGTH: return "its length does not match its candidate count";
    case TCP_ADDR_EFAMILY: return "a candidate is neither IPv4 nor IPv6";
    case TCP_ADDR_EPORT: return "a candidate has port 0";
    case TCP_ADDR_EPREFIX: return "a candidate's prefix length is too long for its family";
    default: return "invalid";
    }
}

/* TCP_ADDR_OK, or a TCP_ADDR_E* code (tcp_addr_strerror says why) when the blob is not a valid
 * TCP address of this protocol version. */
static inline int tcp_addr_decode(const void *blob, size_t len, tcp_addr_t *a)
{
    const unsigned char *b = (const unsigned char *)blob;
    memset(a, 0, sizeof *a);
    if (!blob || len < TCP_ADDR_HDR_SIZE) return TCP_ADDR_ESHORT;
    a->magic = kit_get_le32(b + 0);
    a->version = kit_get_le16(b + 4);
    a->ncand = kit_get_le16(b + 6);
    if (a->magic != TCP_ADDR_MAGIC) return TCP_ADDR_EMAGIC;
    if (a->version != TCP_PROTO_VERSION) return TCP_ADDR_EVERSION;
    if (a->ncand < 1 || a->ncand > TCP_ADDR_MAX_CANDS) return TCP_ADDR_ECOUNT;
    if (len != tcp_addr_size(a->ncand)) return TCP_ADDR_ELENGTH;
    a->rank = kit_get_le32(b + 8);
    a->nranks = kit_get_le32(b + 12);
    a->comm_id = kit_get_le64(b + 16);
    memcpy(a->job_hash, b + 24, TCP_MAC_LEN);
    memcpy(a->netns, b + 56, TCP_NETNS_LEN);
    for (unsigned i = 0; i < a->ncand; i++) {
        tcp_cand_t *c = &a->cand[i];
        const unsigned char *p = b + tcp_addr_size(i);
        c->family = kit_get_le16(p + 0);
        c->port = kit_get_le16(p + 2);
        c->prefix_len = p[4];
        c->flags = p[5];
        c->scope_id = kit_get_le32(p + 8);
        memcpy(c->addr, p + 12, 16);
        memcpy(c->ifname, p + 28, TCP_IFNAME_LEN);
        c->ifname[TCP_IFNAME_LEN] = '\0';
        if (c->family != AF_INET && c->family != AF_INET6) return TCP_ADDR_EFAMILY;
        if (c->port == 0) return TCP_ADDR_EPORT;
        if (c->prefix_len > (c->family == AF_INET ? 32 : 128)) return TCP_ADDR_EPREFIX;
        if (c->family == AF_INET) memset(c->addr + 4, 0, 12);
    }
    return TCP_ADDR_OK;
}

/* The reachability probe's bytes. */
static inline void tcp_probe_encode(unsigned char b[TCP_PROBE_SIZE])
{
    kit_put_le32(b, TCP_PROBE_MAGIC);
    kit_put_le32(b + 4, TCP_PROTO_VERSION);
}

/* ---- checks of what peers send (pure: no sockets; tcp.c and tests/fuzz/fuzz_tcp_wire.c) ---- */

/* What an acceptor expects of a hello: its own job id (TCP_JOBID_LEN bytes, NUL padded),
 * communicator, rank and size. */
typedef struct tcp_hello_want {
    const char *job_id;
    uint64_t comm_id;
    int rank, nranks;
} tcp_hello_want_t;

/* Why a hello is refused (in the order the acceptor checks). */
enum {
    TCP_HELLO_OK = 0, TCP_HELLO_EMAGIC = -1, TCP_HELLO_EVERSION = -2, TCP_HELLO_EJOB = -3,
    TCP_HELLO_EMAC = -4, TCP_HELLO_ECOMM = -5, TCP_HELLO_ENRANKS = -6, TCP_HELLO_ESRC = -7,
    TCP_HELLO_EDST = -8, TCP_HELLO_ESOCK = -9
};

/* The acceptor's checks of a decoded hello, in two steps around the MAC (which needs the job's
 * secret, so the caller verifies it in between, with tcp_hello_valid):
 *   tcp_hello_check_id:    magic, version and job id (what a stranger gets wrong);
 *   tcp_hello_check_peer:  communicator, size, source rank in range, addressed to this rank,
 *                          1..TCP_MAX_NSOCKS sockets with the index below the count.
 * Each returns TCP_HELLO_OK, or a TCP_HELLO_E* code and the reason in why (whylen bytes,
 * always NUL-terminated when whylen > 0). A hello that passes both (and the MAC) has
 * src < nranks, dst == rank, 1 <= nsocks <= TCP_MAX_NSOCKS and sock_idx < nsocks. */
static inline int tcp_hello_check_id(const tcp_hello_t *h, const tcp_hello_want_t *w,
                                     char *why, size_t whylen)
{
    if (whylen) why[0] = '\0';
    if (h->magic != TCP_HELLO_MAGIC) {
        snprintf(why, whylen, "not a cohort tcp handshake (bad magic 0x%08x)",
                 (unsigned)h->magic);
        return TCP_HELLO_EMAGIC;
    }
    if (h->version != TCP_PROTO_VERSION) {
        snprintf(why, whylen, "tcp protocol version %u, this plugin speaks %u (mixed cohort "
                 "versions in one job?)", (unsigned)h->version, TCP_PROTO_VERSION);
        return TCP_HELLO_EVERSION;
    }
    if (memcmp(h->job_id, w->job_id, TCP_JOBID_LEN) != 0) {
        char theirs[TCP_JOBID_LEN + 1];
        memcpy(theirs, h->job_id, TCP_JOBID_LEN);
        theirs[TCP_JOBID_LEN] = '\0';
        for (char *p = theirs; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
        snprintf(why, whylen, "job id '%s' is not this job's '%.64s'", theirs, w->job_id);
        return TCP_HELLO_EJOB;
    }
    return TCP_HELLO_OK;
}

static inline int tcp_hello_check_peer(const tcp_hello_t *h, const tcp_hello_want_t *w,
                                       char *why, size_t whylen)
{
    if (whylen) why[0] = '\0';
    if (h->comm_id != w->comm_id) {
        snprintf(why, whylen, "communicator id %llu, this endpoint belongs to %llu",
                 (unsigned long long)h->comm_id, (unsigned long long)w->comm_id);
        return TCP_HELLO_ECOMM;
    }
    if (h->nranks != (uint32_t)w->nranks) {
        snprintf(why, whylen, "it believes the communicator has %u ranks, not %d",
                 (unsigned)h->nranks, w->nranks);
        return TCP_HELLO_ENRANKS;
    }
    if (h->src >= (uint32_t)w->nranks) {
        snprintf(why, whylen, "source rank %u out of range [0,%d)", (unsigned)h->src,
                 w->nranks);
        return TCP_HELLO_ESRC;
    }
    if (h->dst != (uint32_t)w->rank) {
        snprintf(why, whylen, "rank %u wants rank %u, this is rank %d", (unsigned)h->src,
                 (unsigned)h->dst, w->rank);
        return TCP_HELLO_EDST;
    }
    if (h->nsocks < 1 || h->nsocks > TCP_MAX_NSOCKS || h->sock_idx >= h->nsocks) {
        snprintf(why, whylen, "socket %u of %u is out of range (at most %d sockets)",
                 (unsigned)h->sock_idx, (unsigned)h->nsocks, TCP_MAX_NSOCKS);
        return TCP_HELLO_ESOCK;
    }
    return TCP_HELLO_OK;
}

/* The connector's check of the acceptor's answer: NULL when ack (TCP_ACK_SIZE bytes) is an ack
 * of this protocol version whose MAC verifies (mac_ok: tcp_ack_valid over the hello it answers)
 * from rank peer for socket idx; else why it is not. */
static inline const char *tcp_ack_check(const unsigned char *ack, int mac_ok, int peer, int idx)
{
    if (kit_get_le32(ack) != TCP_ACK_MAGIC) return "not a cohort tcp acknowledgement";
    if (kit_get_le32(ack + 4) != TCP_PROTO_VERSION) return "protocol version differs";
    if (!mac_ok)
        return "its HMAC does not verify (it does not hold this job's secret)";
    if (kit_get_le32(ack + 8) != (uint32_t)peer || kit_get_le32(ack + 12) != (uint32_t)idx)
        return "it answers for another rank or socket";
    return NULL;
}

/* Message header {tag u64, length u64}. */
static inline void tcp_msg_hdr_encode(unsigned char *b, uint64_t tag, uint64_t len)
{
    kit_put_le64(b, tag);
    kit_put_le64(b + 8, len);
}

static inline void tcp_msg_hdr_decode(const unsigned char *b, uint64_t *tag, uint64_t *len)
{
    *tag = kit_get_le64(b);
    *len = kit_get_le64(b + 8);
}

/* Why a message header does not fit the receive posted for it. */
enum { TCP_MSG_OK = 0, TCP_MSG_ETAG = -1, TCP_MSG_ELENGTH = -2 };

/* A received header (tag, len) against the receive posted for it (want_tag, cap bytes) on the
 * connection from rank peer at peer_addr: TCP_MSG_OK when the tags agree and the payload fits,
 * so that it may be read into the receive's buffer; else a TCP_MSG_E* code and the receive's
 * error message in why (whylen bytes; the payload must then be drained, not stored). */
static inline int tcp_msg_check(uint64_t tag, uint64_t len, uint64_t want_tag, size_t cap,
                                int peer, const char *peer_addr, char *why, size_t whylen)
{
    if (whylen) why[0] = '\0';
    if (tag != want_tag) {
        snprintf(why, whylen, "tcp: message from rank %d (%s) carries tag %llu but the "
                 "receive posted for it expects tag %llu (the ranks disagree on the sequence "
                 "of operations)", peer, peer_addr, (unsigned long long)tag,
                 (unsigned long long)want_tag);
        return TCP_MSG_ETAG;
    }
    if (len > (uint64_t)cap) {
        snprintf(why, whylen, "tcp: message from rank %d (%s) with tag %llu is %llu bytes "
                 "but the receive posted for it holds only %zu bytes", peer, peer_addr,
                 (unsigned long long)tag, (unsigned long long)len, cap);
        return TCP_MSG_ELENGTH;
    }
    return TCP_MSG_OK;
}

/* How many sockets a len-byte payload is striped over on a connection of nsocks sockets. */
static inline int tcp_msg_nslices(size_t len, int nsocks)
{
    return (len >= TCP_SPLIT_MIN && nsocks > 1) ? nsocks : 1;
}

/* Payload slice k (0 <= k < n) of a len-byte message over n sockets: [*off, *off + *sl). The
 * slices are contiguous, in order, cover exactly [0, len) and differ in size by at most 1. */
static inline void tcp_msg_slice(size_t len, int n, int k, size_t *off, size_t *sl)
{
    size_t base = len / (size_t)n, rem = len % (size_t)n, uk = (size_t)k;
    *off = uk * base + (uk < rem ? uk : rem);
    *sl = base + (uk < rem ? 1 : 0);
}

#endif
