/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport (libcohort-shm.so): point-to-point within one node.
 *
 * Knows only <cohort/plugin.h>: logging, errors, settings and the job's HMAC come from the host
 * table. Nothing blocks; work happens in progress()/test()/conn_test().
 *
 * Segments and connections
 *   Every endpoint publishes the NAME of a POSIX shm segment (/cohort-<jobhash>-<comm>-<rank>-
 *   <pid>-<n>) but creates it only at its first accept(): all the memory of a connection lives
 *   in the ACCEPTOR's segment, in the slot of the connecting rank, so the connector has no
 *   segment of its own and nobody ever maps two segments for one pair. The segment is sized for
 *   nranks slots (ftruncate: sparse on tmpfs); accept(peer) fallocates that peer's slot (so a
 *   full /dev/shm is a clean ENOSPC error, never a SIGBUS later) and marks it ready.
 *   connect() is one shm_open+mmap of the acceptor's header and our slot, retried from
 *   conn_test while the segment or the slot does not exist yet (accept not called yet).
 *   Handshake in the slot: the connector writes a hello (rank, pid, CMA probe address and value,
 *   its segment name, and an HMAC from host->auth over them sealed to the segment header's
 *   authenticated values: job id, comm id, the owner's rank and pid and its fresh nonce; the
 *   plugin kit's form, shm_conn.c) and sets state=HELLO; the acceptor checks it (a bad hello is
 *   refused with a WARN line and the slot is reset), probes CMA towards the connector, and sets
 *   ack=ACCEPTED. The segment header carries the owner's HMAC too, so a connector cannot be
 *   fooled by a segment of another job.
 * Unlinking (no leftovers in /dev/shm)
 *   The owner shm_unlink()s its segment name as soon as every accept() posted on the endpoint so
 *   far has completed its handshake (the core posts all connect/accept calls of a communicator
 *   in one loop, so nobody needs the name afterwards); ep_close unlinks it if still linked. So
 *   once a communicator is connected nothing is left in /dev/shm whatever happens next (exit,
 *   abort, SIGKILL). The window left: a rank killed between its accept() and the end of the
 *   handshakes; then its connectors, which watch its pid, unlink the segment when they see it
 *   die, so only a set-up in which the owner AND all its connectors are killed leaves it
 *   behind. Consequence of the early unlink: accept() calls made on an endpoint AFTER
 *   all earlier accepts completed cannot be served (the connector times out at shm_open).
 * Data path (per direction: one single-producer/single-consumer ring of fixed cells)
 *   cell = 64-byte header {tag, msg len, fragment offset, fragment len, kind, addr, seq} + up to
 *   8128 bytes payload (8 KiB cells: two pages, big enough that a 64 KiB eager message is 9
 *   cells, small enough that a ring of 1 MiB per connection holds 60+ of them).
 *   - messages <= eager limit (64 KiB), or any size when CMA is not permitted: copied in as
 *     fragments through the ring and copied out into the posted receive (the ring doubles as the
 *     staging area of the copy-in/copy-out fallback; a sender whose message does not fit waits
 *     for space, bounded work per call).
 *   - larger messages with CMA: one RNDV cell {tag, len, sender address}; the receiver, once its
 *     matching irecv is at the head, process_vm_readv()s straight into the user buffer, at most
 *     1 MiB per call, then bumps the direction's rdone counter, which completes the sender's
 *     request (rendezvous sends complete in order, so a counter is enough: no ack cells, no
 *     ring space needed for acks).
 *   head/tail/rdone are C11 atomics on their own cache lines, release on publish, acquire on read.
 * Peer loss: each side records its pid; a conn with pending work polls a pidfd of the peer (or
 *   kill(pid, 0) without pidfd) at most every 2 ms, the clock being read every 64th call only;
 *   conn_close/ep_close set a closed flag in the slot that the peer sees at once.
 * Sleeping (ep_fd): each endpoint owns an abstract-namespace UNIX datagram socket. A reader
 *   that has been idle for 64 calls and 20 us arms a per-direction flag in the slot (seq_cst)
 *   and re-checks once; a writer, after each publish the reader may wait for (cells, freed
 *   space, rdone, closed), loads the flag and, if armed, clears it and sends one datagram. So a
 *   spinning reader costs writers one load per publish, and a sleeping one is woken by the
 *   kernel. Dead peers cannot wake anyone: the core's 2 ms poll cap bounds that. Details at the
 *   "wake-up" section below.
 * Node collectives (coll.c, the ABI 1.1 collective table): rank 0's segment carries, after the
 *   slots, a collective area of (nranks + 1) x 4 rounds of COHORT_SHM_COLL_CHUNK bytes (rank 0's
 *   value; its header says where and how big), fallocated at creation and mapped by every
 *   connector of rank 0, so it is unlinked with the segment. colls() offers every collective
 *   once each peer has a ready connection; the core uses them only if all ranks agree. The
 *   collective's waits take part in the same arming as the connections
 *   (shm_ep_arm/shm_ep_disarm), and a waited-for peer is checked through its connection (pidfd,
 *   closed flag). At the endpoint's
 *   first close call (cohort_comm_destroy closes the connections before the endpoint, and the
 *   one to rank 0 takes the area with it), the ranks compare what they ran (shm_coll_finish: a
 *   small broadcast's root waits for no one, so roots that disagreed on the last call are seen
 *   only there), waiting up to SHM_FIN_WAIT_MS for peers that are still there and have not got
 *   as far; a difference is ep_close's COHORT_ERR_MISMATCH.
 * Not thread-safe: the core serialises calls per endpoint.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"
