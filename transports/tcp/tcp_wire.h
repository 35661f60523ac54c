/* TCP transport: what goes on the wire (private to transports/tcp and its tests).
 *
 * Every integer is encoded little-endian byte by byte, so the layouts below have no padding and
 * no host-order dependence.
 *
 * Address blob (what ep_open publishes; TCP_ADDR_SIZE bytes):
 *     0 magic "CTAD"   4 version u16   6 family u16 (AF_INET / AF_INET6)   8 port u16
 *    10 reserved u16  12 scope id u32  16 address[16] (network order; 4 bytes used for IPv4)
 *    32 rank u32      36 nranks u32    40 comm id u64   48 job hash[32] = auth("cohort-tcp-job",
 *                                                          job id[64])
 *
 * Handshake, one per socket. The connector sends a hello:
 *     0 magic "CTCH"   4 version u32   8 job id[64] (NUL padded)   72 comm id u64
 *    80 src rank u32  84 dst rank u32 88 nranks u32  92 socket index u32  96 nsocks u32
 *   100 flags u32 (0) 104 nonce[16]   120 mac[32] = auth("cohort-tcp-hello" NUL, bytes 0..120)
 * The acceptor checks everything and answers with an ack:
 *     0 magic "CTCK"   4 version u32   8 acceptor rank u32   12 socket index u32
 *    16 mac[32] = auth("cohort-tcp-ack" NUL, hello bytes 0..120, ack bytes 0..16)
 * (the hello bytes include the connector's fresh nonce, so an ack cannot be replayed). Anything
 * wrong and the acceptor closes the socket without an answer.
 *
 * Messages: a header {tag u64, length u64} on socket 0, then the payload. A payload shorter
 * than TCP_SPLIT_MIN (or any payload when there is one socket) follows its header on socket 0;
 * a longer one is cut into nsocks contiguous slices, slice k on socket k. Both sides know the
 * length from the header, so each socket carries its slices in message order.
 */
#ifndef COHORT_TCP_WIRE_H
#define COHORT_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TCP_PROTO_VERSION 1u
#define TCP_ADDR_MAGIC    0x44415443u   /* "CTAD" read as little-endian */
#define TCP_HELLO_MAGIC   0x48435443u   /* "CTCH" */
#define TCP_ACK_MAGIC     0x4b435443u   /* "CTCK" */

#define TCP_JOBID_LEN 64
#define TCP_NONCE_LEN 16
#define TCP_MAC_LEN   32
#define TCP_MAX_NSOCKS 16
#define TCP_SPLIT_MIN ((size_t)64 * 1024)   /* messages this long or longer are striped */

#define TCP_ADDR_SIZE  80
#define TCP_HELLO_SIZE 152
#define TCP_HELLO_MAC_OFF 120
#define TCP_HELLO_NONCE_OFF 104
#define TCP_ACK_SIZE   48
#define TCP_ACK_MAC_OFF 16
#define TCP_MSG_HDR_SIZE 16

#define TCP_LABEL_JOB   "cohort-tcp-job"
#define TCP_LABEL_HELLO "cohort-tcp-hello"
#define TCP_LABEL_ACK   "cohort-tcp-ack"

static inline void tcp_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void tcp_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void tcp_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t tcp_get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t tcp_get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t tcp_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

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
    tcp_put32(b + 0, h->magic);
    tcp_put32(b + 4, h->version);
    memcpy(b + 8, h->job_id, TCP_JOBID_LEN);
    tcp_put64(b + 72, h->comm_id);
    tcp_put32(b + 80, h->src);
    tcp_put32(b + 84, h->dst);
    tcp_put32(b + 88, h->nranks);
    tcp_put32(b + 92, h->sock_idx);
    tcp_put32(b + 96, h->nsocks);
    tcp_put32(b + 100, h->flags);
    memcpy(b + TCP_HELLO_NONCE_OFF, h->nonce, TCP_NONCE_LEN);
    memcpy(b + TCP_HELLO_MAC_OFF, h->mac, TCP_MAC_LEN);
}

