/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target: the job's control channel (core/rendezvous.h; core/jobctl.c keeps each rank's
 * rendezvous connection open after the bootstrap for failure notices, notes, stall reports,
 * goodbye and shutdown), both directions, over real loopback sockets through the public
 * functions. data[0] % 2 picks the direction; the bytes are data[1..]:
 *
 *   0  server -> rank: a real client (cohort_rdv_connect, rank 0 of 1) authenticates through a
 *      proxy to a fresh real server; then the proxy sends the bytes to the client as the
 *      server's messages and resets the connection. cohort_rdv_next_event is called until it
 *      reports an error or the end (GONE / SHUTDOWN).
 *
 *   1  rank -> server: a fresh server of 2 ranks; rank 0 joins with a real client's captured
 *      hello on a raw socket and sends the bytes as its messages (then resets), rank 1 is a
 *      real client that reads what the server tells it with cohort_rdv_next_event. Once rank 1
 *      has what the server should have told it, it says goodbye and reads on to the end.
 *
 * Oracle: a reference reading of the same bytes, written out here from rendezvous.h's protocol
 * (header {type u32, round u32, nbytes u64} in host order; NOTICE payload {comm id u64, about
 * i32, status i32, text}; FAIL's round = rank + 1 | -status << 16; the client's limit of 64 KiB
 * per message and the server's of 64 MiB), predicts every event:
 *   mode 0: each complete, well-formed message yields exactly its event (kind, rank,
 *     communicator, status, text up to its first NUL and 1023 characters); a message of an
 *     unknown type or out of the limits is refused with COHORT_ERR_INTERNAL and a message, a
 *     truncated one with an error status and a message, and either closes the connection (the
 *     stream would be out of step); the end of the bytes is GONE (or SHUTDOWN where the server
 *     said so), after which the connection is closed.
 *   mode 1: rank 1 receives exactly the notices, notes and the job's first failure that rank
 *     0's messages call for, in order (a NOTICE once per communicator and rank it is about;
 *     FAIL forwarded with its code; an unknown type, an oversized message or a NOTICE shorter
 *     than its head or longer than a rank reads (64 KiB) fail the job naming rank 0 and drop
 *     it; a GATHER out of step fails the job; a
 *     connection that ends without BYE fails it as rank 0 gone), nothing else; the server's
 *     recorded failure (cohort_rdv_server_failure) is the predicted one; it finishes.
 * Every FAIL event carries an error status (< 0). Every wait is bounded (3 s; an input needs
 * about a millisecond). As in fuzz_rdv, no connection ends in TIME_WAIT: ours close with a
 * reset, and so do the real clients' (SO_LINGER 0 on their fds), also where the server closes
 * first (rank 1 after its goodbye). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* accept4 */
#endif
#include "fuzz.h"

#include <stdatomic.h>
#include <unistd.h>

#include "core/rendezvous.h"
#include "core/timeutil.h"
#include "rdv_util.h"

#define JOB "fuzz-ctl-job"
#define KEY "fuzz-ctl-secret"
#define HELLO_MAX 1024

/* The protocol as core/rdv_wire.h lays it out (see the comment above). */
enum { GATHER = 1, RESULT = 2, FAIL = 3, BYE = 4, QUERY = 5, MISSING = 6, NOTE = 7, STALL = 8,
       SHUTDOWN = 9, NOTICE = 10 };
#define HDR 16
#define NOTICE_HEAD 16
#define CLIENT_MAX 65536u
#define SERVER_MAX (64u << 20)
#define MAX_NOTICED 256
#define MAX_EV 512

typedef struct hdr {
    uint32_t type, round;
    uint64_t nbytes;
} hdr_t;

static unsigned char hello0[HELLO_MAX];   /* rank 0 of 2 */
static size_t hello_len;
static int proxy_lfd = -1, proxy_port;
static char who0[96];                     /* how the server names rank 0 ("host h, pid p") */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    hello_len = rdv_capture_hello(2, 0, JOB, KEY, 0, hello0, HELLO_MAX);
    FUZZ_CHECK(hello_len > 0, "could not capture the hello of rank 0 of 2 (loopback?)");
    proxy_lfd = rdv_listen_local(&proxy_port);
    FUZZ_CHECK(proxy_lfd >= 0, "no loopback listener");
    /* the captured hello carries this process's host name and pid */
    char host[64];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(who0, sizeof who0, "host %.63s, pid %d", host, (int)getpid());
    return 0;
}