#include "transports/common/kit_objs.h"
#include "transports/common/kit_settings.h"
#include "transports/common/kit_table.h"

#include "shm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

static int read_small_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = 0;
    return 0;
}

static void make_nonce(unsigned char *nonce)
{
    if (getrandom(nonce, SHM_NONCE_LEN, GRND_NONBLOCK) == (ssize_t)SHM_NONCE_LEN) return;
    static _Atomic uint64_t counter;
    uint64_t t = shm_now_ns(), c = atomic_fetch_add(&counter, 1) + 1;
    kit_put_le64(nonce, t ^ ((uint64_t)getpid() << 32));
    kit_put_le64(nonce + 8, c);
}

/* ---- the ABI ----------------------------------------------------------------------------- */

static cohort_status_t shm_init(const cohort_host_v1_t *host, cohort_tp_ctx_t *ctx)
{
    if (!host || !ctx) return COHORT_ERR_INVALID_ARG;
    if (!COHORT_HAS_FIELD(host, cohort_host_v1_t, auth) || !host->log ||
        !host->error || !host->setting || !host->setting_long || !host->auth) {
        if (COHORT_HAS_FIELD(host, cohort_host_v1_t, error) && host->error)
            return host->error(COHORT_ERR_UNSUPPORTED, "shm: the core's host table is too old "
                               "or incomplete (size %zu)", host->size);
        return COHORT_ERR_UNSUPPORTED;
    }
    shm_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for the plugin context");
    c->host = host;
    const char *hid = host->setting("COHORT_HOSTID");
    if (hid && *hid) {
        snprintf(c->nodeid, sizeof c->nodeid, "%s", hid);
    } else {
        char hn[128] = "", boot[64] = "";
        if (gethostname(hn, sizeof hn - 1) < 0) hn[0] = 0;
        if (read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot) < 0) {
            free(c);
            return host->error(COHORT_ERR_UNSUPPORTED, "shm: cannot read "
                               "/proc/sys/kernel/random/boot_id (%s) to identify this node; "
                               "set COHORT_HOSTID", strerror(errno));
        }
        snprintf(c->nodeid, sizeof c->nodeid, "%s:%s", hn, boot);
    }
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) c->pidns = (uint64_t)st.st_ino;
    uint64_t probe = 0x1234567890abcdefull, v = 0;
    c->cma_self = shm_cma_read(getpid(), &v, (uint64_t)(uintptr_t)&probe, sizeof v) == 0 &&
                  v == probe;
    if (!c->cma_self)
        host->log(COHORT_LOG_INFO, SUBSYS, "shm: process_vm_readv is not permitted in this "
                  "process (%s); large messages go by copy through shared memory",
                  strerror(errno));
    *ctx = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_finalize(cohort_tp_ctx_t ctxv)
{
    free(ctxv);
    return COHORT_SUCCESS;
}

static cohort_status_t shm_get_attr(cohort_tp_ctx_t ctxv, cohort_transport_attr_t *attr)
{
    (void)ctxv;
    return cohort_attr_give(attr, COHORT_SCOPE_NODE, 8.0 /* rough: one memory copy */, 0.5);
}

/* ---- settings: the plugin's table (cohort-info prints it, the core checks every value) ---- */

