/* Fuzz target: the TCP transport's wire format (transports/tcp/tcp_wire.h), the bytes a peer or
 * a stranger sends to a listening rank. data[0] % 4 picks what the rest is:
 *   0  a handshake hello (TCP_HELLO_SIZE bytes; shorter input is zero padded, as the acceptor's
 *      buffer is, longer is cut): decode, re-encode, MAC inputs
 *   1  an address blob of exactly the remaining length (what a peer publishes): decode; when
 *      valid, encode and decode again
 *   2  a message header {tag u64, length u64}
 *   3  an ack (TCP_ACK_SIZE bytes) and the reachability probe marker
 * Oracles: decoding then encoding gives the same bytes back (hello, header), a valid blob survives
 * a round trip unchanged, decoded names are NUL-terminated and counts are in range, every
 * refusal has a reason. ASan sees every read, since each buffer is a copy of exactly its size. */
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
    unsigned char min[TCP_HELLO_MAC_INPUT], ack[TCP_ACK_SIZE] = {0}, ain[TCP_ACK_MAC_INPUT];
    tcp_hello_mac_input(b, min);
    FUZZ_CHECK(memcmp(min + sizeof TCP_LABEL_HELLO, b, TCP_HELLO_MAC_OFF) == 0,
               "the hello's MAC input is not label + bytes 0..%d", TCP_HELLO_MAC_OFF);
    tcp_put32(ack, TCP_ACK_MAGIC);
    tcp_put32(ack + 4, TCP_PROTO_VERSION);
    tcp_put32(ack + 8, h.dst);
    tcp_put32(ack + 12, h.sock_idx);
    tcp_ack_mac_input(b, ack, ain);
    FUZZ_CHECK(memcmp(ain + sizeof TCP_LABEL_ACK + TCP_HELLO_MAC_OFF, ack, TCP_ACK_MAC_OFF) == 0,
               "the ack's MAC input does not end with the ack's first %d bytes", TCP_ACK_MAC_OFF);
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

static void msg_header(const uint8_t *data, size_t size)
{
    unsigned char *b = fixed_copy(data, size, TCP_MSG_HDR_SIZE);
    uint64_t tag = tcp_get64(b), len = tcp_get64(b + 8);
    unsigned char again[TCP_MSG_HDR_SIZE];
    tcp_put64(again, tag);
    tcp_put64(again + 8, len);
    FUZZ_CHECK(memcmp(again, b, TCP_MSG_HDR_SIZE) == 0, "header decode + encode changed it");
    FUZZ_CHECK(tcp_get16(b) == (uint16_t)tag && tcp_get32(b) == (uint32_t)tag,
               "16/32/64-bit readers disagree on the same bytes");
    free(b);
}

static void ack_probe(const uint8_t *data, size_t size)
{
    unsigned char *b = fixed_copy(data, size, TCP_ACK_SIZE);
    unsigned char probe[TCP_PROBE_SIZE];
    tcp_probe_encode(probe);
    int is_probe = tcp_get32(b) == TCP_PROBE_MAGIC && tcp_get32(b + 4) == TCP_PROTO_VERSION;
    FUZZ_CHECK(is_probe == (memcmp(b, probe, TCP_PROBE_SIZE) == 0),
               "the probe marker is not what tcp_probe_encode writes");
    FUZZ_CHECK(!(tcp_get32(b) == TCP_ACK_MAGIC && is_probe), "an ack that is also a probe");
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 4) {
    case 0: hello(data, size); break;
    case 1: addr(data, size); break;
    case 2: msg_header(data, size); break;
    default: ack_probe(data, size); break;
    }
    return 0;
}