static cohort_rdv_server_t *fresh_server(int nranks)
{
    cohort_rdv_server_t *srv = NULL;
    FUZZ_CHECK(cohort_rdv_server_create("127.0.0.1", 0, nranks, JOB, KEY, strlen(KEY), &srv) ==
               COHORT_SUCCESS, "server: %s", cohort_last_error());
    return srv;
}

/* ---- the events, predicted and seen --------------------------------------------------------- */

typedef struct ev {
    int kind, rank;
    uint64_t comm_id;
    cohort_status_t status;
    char text[1024];
} ev_t;

/* A payload's text as the server's logs and notices take it (core/rdv_wire.h's text_of): up to its
 * first NUL, at most n - 1 (its last byte is meant to be the NUL) and len - 1 characters. */
static void text_srv(const unsigned char *p, uint64_t n, char *out, size_t len)
{
    size_t k = 0;
    while (k + 1 < n && k < len - 1 && p[k]) k++;
    memcpy(out, p, k);
    out[k] = '\0';
}

/* A FAIL, NOTE or MISSING text as the client reads it: up to its first NUL, at most n and
 * len - 1 characters. */
static void text_raw(const unsigned char *p, uint64_t n, char *out, size_t len)
{
    size_t k = 0;
    while (k < n && k < len - 1 && p[k]) k++;
    memcpy(out, p, k);
    out[k] = '\0';
}

static cohort_status_t fail_status(uint32_t code)
{
    return (code >> 16) & 0xff ? -(cohort_status_t)((code >> 16) & 0xff) : COHORT_ERR_PEER_LOST;
}

static const char *kind_name(int k)
{
    switch (k) {
    case COHORT_RDV_EV_NONE: return "NONE";
    case COHORT_RDV_EV_FAIL: return "FAIL";
    case COHORT_RDV_EV_NOTE: return "NOTE";
    case COHORT_RDV_EV_SHUTDOWN: return "SHUTDOWN";
    case COHORT_RDV_EV_GONE: return "GONE";
    default: return "?";
    }
}

static void same_event(const cohort_rdv_event_t *got, const ev_t *want, int i)
{
    FUZZ_CHECK(got->kind == want->kind, "event %d: %s, predicted %s ('%s')", i,
               kind_name(got->kind), kind_name(want->kind), want->text);
    FUZZ_CHECK(got->rank == want->rank, "event %d (%s): rank %d, predicted %d", i,
               kind_name(got->kind), got->rank, want->rank);
    FUZZ_CHECK(got->comm_id == want->comm_id, "event %d (%s): communicator %llu, predicted %llu",
               i, kind_name(got->kind), (unsigned long long)got->comm_id,
               (unsigned long long)want->comm_id);
    FUZZ_CHECK(got->status == want->status, "event %d (%s): status %d, predicted %d", i,
               kind_name(got->kind), (int)got->status, (int)want->status);
    FUZZ_CHECK(strcmp(got->text, want->text) == 0, "event %d (%s): text '%s', predicted '%s'",
               i, kind_name(got->kind), got->text, want->text);
    if (got->kind == COHORT_RDV_EV_FAIL)
        FUZZ_CHECK(got->status < 0, "a FAIL event with status %d", (int)got->status);
}