static int coll_chunk_check(const char *value, char *why, size_t len)
{
    long c = strtol(value, NULL, 10);
    if (c == 0 || c >= 4096) return 0;
    snprintf(why, len, "bytes per round of the node collectives are 4096 to %ld, or 0 for none "
             "(collectives then run over point-to-point)", SHM_COLL_MAX_ROUND);
    return 1;
}

KIT_LONG(set_segment, "COHORT_SHM_SEGMENT_SIZE", "1048576",
         "shm: bytes of shared memory per connection (both directions), 64 KiB to 1 GiB",
         SHM_MIN_SLOT, SHM_MAX_SLOT);
KIT_LONG(set_eager, "COHORT_SHM_EAGER_LIMIT", "65536",
         "shm: messages up to this size go through the shared ring, larger ones single-copy "
         "(CMA); 0 to 1 GiB", 0, 1L << 30);
KIT_LONG(set_cma, "COHORT_SHM_CMA", "1",
         "shm: 1 uses process_vm_readv for large messages when permitted; 0 copies through "
         "shared memory", 0, 1);
KIT_LONG(set_map, "COHORT_SHM_MAP", "1",
         "shm: 1 lets node collectives read buffers from cohort_mem_alloc in place (every rank's "
         "must come from there); 0 copies them through staging like any memory", 0, 1);
KIT_LONG(set_stream, "COHORT_SHM_STREAM", "2",
         "shm: how staged node collectives write their slots: 0 ordinary stores, 1 streaming "
         "(non-temporal) stores, 2 both tried and the faster used, per message size (which is "
         "faster depends on whether the ranks' cores share a cache)", 0, 2);
KIT_SETTING(set_coll_chunk, "COHORT_SHM_COLL_CHUNK", "262144",
            "shm: bytes per round of the node collectives (rank 0's value is used), 4 KiB to 64 "
            "MiB; 0: no node collectives (point-to-point algorithms instead)", COHORT_PSET_LONG,
            0, SHM_COLL_MAX_ROUND, NULL, coll_chunk_check);

static const cohort_plugin_setting_v1_t *const shm_settings[] = {
    &set_segment, &set_eager, &set_cma, &set_map, &set_stream, &set_coll_chunk, NULL
};

static cohort_status_t shm_ep_open(cohort_tp_ctx_t ctxv, const cohort_ep_info_t *info,
                                   cohort_tp_ep_t *epp, void *addr, size_t *addrlen)
{
    shm_ctx_t *ctx = (shm_ctx_t *)ctxv;
    const cohort_host_v1_t *host = ctx->host;
    cohort_status_t st = cohort_ep_open_check(host, "shm", info, epp, addr, addrlen);
    if (st) return st;
    _Static_assert(SHM_JOBID_LEN > 63, "a job id of 63 characters (cohort_ep_open_check) fits");
    const char *job = info->job_id ? info->job_id : "";
    if (*addrlen < sizeof(shm_addr_t))
        return host->error(COHORT_ERR_INVALID_ARG, "shm: ep_open: the address buffer holds %zu "
                           "bytes, %zu needed", *addrlen, sizeof(shm_addr_t));
    long slot, eager, cma, map, stream, coll_chunk;
    if ((st = kit_setting_long(host, &set_segment, &slot)) ||
        (st = kit_setting_long(host, &set_eager, &eager)) ||
        (st = kit_setting_long(host, &set_cma, &cma)) ||
        (st = kit_setting_long(host, &set_map, &map)) ||
        (st = kit_setting_long(host, &set_stream, &stream)) ||
        (st = kit_setting_long(host, &set_coll_chunk, &coll_chunk)))
        return st;
    int have_reduce = COHORT_HAS_FIELD(host, cohort_host_v1_t, reduce_finish) &&
                      host->reduce && host->reduce3 && host->reduce_finish;
    shm_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for an endpoint");
    KIT_EP_INIT(ep, ctx, host, info);
    snprintf(ep->job_id, sizeof ep->job_id, "%s", job);
    ep->slot_size = ((size_t)slot + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
    ep->ncells = (ep->slot_size - 3 * SHM_PAGE) / 2 / SHM_CELL_SIZE;
    ep->eager = (size_t)eager;
    ep->cma_allowed = cma != 0 && ctx->cma_self;
    ep->map_allowed = map != 0;
    ep->stream = (int)stream;
    ep->segfd = -1;
    if (coll_chunk && have_reduce)
        ep->coll_round = shm_coll_round(info->nranks, (size_t)coll_chunk);
    make_nonce(ep->nonce);
    memcpy(&ep->probe_value, ep->nonce, sizeof ep->probe_value);
    ep->probe_value |= 1;
    static _Atomic unsigned counter;
    snprintf(ep->segname, sizeof ep->segname, "/cohort-%08x-%llx-%d-%d-%u", shm_fnv32(job),
             (unsigned long long)info->comm_id, info->rank, (int)getpid(),
             atomic_fetch_add(&counter, 1));
    /* wake socket: without one ep_fd is -1 and the core just spins/yields as before */
    ep->wfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    shm_wake_name(&ep->self_sa, &ep->self_salen, ep->segname);
    if (ep->wfd >= 0 &&
        bind(ep->wfd, (const struct sockaddr *)&ep->self_sa, ep->self_salen) < 0) {
        close(ep->wfd);
        ep->wfd = -1;
    }
    if (ep->wfd < 0)
        host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d: no wake-up socket (%s): waiting ranks "
                  "poll instead of sleeping", ep->rank, strerror(errno));
    shm_addr_t a;
    memset(&a, 0, sizeof a);
    a.magic = SHM_ADDR_MAGIC;
    a.version = SHM_LAYOUT_VERSION;
    a.rank = info->rank;
    a.nranks = info->nranks;
    a.pid = getpid();
    a.comm_id = info->comm_id;
    a.pidns = ctx->pidns;
    snprintf(a.nodeid, sizeof a.nodeid, "%s", ctx->nodeid);
    snprintf(a.job_id, sizeof a.job_id, "%s", job);
    snprintf(a.segname, sizeof a.segname, "%s", ep->segname);
    memcpy(addr, &a, sizeof a);
    *addrlen = sizeof a;
    host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d endpoint %s, %zu bytes per connection "
              "(%llu cells of %zu), eager limit %zu, large messages by %s", ep->rank,
              ep->segname, ep->slot_size, (unsigned long long)ep->ncells, SHM_CELL_SIZE,
              ep->eager, ep->cma_allowed ? "CMA (process_vm_readv)" : "copy");
    *epp = ep;
    return COHORT_SUCCESS;
}

