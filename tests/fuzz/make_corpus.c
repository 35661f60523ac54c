/* SPDX-License-Identifier: BSD-3-Clause */
/* make_corpus DIR: writes the seed inputs of every fuzz target, DIR/<target>/seed-<what>.
 * tests/fuzz/make_corpus.sh runs it into tests/fuzz/corpus (the committed corpus); test_replay.sh
 * runs it into a scratch folder and checks that the committed seeds are what it writes today.
 * Binary seeds are built with the encoders they exercise (tcp_wire.h) or captured from the real
 * rendezvous client (rdv_util.h); the first byte of each selects the target's mode (see the
 * comment at the top of each fuzz_*.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* memfd_create, accept4, getrandom */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "transports/tcp/tcp_wire.h"
#include "rdv_util.h"

static const char *root;
static int failed;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, target);
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        perror(path);
        failed = 1;
        return;
    }
    snprintf(path, sizeof path, "%s/%s/seed-%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        failed = 1;
    }
}

/* A seed of mode byte `mode` followed by `len` bytes. */
static void put_mode(const char *target, const char *name, unsigned mode, const void *data,
                     size_t len)
{
    unsigned char *b = malloc(len + 1);
    if (!b) abort();
    b[0] = (unsigned char)mode;
    memcpy(b + 1, data, len);
    put(target, name, b, len + 1);
    free(b);
}

static void put_text(const char *target, const char *name, unsigned mode, const char *text)
{
    put_mode(target, name, mode, text, strlen(text));
}

/* ---- fuzz_tcp_wire ---------------------------------------------------------------------- */

static tcp_hello_t sample_hello(void)
{
    tcp_hello_t h;
    memset(&h, 0, sizeof h);
    h.magic = TCP_HELLO_MAGIC;
    h.version = TCP_PROTO_VERSION;
    snprintf(h.job_id, sizeof h.job_id, "job-1234");
    h.comm_id = 7;
    h.src = 1;
    h.dst = 0;
    h.nranks = 4;
    h.sock_idx = 1;
    h.nsocks = 2;
    for (int i = 0; i < TCP_NONCE_LEN; i++) h.nonce[i] = (unsigned char)(0x40 + i);
    for (int i = 0; i < TCP_MAC_LEN; i++) h.mac[i] = (unsigned char)(0x80 + i);
    return h;
}

static void hello_seed(const char *name, tcp_hello_t h, size_t len)
{
    unsigned char b[TCP_HELLO_SIZE];
    tcp_hello_encode(&h, b);
    put_mode("fuzz_tcp_wire", name, 0, b, len);
}

static tcp_addr_t sample_addr(unsigned ncand)
{
    tcp_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = TCP_ADDR_MAGIC;
    a.version = TCP_PROTO_VERSION;
    a.ncand = (uint16_t)ncand;
    a.rank = 3;
    a.nranks = 8;
    a.comm_id = 0x1122334455667788ull;
    for (int i = 0; i < TCP_MAC_LEN; i++) a.job_hash[i] = (unsigned char)i;
    for (int i = 0; i < TCP_NETNS_LEN; i++) a.netns[i] = (unsigned char)(0xf0 - i);
    for (unsigned i = 0; i < ncand && i < TCP_ADDR_MAX_CANDS; i++) {
        tcp_cand_t *c = &a.cand[i];
        c->family = i % 2 ? AF_INET6 : AF_INET;
        c->port = (uint16_t)(40000 + i);
        c->prefix_len = i % 2 ? 64 : 24;
        c->scope_id = i % 2 ? 2 : 0;
        c->addr[0] = i % 2 ? 0xfe : 10;
        c->addr[1] = i % 2 ? 0x80 : 1;
        c->addr[3] = (unsigned char)(i + 1);
        c->flags = i == 0 ? TCP_CAND_LOOPBACK : 0;
        snprintf(c->ifname, sizeof c->ifname, i == 2 ? "enp0s31f6.100x" : "eth%u", i);
    }
    return a;
}

static void addr_seed(const char *name, tcp_addr_t a, int extra)
{
    unsigned char b[TCP_ADDR_MAX_SIZE + 8] = {0};
    tcp_addr_t tmp = a;
    unsigned n = a.ncand >= 1 && a.ncand <= TCP_ADDR_MAX_CANDS ? a.ncand : 1;
    tmp.ncand = (uint16_t)n;
    size_t len = tcp_addr_encode(&tmp, b, sizeof b);
    kit_put_le16(b + 6, a.ncand);             /* keep an out-of-range count */
    put_mode("fuzz_tcp_wire", name, 1, b, (size_t)((long)len + extra));
}