/* The client's connection closes with a reset, whoever closes first (no TIME_WAIT). */
static void no_time_wait(cohort_rdv_client_t *cl)
{
    struct linger l = { 1, 0 };
    FUZZ_CHECK(setsockopt(cohort_rdv_fd(cl), SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0,
               "SO_LINGER: %s", strerror(errno));
}

/* An error from cohort_rdv_next_event: a status and a message. */
static void refused(cohort_rdv_client_t *cl, cohort_status_t st, cohort_status_t want,
                    const char *what)
{
    const char *msg = cohort_last_error();
    FUZZ_CHECK(st < 0, "%s: status %d, expected an error", what, (int)st);
    FUZZ_CHECK(cohort_rdv_fd(cl) < 0, "%s: the connection stayed open (out of step)", what);
    FUZZ_CHECK(want == 0 || st == want, "%s: status %d, expected %d", what, (int)st, (int)want);
    FUZZ_CHECK(msg && *msg, "%s: status %d without a message", what, (int)st);
}

/* ---- mode 0: what a rank accepts from the server -------------------------------------------- */

typedef struct client_arg {
    cohort_rdv_client_t *cl;
    int rank, nranks, port;
    cohort_status_t st;
    atomic_int done;               /* st and cl are set */
} client_arg_t;

static void *client_connect(void *p)
{
    client_arg_t *a = p;
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", a->port);
    a->st = cohort_rdv_connect(url, JOB, KEY, strlen(KEY), a->rank, a->nranks,
                               (double)WAIT_NS / 1e9, &a->cl);
    atomic_store(&a->done, 1);
    return NULL;
}

/* A client authenticated through the proxy; *cfd: the proxy's end towards it. */
static cohort_rdv_client_t *proxied_client(int *cfd)
{
    cohort_rdv_server_t *srv = fresh_server(1);
    client_arg_t a = { NULL, 0, 1, proxy_port, -100, 0 };
    pthread_t t;
    FUZZ_CHECK(pthread_create(&t, NULL, client_connect, &a) == 0, "no thread");
    FUZZ_CHECK(rdv_wait(proxy_lfd, POLLIN, (int)(WAIT_NS / 1000000)), "the client did not "
               "connect");
    *cfd = accept4(proxy_lfd, NULL, NULL, SOCK_CLOEXEC);
    FUZZ_CHECK(*cfd >= 0, "accept: %s", strerror(errno));
    unsigned char hello[HELLO_MAX], ack[256];
    size_t got = 0;
    uint64_t end = deadline();
    while (got < hello_len) {
        FUZZ_CHECK(cohort_now_ns() < end, "no whole hello");
        got += read_burst(NULL, *cfd, hello + got, hello_len - got);
    }
    int sfd = rdv_connect_local(cohort_rdv_server_port(srv));
    FUZZ_CHECK(sfd >= 0, "cannot connect to the server");
    cohort_rdv_server_progress(srv, 1);
    rdv_send_all(sfd, hello, hello_len);
    size_t acklen = read_burst(srv, sfd, ack, sizeof ack);
    FUZZ_CHECK(cohort_rdv_server_arrived(srv) == 1, "the server refused the client's hello");
    rdv_send_all(*cfd, ack, acklen);
    pthread_join(t, NULL);
    FUZZ_CHECK(a.st == COHORT_SUCCESS && a.cl, "the client refused the server's real ack: %d",
               (int)a.st);
    no_time_wait(a.cl);
    rdv_close_abort(sfd);
    cohort_rdv_server_destroy(srv);
    return a.cl;
}

static void to_rank(const uint8_t *d, size_t n)
{
    int cfd;
    cohort_rdv_client_t *cl = proxied_client(&cfd);
    rdv_send_all(cfd, d, n);
    rdv_close_abort(cfd);   /* the client reads all that was sent, then the reset */
    size_t pos = 0;
    for (int i = 0;; i++) {
        /* something to read (the next message, or the reset), so that the call reads it */
        FUZZ_CHECK(rdv_wait(cohort_rdv_fd(cl), POLLIN, (int)(WAIT_NS / 1000000)),
                   "nothing to read after %zu of %zu bytes", pos, n);
        cohort_rdv_event_t got;
        cohort_status_t st = cohort_rdv_next_event(cl, &got);
        size_t avail = n - pos;
        if (avail == 0) {
            FUZZ_CHECK(st == COHORT_SUCCESS, "the end of the bytes: status %d (%s)", (int)st,
                       cohort_last_error());
            FUZZ_CHECK(got.kind == COHORT_RDV_EV_GONE && got.text[0],
                       "the end of the bytes: %s '%s', expected GONE with a reason",
                       kind_name(got.kind), got.text);
            break;
        }
        if (avail < HDR) {
            refused(cl, st, 0, "a truncated header");
            break;
        }
        hdr_t h;
        memcpy(&h, d + pos, HDR);
        const unsigned char *p = d + pos + HDR;
        size_t pay = avail - HDR;
        ev_t want = { COHORT_RDV_EV_NONE, -1, 0, COHORT_SUCCESS, "" };
        if (h.type == SHUTDOWN) {
            FUZZ_CHECK(st == COHORT_SUCCESS && got.kind == COHORT_RDV_EV_SHUTDOWN,
                       "SHUTDOWN: status %d, %s", (int)st, kind_name(got.kind));
            FUZZ_CHECK(cohort_rdv_fd(cl) < 0, "SHUTDOWN left the connection open");
            break;
        }
        if (h.type != NOTICE && h.type != FAIL && h.type != NOTE && h.type != MISSING) {
            refused(cl, st, COHORT_ERR_INTERNAL, "an unknown message type");
            break;
        }
        if (h.nbytes > CLIENT_MAX || (h.type == NOTICE && h.nbytes < NOTICE_HEAD + 1)) {
            refused(cl, st, COHORT_ERR_INTERNAL, "a message out of the limits");
            break;
        }
        if (pay < h.nbytes) {
            refused(cl, st, 0, "a truncated message");
            break;
        }
        if (h.type == NOTICE) {
            int32_t about, status;
            memcpy(&want.comm_id, p, 8);
            memcpy(&about, p + 8, 4);
            memcpy(&status, p + 12, 4);
            want.kind = COHORT_RDV_EV_FAIL;
            want.rank = about;
            want.status = status < 0 && status > -256 ? status : COHORT_ERR_PEER_LOST;
            text_srv(p + NOTICE_HEAD, h.nbytes - NOTICE_HEAD, want.text, sizeof want.text);
        } else {
            if (h.type == FAIL) {
                want.kind = COHORT_RDV_EV_FAIL;
                want.rank = (int)(h.round & 0xffff) - 1;
                want.status = fail_status(h.round);
            } else if (h.type == NOTE) {
                want.kind = COHORT_RDV_EV_NOTE;
                want.rank = (int)h.round;
            }
            text_raw(p, h.nbytes, want.text, sizeof want.text);
        }
        FUZZ_CHECK(st == COHORT_SUCCESS, "message %d (type %u, %llu bytes): status %d (%s)", i,
                   h.type, (unsigned long long)h.nbytes, (int)st, cohort_last_error());
        same_event(&got, &want, i);
        FUZZ_CHECK(cohort_rdv_fd(cl) >= 0, "the connection closed after a good message");
        pos += HDR + h.nbytes;
    }
    cohort_rdv_close(cl);
}

/* ---- mode 1: what the server accepts from a rank -------------------------------------------- */

typedef struct model {
    ev_t ev[MAX_EV];        /* what rank 1 is told, in order */
    int nev, overflow;
    char fail[1024];        /* the job's first failure */
    uint64_t noticed[MAX_NOTICED];
    int nnoticed;
} model_t;

/* src cut to len - 1 characters (what snprintf "%s" makes of it). */
static void copy_text(char *dst, size_t len, const char *src)
{
    size_t k = 0;
    while (k < len - 1 && src[k]) k++;
    memmove(dst, src, k);
    dst[k] = '\0';
}

static void add_ev(model_t *m, int kind, int rank, uint64_t comm, cohort_status_t st,
                   const char *text)
{
    if (m->nev == MAX_EV) {
        m->overflow = 1;
        return;
    }
    ev_t *e = &m->ev[m->nev++];
    e->kind = kind;
    e->rank = rank;
    e->comm_id = comm;
    e->status = st;
    copy_text(e->text, sizeof e->text, text);
}

/* The server fails the job (the first failure only): rank 1 gets a FAIL with code. */
static void model_fail(model_t *m, uint32_t code, const char *text)
{
    if (m->fail[0]) return;
    copy_text(m->fail, sizeof m->fail, text);
    add_ev(m, COHORT_RDV_EV_FAIL, (int)(code & 0xffff) - 1, 0, fail_status(code), m->fail);
}

/* rank 0's bytes, as the server of 2 ranks handles them, then the end of its connection. */
static void predict(model_t *m, const uint8_t *d, size_t n)
{
    char t[2048];
    int have_gather = 0, bye = 0;
    size_t pos = 0;
    memset(m, 0, sizeof *m);
    while (n - pos >= HDR) {
        hdr_t h;
        memcpy(&h, d + pos, HDR);
        if (h.nbytes > SERVER_MAX) {
            snprintf(t, sizeof t, "rank 0 sent a malformed rendezvous message (%llu bytes)",
                     (unsigned long long)h.nbytes);
            model_fail(m, 0, t);
            return;   /* dropped */
        }
        if (n - pos - HDR < h.nbytes) break;   /* incomplete: the end comes first */
        const unsigned char *p = d + pos + HDR;
        char msg[900];
        switch (h.type) {
        case GATHER:
            if (h.round != 0 || have_gather) {
                snprintf(t, sizeof t, "rank 0 is out of step in the bootstrap (round %u, "
                         "expected 0)", h.round);
                model_fail(m, 0, t);
            } else {
                have_gather = 1;   /* rank 1 never sends its part: the round stays open */
            }
            break;
        case FAIL:
            text_srv(p, h.nbytes, msg, sizeof msg);
            if (h.round) {
                model_fail(m, h.round, msg);
            } else {
                snprintf(t, sizeof t, "rank 0 failed: %s", msg);
                model_fail(m, 0, t);
            }
            break;
        case NOTICE: {
            if (h.nbytes < NOTICE_HEAD + 1 || h.nbytes > CLIENT_MAX) {
                snprintf(t, sizeof t, "rank 0 sent a malformed notice (%llu bytes)",
                         (unsigned long long)h.nbytes);
                model_fail(m, 0, t);
                return;
            }
            uint64_t id;
            int32_t about, status;
            memcpy(&id, p, 8);
            memcpy(&about, p + 8, 4);
            memcpy(&status, p + 12, 4);
            uint64_t key = id ^ ((uint64_t)(uint32_t)about * 0x9e3779b97f4a7c15ull);
            int seen = 0;
            for (int i = 0; i < m->nnoticed && !seen; i++) seen = m->noticed[i] == key;
            if (seen) break;
            if (m->nnoticed < MAX_NOTICED) m->noticed[m->nnoticed++] = key;
            text_srv(p + NOTICE_HEAD, h.nbytes - NOTICE_HEAD, t, 1024);
            add_ev(m, COHORT_RDV_EV_FAIL, about, id,
                   status < 0 && status > -256 ? status : COHORT_ERR_PEER_LOST, t);
            break;
        }
        case NOTE:
            text_srv(p, h.nbytes, msg, sizeof msg);
            add_ev(m, COHORT_RDV_EV_NOTE, 0, 0, COHORT_SUCCESS, msg);
            break;
        case STALL:
        case QUERY:   /* answered to rank 0 only */
            break;
        case BYE:
            bye = 1;
            break;
        default:
            snprintf(t, sizeof t, "rank 0 sent an unknown rendezvous message type %u", h.type);
            model_fail(m, 0, t);
            return;
        }
        pos += HDR + h.nbytes;
    }
    if (!bye) {
        snprintf(t, sizeof t, "rank 0 (%s) is gone: its connection to the job's rendezvous "
                 "closed without a goodbye (the process was killed, crashed, or called _exit)",
                 who0);
        model_fail(m, 1u | (uint32_t)-COHORT_ERR_PEER_LOST << 16, t);
    }
}

static model_t model;

static void to_server(const uint8_t *d, size_t n)
{
    predict(&model, d, n);
    cohort_rdv_server_t *srv = fresh_server(2);
    int fd0 = rdv_connect_local(cohort_rdv_server_port(srv));
    FUZZ_CHECK(fd0 >= 0, "cannot connect to the server");
    cohort_rdv_server_progress(srv, 1);
    rdv_send_all(fd0, hello0, hello_len);
    client_arg_t a = { NULL, 1, 2, cohort_rdv_server_port(srv), -100, 0 };
    pthread_t t;
    FUZZ_CHECK(pthread_create(&t, NULL, client_connect, &a) == 0, "no thread");
    uint64_t end = deadline();
    /* until rank 1 has its ack, not only until the server counted it: the server must go on
     * to send that ack */
    while (cohort_rdv_server_arrived(srv) < 2 || !atomic_load(&a.done)) {
        if (atomic_load(&a.done) && a.st != COHORT_SUCCESS) break;   /* reported below */
        FUZZ_CHECK(cohort_now_ns() < end, "only %d of 2 ranks joined (rank 1 %s)",
                   cohort_rdv_server_arrived(srv),
                   atomic_load(&a.done) ? "returned" : "still connecting");
        cohort_rdv_server_progress(srv, 1);
    }
    pthread_join(t, NULL);
    FUZZ_CHECK(a.st == COHORT_SUCCESS && a.cl, "rank 1 could not join: %d", (int)a.st);
    cohort_rdv_client_t *cl = a.cl;
    no_time_wait(cl);

    rdv_send_all(fd0, d, n);
    rdv_close_abort(fd0);
    /* rank 1: what the server should tell it, in order */
    int seen = 0;
    end = deadline();
    while (seen < model.nev) {
        FUZZ_CHECK(cohort_now_ns() < end, "rank 1 got %d of %d predicted events in %.0f s; "
                   "the next: %s '%s'", seen, model.nev, WAIT_NS / 1e9,
                   kind_name(model.ev[seen].kind), model.ev[seen].text);
        cohort_rdv_server_progress(srv, 1);
        for (;;) {
            cohort_rdv_event_t got;
            cohort_status_t st = cohort_rdv_next_event(cl, &got);
            FUZZ_CHECK(st == COHORT_SUCCESS, "rank 1, event %d: status %d (%s)", seen, (int)st,
                       cohort_last_error());
            if (got.kind == COHORT_RDV_EV_NONE) break;
            FUZZ_CHECK(seen < model.nev, "rank 1 got an event beyond the %d predicted: %s '%s'",
                       model.nev, kind_name(got.kind), got.text);
            same_event(&got, &model.ev[seen], seen);
            seen++;
        }
    }
    /* then goodbye, and nothing more than the end */
    hdr_t bye = { BYE, 0, 0 };
    rdv_send_all(cohort_rdv_fd(cl), &bye, sizeof bye);
    end = deadline();
    for (int gone = 0; !gone || !cohort_rdv_server_finished(srv);) {
        FUZZ_CHECK(cohort_now_ns() < end, "the server did not finish within %.0f s after both "
                   "ranks left (rank 1 %s)", WAIT_NS / 1e9, gone ? "saw the end" : "did not");
        cohort_rdv_server_progress(srv, 1);
        while (!gone) {
            cohort_rdv_event_t got;
            cohort_status_t st = cohort_rdv_next_event(cl, &got);
            FUZZ_CHECK(st == COHORT_SUCCESS, "rank 1 after its goodbye: status %d (%s)",
                       (int)st, cohort_last_error());
            if (got.kind == COHORT_RDV_EV_NONE) break;
            FUZZ_CHECK(got.kind == COHORT_RDV_EV_GONE || (model.overflow && got.kind !=
                       COHORT_RDV_EV_SHUTDOWN), "rank 1 got an event beyond the %d predicted: "
                       "%s '%s'", model.nev, kind_name(got.kind), got.text);
            gone = got.kind == COHORT_RDV_EV_GONE;
        }
    }
    const char *f = cohort_rdv_server_failure(srv);
    if (!model.overflow)
        FUZZ_CHECK(strcmp(f ? f : "", model.fail) == 0, "the server's failure is '%s', "
                   "predicted '%s'", f ? f : "(none)", model.fail);
    cohort_rdv_close(cl);
    cohort_rdv_server_destroy(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] % 2 == 0) to_rank(data + 1, size - 1);
    else to_server(data + 1, size - 1);
    return 0;
}