static void conn_free(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    if (c->ctl) {
        atomic_store_explicit(&c->ctl->closed[c->connector ? SIDE_CONN : SIDE_ACC], 1,
                              memory_order_seq_cst);
        if (c->state == C_READY) wake_peer(c);
    }
    if (!c->connector && c->state == C_CONNECTING) {
        ep->naccepts_pending--;
        shm_ep_maybe_unlink(ep);
    }
    while (c->all) shm_req_unlink_all(c->all);
    kit_pool_drain(&c->reqs);
    if (c->coll_map) {
        /* the collective area goes with this conn: no node collective after this */
        shm_coll_free(ep->coll);
        ep->coll = NULL;
        ep->coll_gone = 1;
        munmap(c->coll_map, c->coll_len);
    }
    if (ep->by_peer && c->peer >= 0 && c->peer < ep->nranks && ep->by_peer[c->peer] == c)
        ep->by_peer[c->peer] = NULL;
    if (c->slot) munmap(c->slot, c->slot_size);
    if (c->hdr_map) munmap(c->hdr_map, SHM_PAGE);
    if (c->pidfd >= 0) close(c->pidfd);
    KIT_LIST_UNLINK(ep->conns, c);
    free(c);
}

/* At the endpoint's first close call, while every connection and the area are still there:
 * shm_coll_finish, up to SHM_FIN_WAIT_MS, asleep on our wake socket between looks (armed like a
 * collective's wait: a peer's fin or in wakes us). */
static void ep_finish(shm_ep_t *ep)
{
    if (ep->fin_done) return;
    ep->fin_done = 1;
    if (!ep->coll) return;
    uint64_t deadline = shm_now_ns() + (uint64_t)SHM_FIN_WAIT_MS * 1000000ull;
    int w;
    cohort_status_t st;
    while ((st = shm_coll_finish(ep->coll, deadline, &w)) == COHORT_IN_PROGRESS) {
        if (ep->wfd >= 0) shm_ep_drain(ep);
        shm_coll_arm(ep->coll);
        atomic_thread_fence(memory_order_seq_cst);   /* our flag before the peers' fin and in */
        st = shm_coll_finish(ep->coll, deadline, &w);
        if (st == COHORT_IN_PROGRESS) {
            uint64_t now = shm_now_ns();
            int ms = now < deadline ? (int)((deadline - now) / 1000000ull) + 1 : 0;
            if (ms > SHM_FIN_POLL_MS) ms = SHM_FIN_POLL_MS;
            if (ep->wfd >= 0) {
                struct pollfd p = { ep->wfd, POLLIN, 0 };
                (void)poll(&p, 1, ms);
            } else {
                struct timespec ts = { 0, (long)ms * 1000000L };
                (void)nanosleep(&ts, NULL);
            }
        }
        shm_coll_disarm(ep->coll);
        if (st != COHORT_IN_PROGRESS) break;
    }
    ep->fin_st = st;
}