static inline void tcp_hello_decode(const unsigned char *b, tcp_hello_t *h)
{
    h->magic = tcp_get32(b + 0);
    h->version = tcp_get32(b + 4);
    memcpy(h->job_id, b + 8, TCP_JOBID_LEN);
    h->comm_id = tcp_get64(b + 72);
    h->src = tcp_get32(b + 80);
    h->dst = tcp_get32(b + 84);
    h->nranks = tcp_get32(b + 88);
    h->sock_idx = tcp_get32(b + 92);
    h->nsocks = tcp_get32(b + 96);
    h->flags = tcp_get32(b + 100);
    memcpy(h->nonce, b + TCP_HELLO_NONCE_OFF, TCP_NONCE_LEN);
    memcpy(h->mac, b + TCP_HELLO_MAC_OFF, TCP_MAC_LEN);
}

/* MAC input of a hello: label NUL + the first TCP_HELLO_MAC_OFF bytes. */
#define TCP_HELLO_MAC_INPUT (sizeof TCP_LABEL_HELLO + TCP_HELLO_MAC_OFF)
static inline void tcp_hello_mac_input(const unsigned char *hello, unsigned char *in)
{
    memcpy(in, TCP_LABEL_HELLO, sizeof TCP_LABEL_HELLO);
    memcpy(in + sizeof TCP_LABEL_HELLO, hello, TCP_HELLO_MAC_OFF);
}

/* MAC input of an ack: label NUL + hello bytes 0..120 + ack bytes 0..16. */
#define TCP_ACK_MAC_INPUT (sizeof TCP_LABEL_ACK + TCP_HELLO_MAC_OFF + TCP_ACK_MAC_OFF)
static inline void tcp_ack_mac_input(const unsigned char *hello, const unsigned char *ack,
                                     unsigned char *in)
{
    memcpy(in, TCP_LABEL_ACK, sizeof TCP_LABEL_ACK);
    memcpy(in + sizeof TCP_LABEL_ACK, hello, TCP_HELLO_MAC_OFF);
    memcpy(in + sizeof TCP_LABEL_ACK + TCP_HELLO_MAC_OFF, ack, TCP_ACK_MAC_OFF);
}

/* MAC input of the job hash in the address blob. */
#define TCP_JOB_MAC_INPUT (sizeof TCP_LABEL_JOB + TCP_JOBID_LEN)
static inline void tcp_job_mac_input(const char job_id[TCP_JOBID_LEN], unsigned char *in)
{
    memcpy(in, TCP_LABEL_JOB, sizeof TCP_LABEL_JOB);
    memcpy(in + sizeof TCP_LABEL_JOB, job_id, TCP_JOBID_LEN);
}

/* Decoded address blob. */
typedef struct tcp_addr {
    uint32_t magic;
    uint16_t version, family, port;
    uint32_t scope_id;
    unsigned char addr[16];
    uint32_t rank, nranks;
    uint64_t comm_id;
    unsigned char job_hash[TCP_MAC_LEN];
} tcp_addr_t;

static inline void tcp_addr_encode(const tcp_addr_t *a, unsigned char *b)
{
    memset(b, 0, TCP_ADDR_SIZE);
    tcp_put32(b + 0, a->magic);
    tcp_put16(b + 4, a->version);
    tcp_put16(b + 6, a->family);
    tcp_put16(b + 8, a->port);
    tcp_put32(b + 12, a->scope_id);
    memcpy(b + 16, a->addr, 16);
    tcp_put32(b + 32, a->rank);
    tcp_put32(b + 36, a->nranks);
    tcp_put64(b + 40, a->comm_id);
    memcpy(b + 48, a->job_hash, TCP_MAC_LEN);
}

/* 0 on success, -1 if the blob is not a TCP address of this protocol version. */
static inline int tcp_addr_decode(const void *blob, size_t len, tcp_addr_t *a)
{
    const unsigned char *b = (const unsigned char *)blob;
    if (!blob || len != TCP_ADDR_SIZE) return -1;
    a->magic = tcp_get32(b + 0);
    a->version = tcp_get16(b + 4);
    a->family = tcp_get16(b + 6);
    a->port = tcp_get16(b + 8);
    a->scope_id = tcp_get32(b + 12);
    memcpy(a->addr, b + 16, 16);
    a->rank = tcp_get32(b + 32);
    a->nranks = tcp_get32(b + 36);
    a->comm_id = tcp_get64(b + 40);
    memcpy(a->job_hash, b + 48, TCP_MAC_LEN);
    if (a->magic != TCP_ADDR_MAGIC || a->version != TCP_PROTO_VERSION) return -1;
    return 0;
}

#endif