static void msg_seed(const char *name, uint64_t want, uint64_t cap, unsigned nsocks1,
                     unsigned whylen1, uint64_t tag, uint64_t len, size_t keep /* 0: all */)
{
    unsigned char b[8 + 8 + 1 + 1 + TCP_MSG_HDR_SIZE];
    kit_put_le64(b, want);
    kit_put_le64(b + 8, cap);
    b[16] = (unsigned char)nsocks1;
    b[17] = (unsigned char)whylen1;
    tcp_msg_hdr_encode(b + 18, tag, len);
    put_mode("fuzz_tcp_wire", name, 2, b, keep && keep < sizeof b ? keep : sizeof b);
}

/* flags: bit 0 the MAC verifies, bit 1 the acceptor's job id is the hello's */
static void hello_check_seed(const char *name, unsigned flags, tcp_hello_t h)
{
    unsigned char b[13 + TCP_HELLO_SIZE];
    b[0] = (unsigned char)flags;
    kit_put_le16(b + 1, 3);   /* 4 ranks */
    kit_put_le16(b + 3, 0);   /* this is rank 0 */
    kit_put_le64(b + 5, 7);   /* communicator 7 */
    tcp_hello_encode(&h, b + 13);
    put_mode("fuzz_tcp_wire", name, 4, b, sizeof b);
}

/* broken: 0 none, 1 magic, 2 version, 3 MAC; the ack says rank 2, socket 1 */
static void ack_check_seed(const char *name, int broken, unsigned peer, unsigned idx)
{
    unsigned char b[2 + TCP_MAC_LEN + TCP_ACK_SIZE];
    b[0] = (unsigned char)peer;
    b[1] = (unsigned char)idx;
    unsigned char *mac = b + 2, *k = b + 2 + TCP_MAC_LEN;
    for (int i = 0; i < TCP_MAC_LEN; i++) mac[i] = (unsigned char)(0x30 + i);
    kit_put_le32(k, broken == 1 ? TCP_HELLO_MAGIC : TCP_ACK_MAGIC);
    kit_put_le32(k + 4, broken == 2 ? 1 : TCP_PROTO_VERSION);
    kit_put_le32(k + 8, 2);
    kit_put_le32(k + 12, 1);
    memcpy(k + TCP_ACK_MAC_OFF, mac, TCP_MAC_LEN);
    if (broken == 3) k[TCP_ACK_MAC_OFF + 31] ^= 1;
    put_mode("fuzz_tcp_wire", name, 5, b, sizeof b);
}