static cohort_status_t shm_ep_close(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    if (!ep) return COHORT_SUCCESS;
    ep_finish(ep);
    while (ep->conns) conn_free(ep->conns);
    if (ep->hdr && ep->linked) {   /* connectors still waiting for an accept: it will not come */
        int n = ep->nranks < SHM_HDR_STATES ? ep->nranks : SHM_HDR_STATES;
        for (int r = 0; r < n; r++) {
            uint8_t expect = SLOT_UNKNOWN;
            atomic_compare_exchange_strong(hdr_state(ep->hdr, r), &expect, SLOT_CLOSED);
        }
    }
    shm_coll_free(ep->coll);
    free(ep->by_peer);
    if (ep->coll_area) munmap(ep->coll_area, ep->coll_len);
    if (ep->wfd >= 0) close(ep->wfd);
    shm_ep_unlink(ep);
    if (ep->hdr) munmap(ep->hdr, SHM_PAGE);
    if (ep->segfd >= 0) close(ep->segfd);
    cohort_status_t st = ep->fin_st;
    free(ep);
    return st;
}

static int addr_parse(const void *blob, size_t len, shm_addr_t *a)
{
    if (!blob || len != sizeof *a) return -1;
    memcpy(a, blob, sizeof *a);
    if (a->magic != SHM_ADDR_MAGIC || a->version != SHM_LAYOUT_VERSION) return -1;
    a->nodeid[SHM_NODEID_LEN - 1] = 0;
    a->job_id[SHM_JOBID_LEN - 1] = 0;
    a->segname[SHM_SEGNAME_LEN - 1] = 0;
    return 0;
}

static int shm_can_reach(cohort_tp_ep_t epv, int peer, const void *peer_addr, size_t addrlen)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    shm_addr_t a;
    if (!ep || addr_parse(peer_addr, addrlen, &a) < 0) return 0;
    (void)peer;
    return strcmp(a.nodeid, ep->ctx->nodeid) == 0 && a.pidns == ep->ctx->pidns &&
           strcmp(a.job_id, ep->job_id) == 0;
}

static shm_conn_t *conn_new(shm_ep_t *ep, int peer, int connector)
{
    shm_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    KIT_CONN_INIT(c, ep, peer, connector, C_CONNECTING);
    c->pidfd = -1;
    kit_pool_init(&c->reqs, sizeof(shm_req_t), SHM_REQ_CACHE);
    KIT_LIST_PUSH(ep->conns, c);
    return c;
}

