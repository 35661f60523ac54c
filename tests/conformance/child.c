/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort-conformance: one rank. Loads the plugin, runs every case, reports to the parent. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "tests/conformance/conformance.h"
#include "core/plugin_loader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double cf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cf_send_rec(int fd, const cf_rec_t *h, const void *data)
{
    size_t total = sizeof *h + h->len;
    unsigned char *b = malloc(total);
    if (!b) return -1;
    memcpy(b, h, sizeof *h);
    if (h->len) memcpy(b + sizeof *h, data, h->len);
    ssize_t w;
    do w = send(fd, b, total, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    free(b);
    return w == (ssize_t)total ? 0 : -1;
}

long cf_recv_rec(int fd, void *buf)
{
    ssize_t r;
    do r = recv(fd, buf, CF_REC_MAX, 0);
    while (r < 0 && errno == EINTR);
    if (r > 0 && (size_t)r < sizeof(cf_rec_t)) return -1;
    return (long)r;
}

int cf_fail(cf_world_t *w, const char *fmt, ...)
{
    if (w->err[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

void *cf_alloc(cf_world_t *w, size_t len)
{
    if (w->nallocs == w->capallocs) {
        int cap = w->capallocs ? 2 * w->capallocs : 64;
        void **n = realloc(w->allocs, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        w->allocs = n;
        w->capallocs = cap;
    }
    void *p = calloc(1, len ? len : 1);
    if (p) w->allocs[w->nallocs++] = p;
    return p;
}

static void free_allocs(cf_world_t *w)
{
    for (int i = 0; i < w->nallocs; i++) free(w->allocs[i]);
    w->nallocs = 0;
}

/* ---- talking to the parent --------------------------------------------------------------- */

static void read_parent(cf_world_t *w)
{
    for (;;) {
        ssize_t r = recv(w->pfd, w->reply + CF_REC_MAX, CF_REC_MAX, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return;
        if (r == 0) _exit(4);                   /* the parent is gone */
        if ((size_t)r < sizeof(cf_rec_t)) continue;
        cf_rec_t h;
        memcpy(&h, w->reply + CF_REC_MAX, sizeof h);
        switch (h.type) {
        case R_RESULT:
        case R_ABORTGATHER:
            memcpy(w->reply, w->reply + CF_REC_MAX, (size_t)r);
            w->have_reply = 1;
            break;
        case R_ABORTCASE:
            if (h.kase == w->kase) w->aborted = 1;
            break;
        case R_STOP:
            _exit(3);
        default:
            break;
        }
    }
}

void cf_pump(cf_world_t *w, int ms)
{
    struct pollfd p[2];
    int n = 0;
    p[n].fd = w->pfd;
    p[n++].events = POLLIN;
    int efd = (w->ep && w->ops->ep_fd) ? w->ops->ep_fd(w->ep) : -1;
    if (efd >= 0) {
        p[n].fd = efd;
        p[n++].events = POLLIN;
    } else if (w->ep && ms > 1) {
        ms = 1;                                 /* no fd to sleep on: poll the plugin often */
    }
    int r = poll(p, (nfds_t)n, ms);
    if (r > 0 && p[0].revents) read_parent(w);
    if (w->ep) {
        cohort_status_t st = w->ops->progress(w->ep);
        if (st < 0 && !w->progress_err) {
            w->progress_err = st;
            cf_fail(w, "progress() failed: %s: %s", cohort_strerror(st), cohort_last_error());
        }
    }
}

static int gather_step(cf_world_t *w, const void *data, size_t len, int step, int bounded)
{
    cf_rec_t h = { R_GATHER, w->rank, w->kase, step, 0, (uint32_t)len };
    if (cf_send_rec(w->pfd, &h, data) != 0) _exit(4);
    w->have_reply = 0;
    for (;;) {
        if (w->have_reply) {
            cf_rec_t rh;
            memcpy(&rh, w->reply, sizeof rh);
            if (rh.kase == w->kase && rh.step == step) break;
            w->have_reply = 0;                  /* stale answer to an abandoned gather */
        }
        if (bounded && cf_now() > w->deadline)
            return cf_fail(w, "timed out waiting for the other ranks (gather %d of this case)",
                           step);
        cf_pump(w, 100);
    }
    cf_rec_t rh;
    memcpy(&rh, w->reply, sizeof rh);
    if (rh.type == R_ABORTGATHER) {
        w->aborted = 1;
        return cf_fail(w, "another rank failed this case first");
    }
    memcpy(w->gbuf, w->reply + sizeof rh, rh.len);
    size_t off = 0;
    for (int r = 0; r < w->np; r++) {
        int32_t present;
        uint32_t l;
        memcpy(&present, w->gbuf + off, 4);
        memcpy(&l, w->gbuf + off + 4, 4);
        off += 8;
        w->gpresent[r] = present;
        w->glen[r] = l;
        w->gdata[r] = w->gbuf + off;
        off += l;
    }
    return 0;
}

int cf_gather(cf_world_t *w, const void *data, size_t len)
{
    return gather_step(w, data, len, w->step++, 1);
}

int cf_barrier(cf_world_t *w) { return cf_gather(w, NULL, 0); }

/* ---- endpoints and connections ----------------------------------------------------------- */

int cf_ep_open(cf_world_t *w)
{
    const char *job = getenv("COHORT_JOB_ID");
    cohort_ep_info_t info = { sizeof info, w->rank, w->np, 0xC0F0000ull + (uint64_t)w->kase,
                              job ? job : "cohort-conformance" };
    unsigned char addr[COHORT_ADDR_MAX];
    size_t alen = sizeof addr;
    cohort_status_t st = w->ops->ep_open(w->ctx, &info, &w->ep, addr, &alen);
    if (st != COHORT_SUCCESS) {
        w->ep = NULL;
        return cf_fail(w, "ep_open failed: %s: %s", cohort_strerror(st), cohort_last_error());
    }
    if (!w->ep) return cf_fail(w, "ep_open returned success but no endpoint");
    if (alen == 0 || alen > COHORT_ADDR_MAX)
        return cf_fail(w, "ep_open gave an address of %zu bytes (must be 1..%d)", alen,
                       COHORT_ADDR_MAX);
    if (cf_gather(w, addr, alen)) return -1;
    for (int r = 0; r < w->np; r++) {
        if (!w->gpresent[r] || w->glen[r] == 0 || w->glen[r] > COHORT_ADDR_MAX)
            return cf_fail(w, "rank %d published no usable address", r);
        memcpy(w->addr[r], w->gdata[r], w->glen[r]);
        w->addrlen[r] = w->glen[r];
    }
    if (memcmp(w->addr[w->rank], addr, alen) != 0)
        return cf_fail(w, "address exchange corrupted this rank's own address");
    return 0;
}

int cf_post_conns(cf_world_t *w, int do_connect, int do_accept)
{
    for (int p = 0; p < w->np; p++) {
        if (p == w->rank || w->conn[p]) continue;
        cohort_status_t st;
        if (p < w->rank && do_connect) {
            st = w->ops->connect(w->ep, p, w->addr[p], w->addrlen[p], &w->conn[p]);
            if (st != COHORT_SUCCESS && st != COHORT_IN_PROGRESS) {
                w->conn[p] = NULL;
                return cf_fail(w, "connect to rank %d failed: %s: %s", p, cohort_strerror(st),
                               cohort_last_error());
            }
        } else if (p > w->rank && do_accept) {
            st = w->ops->accept(w->ep, p, &w->conn[p]);
            if (st != COHORT_SUCCESS && st != COHORT_IN_PROGRESS) {
                w->conn[p] = NULL;
                return cf_fail(w, "accept of rank %d failed: %s: %s", p, cohort_strerror(st),
                               cohort_last_error());
            }
        } else {
            continue;
        }
        if (!w->conn[p]) return cf_fail(w, "connect/accept for rank %d returned no conn", p);
    }
    return 0;
}

int cf_wait_conns(cf_world_t *w)
{
    int ready[CF_MAX_NP] = { 0 };
    for (;;) {
        int left = 0, first = -1;
        for (int p = 0; p < w->np; p++) {
            if (!w->conn[p] || ready[p]) continue;
            cohort_status_t st = w->ops->conn_test(w->conn[p]);
            if (st == COHORT_SUCCESS) {
                ready[p] = 1;
            } else if (st == COHORT_IN_PROGRESS) {
                left++;
                if (first < 0) first = p;
            } else {
                return cf_fail(w, "connection with rank %d failed: %s: %s", p,
                               cohort_strerror(st), cohort_last_error());
            }
        }
        if (!left) return 0;
        if (w->aborted) return cf_fail(w, "another rank failed this case");
        if (cf_now() > w->deadline)
            return cf_fail(w, "timed out after %.0f s: %d connection(s) not ready (first: rank "
                           "%d)", w->o->timeout, left, first);
        cf_pump(w, 100);
    }
}

int cf_world(cf_world_t *w)
{
    if (cf_ep_open(w)) return -1;
    if (cf_post_conns(w, 1, 1)) return -1;
    return cf_wait_conns(w);
}

void cf_close_world(cf_world_t *w)
{
    for (int p = 0; p < w->np; p++)
        if (w->conn[p]) {
            cohort_status_t st = w->ops->conn_close(w->conn[p]);
            if (st < 0) cf_fail(w, "conn_close(rank %d) failed: %s", p, cohort_strerror(st));
            w->conn[p] = NULL;
        }
    if (w->ep) {
        cohort_status_t st = w->ops->ep_close(w->ep);
        if (st < 0) cf_fail(w, "ep_close failed: %s", cohort_strerror(st));
        w->ep = NULL;
    }
}

void cf_set_secret(int stranger)
{
    const char *sec = getenv("COHORT_SECRET");
    unsigned char key[64];
    size_t len = sec ? strlen(sec) : 0;
    if (len > sizeof key) len = sizeof key;   /* the host table keeps at most 64 bytes */
    if (len) memcpy(key, sec, len);
    if (stranger) {
        /* Same length, first byte changed: HMAC pads a key with zeros, so a key differing only
         * by trailing zeros would be the same key; this one never is. */
        if (len) key[0] ^= 0x80;
        else memcpy(key, "stranger", len = 8);
    }
    cohort_plugin_set_secret(key, len);
}

/* ---- requests ---------------------------------------------------------------------------- */

static cohort_status_t post(cf_world_t *w, int is_send, int peer, void *buf, size_t len,
                            uint64_t tag, cohort_tp_mr_t mr, cf_req_t *q)
{
    memset(q, 0, sizeof *q);
    q->peer = peer;
    q->is_send = is_send;
    q->len = len;
    cohort_status_t st = is_send
        ? w->ops->isend(w->conn[peer], buf, len, tag, mr, &q->r)
        : w->ops->irecv(w->conn[peer], buf, len, tag, mr, &q->r);
    if ((st == COHORT_SUCCESS || st == COHORT_IN_PROGRESS) && q->r) return st;
    q->done = 1;
    q->r = NULL;
    q->st = st < 0 ? st : COHORT_ERR_INTERNAL;
    snprintf(q->err, sizeof q->err, "%s", st < 0 ? cohort_last_error()
             : "posting returned success but no request");
    return q->st;
}

cohort_status_t cf_isend(cf_world_t *w, int peer, const void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cf_req_t *q)
{
    return post(w, 1, peer, (void *)buf, len, tag, mr, q);
}

cohort_status_t cf_irecv(cf_world_t *w, int peer, void *buf, size_t len, uint64_t tag,
                         cohort_tp_mr_t mr, cf_req_t *q)
{
    return post(w, 0, peer, buf, len, tag, mr, q);
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

int cf_wait(cf_world_t *w, cf_req_t *q, int n, int order)
{
    int *perm = malloc((size_t)(n > 0 ? n : 1) * sizeof *perm);
    if (!perm) return cf_fail(w, "out of memory");
    for (int i = 0; i < n; i++) perm[i] = order == CF_ORDER_REVERSE ? n - 1 - i : i;
    int rc = 0;
    for (;;) {
        if (order == CF_ORDER_RANDOM)
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(rng() % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        int left = 0, first = -1;
        for (int k = 0; k < n; k++) {
            cf_req_t *x = &q[perm[k]];
            if (x->done) continue;
            size_t nb = (size_t)-1;
            cohort_status_t st = w->ops->test(x->r, &nb);
            if (st == COHORT_IN_PROGRESS) {
                left++;
                if (first < 0 || perm[k] < first) first = perm[k];
                continue;
            }
            x->done = 1;
            x->st = st;
            x->r = NULL;
            x->nbytes = st == COHORT_SUCCESS ? nb : 0;
            if (st != COHORT_SUCCESS) snprintf(x->err, sizeof x->err, "%s", cohort_last_error());
        }
        if (!left) break;
        if (w->aborted) {
            rc = cf_fail(w, "another rank failed this case (%d request(s) still pending)", left);
            break;
        }
        if (cf_now() > w->deadline) {
            rc = cf_fail(w, "timed out after %.0f s with %d of %d request(s) pending (first: "
                         "#%d, %s of %zu bytes %s rank %d)", w->o->timeout, left, n, first,
                         q[first].is_send ? "send" : "receive", q[first].len,
                         q[first].is_send ? "to" : "from", q[first].peer);
            break;
        }
        cf_pump(w, 100);
    }
    free(perm);
    return rc;
}

/* ---- data -------------------------------------------------------------------------------- */

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void cf_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *b = buf;
    uint64_t s = mix(seed);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix(s + i);
        memcpy(b + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = mix(s + i);
        memcpy(b + i, &v, len - i);
    }
}

size_t cf_check(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *b = buf;
    uint64_t s = mix(seed);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix(s + i);
        if (memcmp(b + i, &v, 8)) break;
    }
    for (; i < len; i++) {
        uint64_t v = mix(s + (i & ~(size_t)7));
        if (b[i] != ((const unsigned char *)&v)[i & 7]) return i;
    }
    return len;
}

uint64_t cf_seed(const cf_world_t *w, int src, int dst, int i)
{
    return ((uint64_t)w->kase << 48) ^ ((uint64_t)src << 36) ^ ((uint64_t)dst << 24) ^
           (uint64_t)(unsigned)i;
}

/* ---- file descriptors -------------------------------------------------------------------- */

#define FD_TRACK 4096
static int count_fds(unsigned char *set)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int self = dirfd(d), n = 0;
    if (set) memset(set, 0, FD_TRACK);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd == self) continue;
        n++;
        if (set && fd >= 0 && fd < FD_TRACK) set[fd] = 1;
    }
    closedir(d);
    return n;
}

static void describe_new_fds(const unsigned char *before, char *out, size_t len)
{
    unsigned char now[FD_TRACK];
    count_fds(now);
    size_t used = 0;
    out[0] = '\0';
    for (int fd = 0; fd < FD_TRACK && used + 64 < len; fd++) {
        if (!now[fd] || before[fd]) continue;
        char path[64], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t l = readlink(path, target, sizeof target - 1);
        target[l > 0 ? l : 0] = '\0';
        used += (size_t)snprintf(out + used, len - used, "%sfd %d -> %.40s", used ? ", " : "",
                                 fd, target);
    }
}

/* ---- the rank ---------------------------------------------------------------------------- */

static int case_selected(const cf_opts_t *o, int k)
{
    return !o->only || strstr(cf_cases[k].name, o->only) != NULL;
}

void cf_child_main(const cf_opts_t *o, int rank, int fd)
{
    static cf_world_t W;
    cf_world_t *w = &W;
    w->o = o;
    w->rank = rank;
    w->np = o->np;
    w->pfd = fd;
    w->kase = -1;
    w->gbuf = malloc(CF_REC_MAX);
    w->reply = malloc(2 * CF_REC_MAX);
    rng_state ^= (uint64_t)(rank + 1) * 0x9e3779b97f4a7c15ull;
    if (!w->gbuf || !w->reply) _exit(5);

    cf_set_secret(0);   /* before init: a plugin may key process-wide values with auth() */
    cohort_plugin_t *p = NULL;
    cohort_status_t st = cohort_plugin_open(o->plugin, &p);
    if (st != COHORT_SUCCESS) {
        char msg[CF_MSG];
        snprintf(msg, sizeof msg, "rank %d cannot load the plugin: %s", rank,
                 cohort_last_error());
        cf_rec_t h = { R_FATAL, rank, -1, 0, 0, (uint32_t)strlen(msg) + 1 };
        cf_send_rec(fd, &h, msg);
        _exit(1);
    }
    w->ops = p->ops;
    w->ctx = p->ctx;

    static unsigned char fds_before[FD_TRACK];
    int base = count_fds(fds_before);

    for (int k = 0; k < cf_ncases; k++) {
        if (!case_selected(o, k)) continue;
        w->kase = k;
        w->step = 0;
        w->aborted = 0;
        w->err[0] = '\0';
        w->note[0] = '\0';
        w->progress_err = COHORT_SUCCESS;
        w->deadline = cf_now() + o->timeout;
        int rc = cf_cases[k].fn(w);
        if (rc != 0 && !w->err[0]) cf_fail(w, "failed (no detail)");
        if (w->exit_after_report) {
            /* The victim of the peer-exit case leaves without closing anything. */
            cf_rec_t h = { R_REPORT, rank, k, 0, 1, 0 };
            cf_send_rec(fd, &h, NULL);
            cf_rec_t x = { R_EXITING, rank, k, 0, 0, 0 };
            cf_send_rec(fd, &x, NULL);
            _exit(0);
        }
        cf_close_world(w);
        free_allocs(w);
        if (base >= 0 && !w->err[0]) {
            int now = count_fds(NULL);
            if (now > base) {
                char list[300];
                describe_new_fds(fds_before, list, sizeof list);
                cf_fail(w, "file descriptor leak: %d open before the case, %d after closing "
                        "everything (%s)", base, now, list);
            }
        }
        const char *text = w->err[0] ? w->err : w->note;
        cf_rec_t h = { R_REPORT, rank, k, 0, w->err[0] ? 0 : 1, (uint32_t)strlen(text) + 1 };
        if (cf_send_rec(fd, &h, text) != 0) _exit(4);
        w->deadline = cf_now() + o->timeout;
        gather_step(w, NULL, 0, CF_STEP_END, 0);
    }
    cf_rec_t h = { R_DONE, rank, -1, 0, 0, 0 };
    cf_send_rec(fd, &h, NULL);
    cohort_plugin_close(p);
    free(w->gbuf);
    free(w->reply);
    free(w->allocs);
    close(fd);
    exit(0);
}