static void tcp_wire_seeds(void)
{
    tcp_hello_t h = sample_hello();
    hello_seed("hello", h, TCP_HELLO_SIZE);
    hello_seed("hello-short", h, 60);
    h.magic = TCP_PROBE_MAGIC;
    hello_seed("hello-is-probe", h, TCP_HELLO_SIZE);
    h = sample_hello();
    h.version = 1;
    hello_seed("hello-v1", h, TCP_HELLO_SIZE);
    h = sample_hello();
    h.nsocks = 0;
    h.sock_idx = 0xffffffffu;
    hello_seed("hello-nsocks0", h, TCP_HELLO_SIZE);
    h = sample_hello();
    memset(h.job_id, 'j', sizeof h.job_id);   /* no NUL */
    h.src = 0xffffffffu;
    hello_seed("hello-jobid-full", h, TCP_HELLO_SIZE);

    addr_seed("addr-1", sample_addr(1), 0);
    addr_seed("addr-2", sample_addr(2), 0);
    addr_seed("addr-8", sample_addr(8), 0);
    addr_seed("addr-count0", sample_addr(0), 0);
    addr_seed("addr-count9", sample_addr(9), 0);
    addr_seed("addr-long", sample_addr(2), 1);
    addr_seed("addr-short", sample_addr(2), -1);
    addr_seed("addr-header-only", sample_addr(1), -TCP_ADDR_CAND_SIZE);
    tcp_addr_t a = sample_addr(2);
    a.cand[1].family = 3;
    addr_seed("addr-family", a, 0);
    a = sample_addr(2);
    a.cand[0].port = 0;
    addr_seed("addr-port0", a, 0);
    a = sample_addr(1);
    a.cand[0].prefix_len = 33;
    addr_seed("addr-prefix33", a, 0);
    a = sample_addr(1);
    a.version = 1;
    addr_seed("addr-v1", a, 0);
    a = sample_addr(3);
    memset(a.cand[2].ifname, 'x', TCP_IFNAME_LEN);   /* 16 characters, no NUL on the wire */
    addr_seed("addr-ifname16", a, 0);

    /* mode 2: {expected tag, receive size, nsocks - 1, reason buffer - 1} then the header */
    msg_seed("msg", 5, 100, 1, 0, 5, 100, 0);
    msg_seed("msg-empty", 9, 0, 0, 0, 9, 0, 0);
    msg_seed("msg-fills", 9, 4096, 0, 0, 9, 4096, 0);
    msg_seed("msg-tag", 5, 100, 1, 0, 6, 100, 0);
    msg_seed("msg-too-long", 5, 100, 1, 0, 5, 101, 0);
    msg_seed("msg-short-reason", 5, 100, 1, 9, 6, 100, 0);
    msg_seed("msg-striped", 1, 1u << 20, 3, 0, 1, 1u << 20, 0);
    msg_seed("msg-striped-odd", 1, 1u << 20, 2, 0, 1, TCP_SPLIT_MIN + 2, 0);
    msg_seed("msg-split-min", 1, 1u << 20, 15, 0, 1, TCP_SPLIT_MIN - 1, 0);
    msg_seed("msg-huge", UINT64_MAX, UINT64_MAX, 15, 0, UINT64_MAX, 1ull << 63, 0);
    msg_seed("msg-huge-refused", 2, 1u << 20, 1, 0, 2, UINT64_MAX, 0);
    msg_seed("msg-short", 5, 100, 1, 0, 5, 100, 25);   /* header cut: zero padded */

    unsigned char k[TCP_ACK_SIZE] = {0};
    kit_put_le32(k, TCP_ACK_MAGIC);
    kit_put_le32(k + 4, TCP_PROTO_VERSION);
    kit_put_le32(k + 8, 2);
    kit_put_le32(k + 12, 1);
    put_mode("fuzz_tcp_wire", "ack", 3, k, sizeof k);
    tcp_probe_encode(k);
    put_mode("fuzz_tcp_wire", "probe", 3, k, TCP_PROBE_SIZE);

    /* mode 4: the acceptor (rank 0 of 4, communicator 7, job-1234) checks sample_hello */
    h = sample_hello();
    hello_check_seed("check-hello", 1, h);
    hello_check_seed("check-hello-bad-mac", 0, h);
    hello_check_seed("check-hello-own-job", 3, h);
    h.magic = TCP_ACK_MAGIC;
    hello_check_seed("check-hello-magic", 1, h);
    h = sample_hello();
    h.version = TCP_PROTO_VERSION + 1;
    hello_check_seed("check-hello-version", 1, h);
    h = sample_hello();
    snprintf(h.job_id, sizeof h.job_id, "job-12345");
    hello_check_seed("check-hello-job", 1, h);
    memset(h.job_id, 0x07, sizeof h.job_id);   /* control characters: printed as '?' */
    hello_check_seed("check-hello-job-bell", 1, h);
    h = sample_hello();
    h.comm_id = 8;
    hello_check_seed("check-hello-comm", 1, h);
    h = sample_hello();
    h.nranks = 5;
    hello_check_seed("check-hello-nranks", 1, h);
    h = sample_hello();
    h.src = 4;
    hello_check_seed("check-hello-src", 1, h);
    h = sample_hello();
    h.dst = 1;
    hello_check_seed("check-hello-dst", 1, h);
    h = sample_hello();
    h.nsocks = 0;
    h.sock_idx = 0;
    hello_check_seed("check-hello-nsocks0", 1, h);
    h = sample_hello();
    h.nsocks = TCP_MAX_NSOCKS + 1;
    hello_check_seed("check-hello-nsocks17", 1, h);
    h = sample_hello();
    h.sock_idx = 2;
    hello_check_seed("check-hello-idx", 1, h);
    h = sample_hello();
    h.nsocks = TCP_MAX_NSOCKS;
    h.sock_idx = TCP_MAX_NSOCKS - 1;
    h.src = 3;
    hello_check_seed("check-hello-last-socket", 1, h);

    /* mode 5: rank 2's answer for socket 1, checked by the connector */
    ack_check_seed("check-ack", 0, 2, 1);
    ack_check_seed("check-ack-magic", 1, 2, 1);
    ack_check_seed("check-ack-version", 2, 2, 1);
    ack_check_seed("check-ack-mac", 3, 2, 1);
    ack_check_seed("check-ack-rank", 0, 3, 1);
    ack_check_seed("check-ack-socket", 0, 2, 0);
}

/* ---- fuzz_settings ---------------------------------------------------------------------- */