static cohort_status_t shm_connect(cohort_tp_ep_t epv, int peer, const void *peer_addr,
                                   size_t addrlen, cohort_tp_conn_t *connp)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    cohort_status_t st = kit_conn_args(host, "shm", "connect", ep->rank, ep->nranks, peer, connp);
    if (st) return st;
    shm_addr_t a;
    if (addr_parse(peer_addr, addrlen, &a) < 0)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: the address of rank %d is not "
                           "a shm address of this version (%zu bytes)", peer, addrlen);
    if (a.rank != peer || a.comm_id != ep->comm_id || strcmp(a.job_id, ep->job_id) ||
        a.nranks != ep->nranks)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: the address given for rank %d "
                           "belongs to rank %d of job '%s', communicator %llx", peer, a.rank,
                           a.job_id, (unsigned long long)a.comm_id);
    if (strcmp(a.nodeid, ep->ctx->nodeid) || a.pidns != ep->ctx->pidns)
        return host->error(COHORT_ERR_INVALID_ARG, "shm: connect: rank %d is on node '%s', rank "
                           "%d on '%s': shared memory only reaches ranks of one node", peer,
                           a.nodeid, ep->rank, ep->ctx->nodeid);
    shm_conn_t *c = conn_new(ep, peer, 1);
    if (!c) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a connection");
    c->paddr = a;
    shm_connector_step(c);
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_accept(cohort_tp_ep_t epv, int peer, cohort_tp_conn_t *connp)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    cohort_status_t st = kit_conn_args(host, "shm", "accept", ep->rank, ep->nranks, peer, connp);
    if (st) return st;
    for (shm_conn_t *o = ep->conns; o; o = o->next)
        if (!o->connector && o->peer == peer)
            return host->error(COHORT_ERR_INVALID_ARG, "shm: accept: rank %d is already "
                               "accepted on this endpoint", peer);
    if (!ep->hdr) {
        if (ep->segfd >= 0)   /* an earlier creation failed half-way (reported then) */
            return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: segment %s could not be set "
                               "up (see the earlier error)", ep->rank, ep->segname);
        if ((st = shm_ep_create_segment(ep))) return st;
    } else if (!ep->linked) {
        return host->error(COHORT_ERR_INVALID_ARG, "shm: rank %d: accept(%d) after every "
                           "earlier accept of the endpoint completed and its segment %s was "
                           "unlinked; post all accepts of an endpoint before waiting on them",
                           ep->rank, peer, ep->segname);
    }
    off_t off = (off_t)(SHM_PAGE + (size_t)peer * ep->slot_size);
    int rc = posix_fallocate(ep->segfd, off, (off_t)ep->slot_size);
    void *s = rc ? MAP_FAILED : mmap(NULL, ep->slot_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                                     ep->segfd, off);
    if (s == MAP_FAILED) {
        int e = rc ? rc : errno;
        /* tell the connector now, rather than let it wait for COHORT_TIMEOUT */
        if (peer < SHM_HDR_STATES)
            atomic_store_explicit(hdr_state(ep->hdr, peer), SLOT_FAILED, memory_order_release);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: allocating %zu bytes of shared "
                           "memory for rank %d in segment %s failed: %s; df -h /dev/shm, then "
                           "raise its size (containers: --shm-size) or lower "
                           "COHORT_SHM_SEGMENT_SIZE", ep->rank, ep->slot_size, peer, ep->segname,
                           strerror(e));
    }
    shm_conn_t *c = conn_new(ep, peer, 0);
    if (!c) {
        munmap(s, ep->slot_size);
        return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a connection");
    }
    c->slot = s;
    c->slot_size = ep->slot_size;
    c->ncells = ep->ncells;
    shm_conn_setup_dirs(c);
    /* fresh slot (a reused one of a closed conn is wiped) */
    memset(c->ctl, 0, sizeof *c->ctl);
    shm_ring_init(&c->tx);
    shm_ring_init(&c->rx);
    atomic_store_explicit(&c->ctl->ready, 1, memory_order_release);
    if (peer < SHM_HDR_STATES)
        atomic_store_explicit(hdr_state(ep->hdr, peer), SLOT_READY, memory_order_release);
    ep->naccepts_pending++;
    *connp = c;
    return COHORT_SUCCESS;
}

static cohort_status_t shm_conn_test(cohort_tp_conn_t connv)
{
    shm_conn_t *c = (shm_conn_t *)connv;
    uint64_t ev0 = c->ep->nevents;
    if (c->state == C_CONNECTING) shm_conn_progress(c);
    shm_ep_after(c->ep, ev0);
    if (c->state == C_FAILED) return c->ep->host->error(c->err, "%s", c->errmsg);
    return c->state == C_READY ? COHORT_SUCCESS : COHORT_IN_PROGRESS;
}

static cohort_status_t shm_conn_close(cohort_tp_conn_t connv)
{
    if (!connv) return COHORT_SUCCESS;
    ep_finish(((shm_conn_t *)connv)->ep);   /* the first close: ep_close returns its status */
    conn_free((shm_conn_t *)connv);
    return COHORT_SUCCESS;
}

static cohort_status_t post(shm_conn_t *c, int is_send, void *buf, size_t len, uint64_t tag,
                            cohort_tp_req_t *reqp)
{
    const cohort_host_v1_t *host = c->ep->host;
    cohort_status_t st = kit_post_args(host, "shm", is_send, buf, len, c->peer, reqp,
                                       c->state == C_FAILED ? c->err : COHORT_SUCCESS, c->errmsg);
    if (st) return st;
    shm_req_t *r = kit_pool_get(&c->reqs);   /* zeroed, from the conn's cache when it has one */
    if (!r) return host->error(COHORT_ERR_NO_MEMORY, "shm: no memory for a request");
    r->conn = c;
    r->is_send = is_send;
    r->buf = buf;
    r->len = len;
    r->tag = tag;
    shm_all_add(&c->all, r);
    rq_push(is_send ? &c->sendq : &c->recvq, r);
    *reqp = r;
    uint64_t ev0 = c->ep->nevents;
    shm_conn_progress(c);
    shm_ep_after(c->ep, ev0);
    return COHORT_SUCCESS;
}

static cohort_status_t shm_isend(cohort_tp_conn_t connv, const void *buf, size_t len,
                                 uint64_t tag, cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((shm_conn_t *)connv, 1, (void *)(uintptr_t)buf, len, tag, req);
}

static cohort_status_t shm_irecv(cohort_tp_conn_t connv, void *buf, size_t len, uint64_t tag,
                                 cohort_tp_mr_t mr, cohort_tp_req_t *req)
{
    (void)mr;
    return post((shm_conn_t *)connv, 0, buf, len, tag, req);
}

static cohort_status_t shm_test(cohort_tp_req_t reqv, size_t *nbytes)
{
    shm_req_t *r = (shm_req_t *)reqv;
    shm_conn_t *c = r->conn;
    if (!r->done) {
        shm_ep_t *ep = c->ep;
        uint64_t ev0 = ep->nevents;
        ep->testing = r;
        shm_conn_progress(c);
        ep->testing = NULL;
        shm_ep_after(ep, ev0);
    }
    if (!r->done) return COHORT_IN_PROGRESS;
    cohort_status_t st = kit_req_outcome(c->ep->host, r->status, r->nbytes, nbytes, r->errmsg,
                                         c->errmsg);
    shm_req_unlink_all(r);
    return st;
}

static cohort_status_t shm_progress(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    uint64_t ev0 = ep->nevents;
    /* armed and woken (a peer cleared one of our flags, or we kicked): disarm; shm_ep_after re-arms
     * (drain, flags, fence, re-check) if still idle. Not woken: stay armed, no syscall. */
    if (ep->armed && shm_ep_drain(ep) > 0) shm_ep_disarm(ep);
    for (shm_conn_t *c = ep->conns; c; c = c->next) shm_conn_progress(c);
    ep->done_since_progress = 0;
    shm_ep_after(ep, ev0);
    return COHORT_SUCCESS;
}

KIT_EP_FD(shm_ep_fd, shm_ep_t, wfd)

/* ---- node collectives (protocol in coll.c) ------------------------------------------------ */

/* The connection to peer (built with the collective state), or NULL. */
static shm_conn_t *conn_of(shm_ep_t *ep, int peer)
{
    return peer >= 0 && peer < ep->nranks && ep->by_peer ? ep->by_peer[peer] : NULL;
}

static cohort_status_t coll_peer_check(void *epv, int peer, int report)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c) return COHORT_SUCCESS;
    if (!report) {   /* look only */
        if (c->state == C_FAILED) return c->err;
        if (c->state == C_READY &&
            atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
            return COHORT_ERR_PEER_LOST;
        if (c->state == C_READY && shm_now_ns() >= c->next_live_check &&
            shm_pid_gone(c->pidfd, c->peer_pid))
            return COHORT_ERR_PEER_LOST;
        return COHORT_SUCCESS;
    }
    if (c->state == C_READY &&
        atomic_load_explicit(&c->ctl->closed[peer_side(c)], memory_order_acquire))
        shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) closed its endpoint "
                      "(destroyed or aborted its communicator) while rank %d waited for it in "
                      "a node collective", c->peer, c->peer_pid, ep->rank);
    else if (c->state == C_READY)
        shm_check_peer_alive(c, 1);
    if (c->state == C_FAILED) return ep->host->error(c->err, "%s", c->errmsg);
    return COHORT_SUCCESS;
}

static void coll_wake(void *epv, int peer)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c || ep->wfd < 0 || !c->peer_salen) return;
    char b = 1;
    (void)sendto(ep->wfd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&c->peer_sa, c->peer_salen);
}

static int coll_read(void *epv, int peer, void *dst, uint64_t addr, size_t len)
{
    shm_ep_t *ep = epv;
    shm_conn_t *c = conn_of(ep, peer);
    if (!c || c->peer_pid <= 0) return -ESRCH;
    return shm_cma_read(c->peer_pid, dst, addr, len);
}

/* The area (rank 0's, or our mapping of it) once every peer is connected; else NULL. */
static void *coll_area(shm_ep_t *ep)
{
    if (ep->nranks < 2 || ep->coll_gone) return NULL;
    if (ep->rank == 0) return ep->coll_area;
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->peer == 0 && c->connector && c->state == C_READY) return c->coll_map;
    return NULL;
}