static void settings_seeds(void)
{
    static const struct { const char *name; unsigned mode; const char *text; } s[] = {
        { "long", 8 * 3, "42" }, { "long-spaces", 8 * 1, " 29500 " },
        { "long-negative", 8 * 2, "-1" }, { "long-overflow", 8 * 4, "99999999999999999999" },
        { "long-hex", 0, "0x10" }, { "long-empty", 0, "" }, { "long-junk", 8 * 6, "12abc" },
        { "long-min", 8 * 7, "-9223372036854775808" },
        { "double", 1, "0.5" }, { "double-big", 1 + 8 * 2, "1e308" }, { "double-nan", 1, "nan" },
        { "double-inf", 1 + 8 * 2, "-inf" }, { "double-tiny", 1 + 8 * 2, "1e-320" },
        { "double-hex", 1 + 8 * 3, " 0x1p4 " },
        { "size", 2, "64M" }, { "size-kib", 2, "1KiB" }, { "size-gb", 2, " 3gb " },
        { "size-max", 2, "18446744073709551615" }, { "size-overflow", 2, "17179869184G" },
        { "size-bad-suffix", 2, "5X" }, { "size-trailing", 2, "1MiBx" },
        { "ifspec-prefix", 3, "eth,ib" }, { "ifspec-exact", 3, "=eth0,=ens1f0" },
        { "ifspec-exclude", 3, "^docker,lo" }, { "ifspec-exclude-exact", 3, "^=eth1" },
        { "ifspec-cidr", 3, "10.0.0.0/8,192.168.1.0/24" }, { "ifspec-v6", 3, "fd00::/64,eth" },
        { "ifspec-host", 3, "10.1.2.3" }, { "ifspec-empty-entry", 3, "eth0,,ib" },
        { "ifspec-caret", 3, "^" }, { "ifspec-17", 3, "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q" },
        { "ifspec-prefix33", 3, "10.0.0.0/33" }, { "ifspec-scoped", 3, "fe80::1%eth0/64" },
        { "ifspec-long-name", 3, "=averyveryveryverylonginterfacenamethatistoolong" },
        { "ifspec-digit-name", 3, "1eth,::1" },
        { "algo", 4, "allreduce:ring;broadcast:tree" },
        { "algo-twice", 4, "allreduce:ring;allreduce:rd" },
        { "algo-unknown", 4, "foo:bar" }, { "algo-empty-algo", 4, "allreduce:" },
        { "algo-all", 4, "reduce_scatter:ring;alltoall:pairwise;barrier:dissemination;"
                         "allgather : hier ;reduce:tree;broadcast:chain;allreduce:shm" },
        { "algo-upper", 4, "allreduce:Ring;" },
        { "transports", 5, "shm,tcp" }, { "transports-exclude", 5, "^verbs,ucx" },
        { "transports-twice", 5, "tcp,tcp" }, { "transports-caret", 5, " ^ " },
        { "transports-upper", 5, "TCP" },
        { "url", 6, "tcp://127.0.0.1:29500" }, { "url-v6", 6, "tcp://[fd00::1]:80" },
        { "url-port0", 6, "tcp://host:0" }, { "url-port-big", 6 + 8, "tcp://host:65536" },
        { "url-no-host", 6, "tcp://:80" }, { "url-http", 6, "http://x:1" },
        { "url-open-bracket", 6, "tcp://[::1:80" }, { "url-colons", 6, "tcp://a:b:80" },
        { "url-long-host", 6 + 8, "tcp://averylonghostnamethatdoesnotfit.example.com:1" },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        put_text("fuzz_settings", s[i].name, s[i].mode, s[i].text);
    /* mode 7: the range is the first 16 bytes */
    long r[2] = { -10, 10 };
    char b[32];
    memcpy(b, r, sizeof r);
    memcpy(b + sizeof r, " -7", 4);
    put_mode("fuzz_settings", "long-range", 7, b, sizeof r + 3);
}

/* ---- fuzz_hostfile ---------------------------------------------------------------------- */

static void hostfile_seeds(void)
{
    static const struct { const char *name; unsigned mode; const char *text; } s[] = {
        { "file", 0, "node1 slots=4\nnode2\n# a comment\n\nnode1 slots=2 # more\n" },
        { "file-slots0", 0, "node1 slots=0\n" },
        { "file-max-slots", 0, "node1 max_slots=8 slots=2\nnode2 max-slots=1\n" },
        { "file-slots-twice", 0, "node1 slots=4 slots=2\n" },
        { "file-no-host", 0, "slots=4\n" }, { "file-unknown-key", 0, "node1 foo=1\n" },
        { "file-spaces", 0, "  a\tslots = 3 # c\r\nb slots =1\n" },
        { "file-v6", 0, "fd00::1 slots=2\n[fd00::2]\n" },
        { "file-too-many-slots", 0, "node1 slots=1048577\n" },
        { "file-sum", 0, "n slots=1048576\nn slots=1048576\nn slots=1048576\n" },
        { "file-empty", 0, "" }, { "file-comments", 0, "# only\n   # comments\n" },
        { "list", 1, "a:2,b,c:1" }, { "list-v6", 1, "[fd00::1]:4,fd00::2,[::1]" },
        { "list-slots0", 1, "a:0" }, { "list-empty-entry", 1, "a,,b" }, { "list-colon", 1, "a:" },
        { "list-bracket", 1, "[a" }, { "list-two-colons", 1, "a:1:2" },
        { "list-sum", 1, "a:1048576,a:1048576" }, { "list-spaces", 1, " a , b :3 " },
        { "disk", 2, "node1 slots=2\nnode2\n" }, { "disk-crlf", 2, "node1 slots=2\r\nnode2\r\n" },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        put_text("fuzz_hostfile", s[i].name, s[i].mode, s[i].text);
    char longhost[320];
    memset(longhost, 'h', 300);
    memcpy(longhost + 300, " slots=1\n", 10);
    put_text("fuzz_hostfile", "file-long-host", 0, longhost);
    static const char nul[] = "node1\0slots=2\n";
    put_mode("fuzz_hostfile", "disk-nul", 2, nul, sizeof nul - 1);
}

/* ---- fuzz_conf -------------------------------------------------------------------------- */

static void conf_seeds(void)
{
    static const struct { const char *name; const char *text; } s[] = {
        { "basic", "COHORT_TIMEOUT = 60\nCOHORT_ALGO = allreduce:ring # comment\n" },
        { "junk-line", "this is not a setting\nCOHORT_TIMEOUT = 5\n" },
        { "unknown", "COHORT_NO_SUCH = 1\n" },
        { "last-wins", "COHORT_TIMEOUT=5\nCOHORT_TIMEOUT=7\n" },
        { "blanks", "  COHORT_SOCKET_IFNAME  =  eth0  \r\n\t\n" },
        { "empty-value", "COHORT_TIMEOUT = \nCOHORT_SPIN =\n" },
        { "bad-number", "COHORT_TIMEOUT = abc\n" },
        { "conf-itself", "COHORT_CONF = /etc/passwd\nCOHORT_DEBUG = TRACE\n" },
        { "no-newline", "COHORT_TIMEOUT = 8" },
        { "odd", "=\n#\n = = \n==\nCOHORT_TIMEOUT == 3\n#COHORT_SPIN = 1\n" },
        { "every", "COHORT_TRANSPORTS = shm,tcp\nCOHORT_SOCKET_NSOCKS = 4\n"
                   "COHORT_SHM_SEGMENT_SIZE = 2M\nCOHORT_HIERARCHICAL = 1\n"
                   "COHORT_DEBUG_SUBSYS = boot,net\nCOHORT_SOCKET_PROBE_MS = 10\n" },
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        put("fuzz_conf", s[i].name, s[i].text, strlen(s[i].text));
    static const char nul[] = "COHORT_TIMEOUT = 5\0junk\nCOHORT_SPIN = 3\n";
    put("fuzz_conf", "nul", nul, sizeof nul - 1);
    /* a line longer than a 1 KiB line buffer, whose tail looks like a setting of its own */
    char b[2300];
    size_t n = (size_t)snprintf(b, sizeof b, "COHORT_ALGO = allreduce:");
    memset(b + n, 'r', 1023 - n);
    n = 1023;
    n += (size_t)snprintf(b + n, sizeof b - n, "COHORT_TIMEOUT=11\nCOHORT_SPIN = 9\n");
    put("fuzz_conf", "long-line", b, n);
    /* longer than COHORT_CONF_LINE_MAX */
    n = (size_t)snprintf(b, sizeof b, "COHORT_ALGO = ");
    memset(b + n, 'a', 2200 - n);
    memcpy(b + 2200, "\nCOHORT_SPIN = 4\n", 17);
    put("fuzz_conf", "very-long-line", b, 2217);
}

/* ---- fuzz_rdv --------------------------------------------------------------------------- */

/* The server's message header as core/rdv_wire.h lays it out on this machine (type, round: u32;
 * nbytes: u64; host order). Seeds only: a change there makes these less useful, not wrong. */
static size_t msg(unsigned char *b, uint32_t type, uint32_t round, uint64_t nbytes,
                  const void *payload, size_t plen)
{
    memcpy(b, &type, 4);
    memcpy(b + 4, &round, 4);
    memcpy(b + 8, &nbytes, 8);
    if (plen) memcpy(b + 16, payload, plen);
    return 16 + plen;
}

enum { GATHER = 1, RESULT = 2, FAIL = 3, BYE = 4, QUERY = 5, MISSING = 6, NOTE = 7, STALL = 8,
       SHUTDOWN = 9, NOTICE = 10 };

/* data[0] mode, data[1], data[2], then the bytes. */
static void rdv_seed(const char *name, unsigned mode, unsigned b1, unsigned b2,
                     const unsigned char *bytes, size_t len)
{
    unsigned char *b = malloc(len + 3);
    if (!b) abort();
    b[0] = (unsigned char)mode;
    b[1] = (unsigned char)b1;
    b[2] = (unsigned char)b2;
    memcpy(b + 3, bytes, len);
    put("fuzz_rdv", name, b, len + 3);
    free(b);
}

static void rdv_seeds(void)
{
    unsigned char hello[1024], other[1024], b[4096];
    /* a real hello, signed with a key the stranger server does not have */
    size_t hl = rdv_capture_hello(4, 1, "fuzz-job", "not-the-key", 0, hello, sizeof hello);
    size_t ol = rdv_capture_hello(2, 0, "other-job", "not-the-key", hl, other, sizeof other);
    if (hl == 0 || ol == 0) {
        fprintf(stderr, "make_corpus: cannot capture a rendezvous hello (loopback?)\n");
        failed = 1;
        return;
    }
    /* mode 0: a stranger */
    rdv_seed("stranger-hello", 0, 0, 0, hello, hl);
    rdv_seed("stranger-hello-split", 0, 128, 0, hello, hl);
    rdv_seed("stranger-other-job", 0, 0, 0, other, ol);
    rdv_seed("stranger-short", 0, 0, 0, hello, hl / 2);
    memcpy(b, hello, hl);
    size_t n = hl + msg(b + hl, GATHER, 0, 4, "abcd", 4);
    rdv_seed("stranger-hello-gather", 0, 200, 0, b, n);
    static const char http[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
    rdv_seed("stranger-http", 0, 0, 0, (const unsigned char *)http, sizeof http - 1);
    rdv_seed("stranger-nothing", 0, 0, 0, b, 0);
    memset(b, 0xff, 300);
    rdv_seed("stranger-ff", 0, 77, 0, b, 300);

    /* mode 1: authenticated ranks (b1 % 3 = nranks - 1; b2 = where rank 0's bytes end) */
    n = msg(b, GATHER, 0, 8, "12345678", 8);
    n += msg(b + n, GATHER, 1, 0, NULL, 0);
    n += msg(b + n, BYE, 2, 0, NULL, 0);
    rdv_seed("ranks1-gather-bye", 1, 0, 0, b, n);
    n = msg(b, GATHER, 0, 4, "aaaa", 4);
    size_t half = n;
    n += msg(b + n, GATHER, 0, 4, "bbbb", 4);
    n += msg(b + n, BYE, 1, 0, NULL, 0);
    rdv_seed("ranks2-gather", 1, 1, (unsigned)(256 * half / n) + 1, b, n);
    n = msg(b, GATHER, 0, 4, "aaaa", 4);
    half = n;
    n += msg(b + n, GATHER, 0, 6, "bbbbbb", 6);
    rdv_seed("ranks2-sizes-differ", 1, 1, (unsigned)(256 * half / n) + 1, b, n);
    n = msg(b, FAIL, 0, 5, "boom", 5);
    rdv_seed("ranks1-fail", 1, 0, 0, b, n);
    n = msg(b, FAIL, 0, 4, "boom", 4);
    rdv_seed("ranks1-fail-no-nul", 1, 0, 0, b, n);
    n = msg(b, FAIL, 0, 0, NULL, 0);
    rdv_seed("ranks1-fail-empty", 1, 0, 0, b, n);
    n = msg(b, QUERY, 0, 0, NULL, 0);
    n += msg(b + n, GATHER, 0, 1, "x", 1);
    rdv_seed("ranks3-query", 1, 2, 255, b, n);
    n = msg(b, 99, 0, 0, NULL, 0);
    rdv_seed("ranks1-bad-type", 1, 0, 0, b, n);
    n = msg(b, GATHER, 0, (64u << 20) + 1, NULL, 0);
    rdv_seed("ranks1-huge", 1, 0, 0, b, n);
    n = msg(b, GATHER, 5, 2, "xy", 2);
    rdv_seed("ranks1-wrong-round", 1, 0, 0, b, n);
    n = msg(b, GATHER, 0, 2, "xy", 2);
    n += msg(b + n, GATHER, 0, 2, "xy", 2);
    rdv_seed("ranks2-gather-twice", 1, 1, 255, b, n);
    n = msg(b, GATHER, 0, 100, "0123456789", 10);
    rdv_seed("ranks1-truncated", 1, 0, 0, b, n);
    rdv_seed("ranks1-partial-header", 1, 0, 0, b, 10);
    n = msg(b, BYE, 0, 0, NULL, 0);
    n += msg(b + n, GATHER, 0, 3, "abc", 3);
    rdv_seed("ranks2-bye-then-gather", 1, 1, 0, b, n);
    n = msg(b, GATHER, 0, 1, "i", 1);
    rdv_seed("ranks1-intruder", 1, 0x80, 0, b, n);
    rdv_seed("ranks3-intruder", 1, 0x82, 128, b, n);

    /* mode 2: a fake server talking to a real client (b1 % 16 = bytes per rank, b2 % 3 =
     * nranks - 1) */
    n = msg(b, RESULT, 0, 4, "abab", 4);
    n += msg(b + n, RESULT, 1, 4, "cdcd", 4);
    rdv_seed("client-results", 2, 4, 0, b, n);
    n = msg(b, RESULT, 0, 12, "abcdefghijkl", 12);
    rdv_seed("client-result-3ranks", 2, 4, 2, b, n);
    n = msg(b, RESULT, 0, 5, "abcde", 5);
    rdv_seed("client-result-wrong-size", 2, 4, 0, b, n);
    n = msg(b, FAIL, 0, 17, "rank 1 failed: x", 17);
    rdv_seed("client-fail", 2, 2, 1, b, n);
    n = msg(b, MISSING, 0, 9, "ranks: 1", 9);
    n += msg(b + n, RESULT, 0, 2, "zz", 2);
    rdv_seed("client-missing-result", 2, 2, 0, b, n);
    n = msg(b, FAIL, 0, 70000, "x", 1);
    rdv_seed("client-fail-huge", 2, 1, 0, b, n);
    n = msg(b, 42, 0, 0, NULL, 0);
    rdv_seed("client-bad-type", 2, 1, 0, b, n);
    n = msg(b, RESULT, 0, 1, "q", 1);
    n += msg(b + n, FAIL, 1, 3, "no", 3);
    rdv_seed("client-result-then-fail", 2, 1, 0, b, n);
    rdv_seed("client-nothing", 2, 3, 0, b, 0);
    rdv_seed("client-partial-header", 2, 3, 0, b, 7);
}

#define NOTICE_PAYLOAD_MAX 1024

/* ---- fuzz_ctl --------------------------------------------------------------------------- */

/* A NOTICE's payload: comm id u64, about i32, status i32, then the text (with its NUL unless
 * textlen says otherwise). */
static size_t notice(unsigned char *b, uint64_t comm, int32_t about, int32_t status,
                     const char *text, size_t textlen)
{
    unsigned char p[NOTICE_PAYLOAD_MAX];
    memcpy(p, &comm, 8);
    memcpy(p + 8, &about, 4);
    memcpy(p + 12, &status, 4);
    memcpy(p + 16, text, textlen);
    return msg(b, NOTICE, 0, 16 + textlen, p, 16 + textlen);
}

/* A FAIL's code after the bootstrap: bits 0-15 the rank it is about + 1, bits 16-23 -status. */
static uint32_t code(int about, int status)
{
    return (uint32_t)(about + 1) | (uint32_t)-status << 16;
}

static void ctl_seeds(void)
{
    unsigned char b[4096];
    size_t n;
    static const char cf[] = "rank 2: allreduce #4 on communicator 0000000000001234 failed";
    /* mode 0: the server's messages to a rank */
    n = notice(b, 0x1234, 2, -7, cf, sizeof cf);
    put_mode("fuzz_ctl", "rank-notice", 0, b, n);
    n = notice(b, 0x1234, -1, 5, cf, sizeof cf);          /* not an error status */
    put_mode("fuzz_ctl", "rank-notice-status", 0, b, n);
    n = notice(b, 0x1234, 2, -7, cf, sizeof cf - 1);      /* no NUL */
    put_mode("fuzz_ctl", "rank-notice-no-nul", 0, b, n);
    n = msg(b, NOTICE, 0, 16, "0123456789abcdef", 16);   /* no text at all */
    put_mode("fuzz_ctl", "rank-notice-short", 0, b, n);
    n = msg(b, NOTICE, 0, 65537, "x", 1);
    put_mode("fuzz_ctl", "rank-notice-huge", 0, b, n);
    n = msg(b, FAIL, code(2, -3), 15, "rank 2 aborted", 15);
    put_mode("fuzz_ctl", "rank-fail", 0, b, n);
    n = msg(b, FAIL, 0, 9, "job over", 9);
    put_mode("fuzz_ctl", "rank-fail-no-code", 0, b, n);
    n = msg(b, FAIL, 0, 70000, "x", 1);
    put_mode("fuzz_ctl", "rank-fail-huge", 0, b, n);
    n = msg(b, FAIL, code(0, -3), 100, "0123456789", 10);
    put_mode("fuzz_ctl", "rank-fail-truncated", 0, b, n);
    n = msg(b, NOTE, 3, 23, "rank 3: in allreduce #5", 23);
    put_mode("fuzz_ctl", "rank-note", 0, b, n);
    n = msg(b, MISSING, 0, 28, "ranks not yet in round 0: 1", 28);
    put_mode("fuzz_ctl", "rank-missing", 0, b, n);
    n = msg(b, SHUTDOWN, 0, 0, NULL, 0);
    n += msg(b + n, NOTE, 1, 3, "no", 3);                /* after the end: not read */
    put_mode("fuzz_ctl", "rank-shutdown", 0, b, n);
    n = notice(b, 0x77, 1, -4, "mismatch", 9);
    n += msg(b + n, NOTE, 1, 6, "in bcast", 6);
    n += msg(b + n, MISSING, 0, 2, "1", 2);
    n += msg(b + n, FAIL, code(1, -2), 5, "lost", 5);
    n += msg(b + n, SHUTDOWN, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "rank-all", 0, b, n);
    n = msg(b, RESULT, 0, 4, "abcd", 4);
    put_mode("fuzz_ctl", "rank-result", 0, b, n);
    n = msg(b, 77, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "rank-unknown-type", 0, b, n);
    put_mode("fuzz_ctl", "rank-partial-header", 0, b, 7);
    put_mode("fuzz_ctl", "rank-nothing", 0, b, 0);

    /* mode 1: rank 0's messages to the server (rank 1 listens) */
    n = notice(b, 0x1234, 2, -7, cf, sizeof cf);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-notice-bye", 1, b, n);
    n = notice(b, 0x1234, 2, -7, cf, sizeof cf);
    n += notice(b + n, 0x1234, 2, -7, "again", 6);        /* the same: not forwarded again */
    n += notice(b + n, 0x1234, 3, -7, "another", 8);
    n += notice(b + n, 0x9, 2, -7, "elsewhere", 10);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-notices", 1, b, n);
    n = msg(b, NOTICE, 0, 16, "0123456789abcdef", 16);
    put_mode("fuzz_ctl", "server-notice-short", 1, b, n);
    n = msg(b, NOTE, 0, 12, "in allreduce", 12);           /* no NUL: the last byte is cut */
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-note-bye", 1, b, n);
    n = msg(b, STALL, 0, 21, "stuck in allreduce #9", 21);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-stall-bye", 1, b, n);
    n = msg(b, FAIL, code(0, -5), 8, "aborted", 8);
    put_mode("fuzz_ctl", "server-fail-code", 1, b, n);
    n = msg(b, FAIL, 0, 5, "boom", 5);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-fail-bye", 1, b, n);
    n = msg(b, QUERY, 0, 0, NULL, 0);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-query-bye", 1, b, n);
    n = msg(b, GATHER, 0, 2, "xy", 2);
    n += msg(b + n, GATHER, 0, 2, "xy", 2);
    put_mode("fuzz_ctl", "server-gather-twice", 1, b, n);
    n = msg(b, BYE, 0, 0, NULL, 0);
    n += msg(b + n, NOTE, 0, 6, "after", 6);
    put_mode("fuzz_ctl", "server-bye-then-note", 1, b, n);
    n = msg(b, 42, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-unknown-type", 1, b, n);
    n = msg(b, NOTE, 0, (64u << 20) + 1, NULL, 0);
    put_mode("fuzz_ctl", "server-huge", 1, b, n);
    n = msg(b, NOTE, 0, 100, "0123456789", 10);
    put_mode("fuzz_ctl", "server-truncated", 1, b, n);
    put_mode("fuzz_ctl", "server-nothing", 1, b, 0);
    n = notice(b, 0x5, 1, -4, "mismatch", 9);
    n += msg(b + n, NOTE, 0, 9, "in bcast", 9);
    n += msg(b + n, STALL, 0, 9, "in bcast", 9);
    n += msg(b + n, QUERY, 0, 0, NULL, 0);
    n += msg(b + n, GATHER, 0, 1, "g", 1);
    n += msg(b + n, BYE, 0, 0, NULL, 0);
    put_mode("fuzz_ctl", "server-all", 1, b, n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus DIR (tests/fuzz/corpus)\n");
        return 2;
    }
    root = argv[1];
    setenv("COHORT_DEBUG", "NONE", 1);
    setenv("COHORT_CONF", "/dev/null", 1);
    if (mkdir(root, 0777) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    tcp_wire_seeds();
    settings_seeds();
    hostfile_seeds();
    conf_seeds();
    rdv_seeds();
    ctl_seeds();
    return failed;
}