static int coll_ready(shm_ep_t *ep)
{
    if (ep->coll) return 1;
    void *area = coll_area(ep);
    if (!area) return 0;
    shm_conn_t **by = calloc((size_t)ep->nranks, sizeof *by);
    if (!by) return 0;
    for (shm_conn_t *c = ep->conns; c; c = c->next)
        if (c->state == C_READY && c->peer >= 0 && c->peer < ep->nranks) by[c->peer] = c;
    for (int r = 0; r < ep->nranks; r++)
        if (r != ep->rank && !by[r]) {
            free(by);
            return 0;
        }
    /* single copy for allgather only if we can read every peer (the CMA probe) */
    int cma = ep->cma_allowed;
    for (int r = 0; r < ep->nranks; r++)
        if (r != ep->rank && !by[r]->rx_cma) cma = 0;
    shm_coll_hooks_t hooks = { ep, coll_peer_check, coll_wake, coll_read, cma, ep->map_allowed,
                               ep->stream };
    ep->coll = shm_coll_new(area, ep->rank, ep->nranks, ep->host, &hooks);
    if (!ep->coll) {
        free(by);
        return 0;
    }
    free(ep->by_peer);
    ep->by_peer = by;
    return 1;
}

static unsigned shm_colls(cohort_tp_ep_t epv)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    if (!ep || !coll_ready(ep)) return 0;
    return (1u << COHORT_TP_ALLREDUCE) | (1u << COHORT_TP_BROADCAST) | (1u << COHORT_TP_REDUCE) |
           (1u << COHORT_TP_ALLGATHER) | (1u << COHORT_TP_REDUCE_SCATTER) |
           (1u << COHORT_TP_ALLTOALL) | (1u << COHORT_TP_BARRIER);
}

static cohort_status_t shm_coll_test_abi(cohort_tp_req_t req, int *waiting_on, int *movedp)
{
    shm_ep_t *ep = (shm_ep_t *)req;
    uint64_t ev0 = ep->nevents;
    int moved = 0, w = -1;
    cohort_status_t st = ep->coll ? shm_coll_advance(ep->coll, &moved, &w)
                         : ep->host->error(COHORT_ERR_PEER_LOST, "shm: rank %d: the node "
                                           "collective lost its shared area (the connection "
                                           "to rank 0 was closed)", ep->rank);
    if (moved) ep->nevents++;
    shm_ep_after(ep, ev0);
    if (waiting_on) *waiting_on = w;
    if (movedp) *movedp = moved;
    return st;
}

static cohort_status_t shm_coll_start_abi(cohort_tp_ep_t epv, const cohort_tp_coll_args_t *args,
                                          cohort_tp_req_t *req)
{
    shm_ep_t *ep = (shm_ep_t *)epv;
    const cohort_host_v1_t *host = ep->host;
    if (!args || !req || !COHORT_HAS_FIELD(args, cohort_tp_coll_args_t, tag))
        return host->error(COHORT_ERR_INVALID_ARG, "shm: collective start needs arguments "
                           "(of at least the ABI 1.1 size) and a request pointer");
    *req = NULL;
    if (!coll_ready(ep))
        return host->error(COHORT_ERR_UNSUPPORTED, "shm: rank %d: node collectives need every "
                           "rank of the communicator connected through shm and rank 0's "
                           "collective area (COHORT_SHM_COLL_CHUNK=0 turns them off)", ep->rank);
    cohort_status_t st = shm_coll_start(ep->coll, args);
    if (st) return st;
    st = shm_coll_test_abi(ep, NULL, NULL);
    if (st == COHORT_IN_PROGRESS) {
        *req = ep;
        return COHORT_SUCCESS;
    }
    return st;
}

static void shm_coll_cancel_abi(cohort_tp_req_t req)
{
    shm_ep_t *ep = (shm_ep_t *)req;
    if (ep) shm_coll_cancel(ep->coll);
}

static const cohort_transport_coll_v1_t shm_coll_table = {
    .size = sizeof(cohort_transport_coll_v1_t),
    .colls = shm_colls,
    .start = shm_coll_start_abi,
    .test = shm_coll_test_abi,
    .cancel = shm_coll_cancel_abi,
};

/* The plugin's table (kit_table.h: .init = shm_init ... .ep_fd = shm_ep_fd); no memory
 * registration. */
KIT_TRANSPORT_V1(shm, "shm", SHM_PLUGIN_VERSION, .coll = &shm_coll_table,
                 .settings = shm_settings);
