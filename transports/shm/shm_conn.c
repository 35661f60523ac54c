/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shared-memory transport: connections and their handshake. The acceptor's own
 * segment (created at its first accept, unlinked once every accept completed its handshake), the
 * slots of its connections, the connector's and the acceptor's steps of the handshake (hello,
 * HMACs, CMA probe, ack), and peer loss (a pidfd or kill(pid, 0), the closed flags: a failed
 * connection fails its requests). The design is described at the top of shm.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cohort/plugin.h>
#include "transports/common/kit_auth.h"
#include "transports/common/kit_bytes.h"
#include "transports/common/kit_fail.h"

#include "shm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

uint32_t shm_fnv32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int pidfd_open_(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* 1 if the process is gone (exited, even as a zombie not yet reaped), else 0. */
int shm_pid_gone(int pidfd, int pid)
{
    if (pidfd >= 0) {
        struct pollfd p = { pidfd, POLLIN, 0 };
        return poll(&p, 1, 0) > 0;
    }
    return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* The handshake's MACs, in the plugin kit's form (transports/common/kit_auth.h). The segment
 * header lives in shared memory in host order, so what its MAC covers is written out as bytes
 * here: seg_frame, the challenge (label "cohort-shm-seg" NUL, the job id NUL padded to
 * SHM_JOBID_LEN, comm id u64, the owner's rank u32 and pid u32, its fresh nonce), MACed on its
 * own into the header's mac. The connector's hello (label "cohort-shm-hello" NUL, its rank u32
 * and pid u32, its CMA probe address u64 and value u64, its segment name NUL padded to
 * SHM_SEGNAME_LEN) is sealed to that challenge (kit_frame_seal_to), so it answers the owner's
 * nonce and names the owner's job, communicator, rank and pid. Integers little-endian. */
#define SHM_LABEL_SEG   "cohort-shm-seg"
#define SHM_LABEL_HELLO "cohort-shm-hello"
#define SEG_FRAME_LEN   (sizeof SHM_LABEL_SEG + SHM_JOBID_LEN + 16 + SHM_NONCE_LEN)
#define HELLO_FIELDS    (sizeof SHM_LABEL_HELLO + 24 + SHM_SEGNAME_LEN)
#define HELLO_FRAME_LEN (HELLO_FIELDS + KIT_MAC_LEN)
_Static_assert(SHM_MAC_LEN == KIT_MAC_LEN, "shm's MACs are the kit's");
_Static_assert(HELLO_FIELDS + SEG_FRAME_LEN <= KIT_MAC_INPUT_MAX, "a hello's MAC input fits");

static void seg_frame(const char *job, uint64_t comm, int rank, int pid,
                      const unsigned char *nonce, unsigned char out[SEG_FRAME_LEN])
{
    unsigned char *p = out;
    memset(out, 0, SEG_FRAME_LEN);
    memcpy(p, SHM_LABEL_SEG, sizeof SHM_LABEL_SEG);
    p += sizeof SHM_LABEL_SEG;
    memcpy(p, job, strnlen(job, SHM_JOBID_LEN - 1));   /* NUL padded by the memset */
    p += SHM_JOBID_LEN;
    kit_put_le64(p, comm);
    kit_put_le32(p + 8, (uint32_t)rank);
    kit_put_le32(p + 12, (uint32_t)pid);
    memcpy(p + 16, nonce, SHM_NONCE_LEN);
}

/* The hello's fields, then its MAC (mac, or zeros for the sealer to fill in). */
static void hello_frame(int rank, int pid, uint64_t probe_addr, uint64_t probe_value,
                        const char *segname, const unsigned char *mac,
                        unsigned char out[HELLO_FRAME_LEN])
{
    unsigned char *p = out;
    memset(out, 0, HELLO_FRAME_LEN);
    memcpy(p, SHM_LABEL_HELLO, sizeof SHM_LABEL_HELLO);
    p += sizeof SHM_LABEL_HELLO;
    kit_put_le32(p, (uint32_t)rank);
    kit_put_le32(p + 4, (uint32_t)pid);
    kit_put_le64(p + 8, probe_addr);
    kit_put_le64(p + 16, probe_value);
    memcpy(p + 24, segname, strnlen(segname, SHM_SEGNAME_LEN - 1));   /* NUL padded */
    if (mac) memcpy(out + HELLO_FIELDS, mac, KIT_MAC_LEN);
}

/* ---- connection failure ------------------------------------------------------------------ */

void shm_conn_fail(shm_conn_t *c, cohort_status_t st, const char *fmt, ...)
{
    KIT_CONN_FAIL_ONCE(c, C_FAILED, st, fmt);
    /* Tell the peer we gave up, so it does not wait for us. */
    c->ep->nevents++;
    if (c->ctl) {
        atomic_store_explicit(&c->ctl->closed[c->connector ? SIDE_CONN : SIDE_ACC], 1,
                              memory_order_seq_cst);
        wake_peer(c);
    }
    for (shm_req_t *r = c->all; r; r = r->anext) shm_req_finish(r, st);
    c->sendq.h = c->sendq.t = NULL;
    c->rndvq.h = c->rndvq.t = NULL;
    c->recvq.h = c->recvq.t = NULL;
}

/* Peer liveness, rate-limited. Returns 1 if the conn failed. */
int shm_check_peer_alive(shm_conn_t *c, int force)
{
    if (c->state == C_FAILED) return 1;
    if (c->peer_pid <= 0) return 0;
    /* the clock costs more than the rest of a progress call: read it every 64th call only, so
     * the check runs after max(2 ms, 64 calls); idle ranks poll at least every 2 ms (the core's
     * cap), so a dead peer is still seen within ~130 ms */
    if (!force && (++c->live_calls & (SHM_LIVENESS_CALLS - 1))) return 0;
    uint64_t t = shm_now_ns();
    if (!force && t < c->next_live_check) return 0;
    c->next_live_check = t + SHM_LIVENESS_NS;
    if (shm_pid_gone(c->pidfd, c->peer_pid)) {
        /* the owner of the segment died: if it had not unlinked it yet (killed during set-up),
         * nobody else will */
        if (c->connector) (void)shm_unlink(c->paddr.segname);
        shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) on this node exited or was "
                      "killed while rank %d was still using the connection (segment %s); see that "
                      "rank's output for why it died", c->peer, c->peer_pid, c->ep->rank,
                      c->connector ? c->paddr.segname : c->ep->segname);
        return 1;
    }
    return 0;
}

/* ---- our own segment --------------------------------------------------------------------- */

void shm_ep_unlink(shm_ep_t *ep)
{
    if (!ep->linked) return;
    if (shm_unlink(ep->segname) < 0 && errno != ENOENT)
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "shm: shm_unlink(%s) failed: %s; remove it by "
                      "hand from /dev/shm", ep->segname, strerror(errno));
    ep->linked = 0;
}

cohort_status_t shm_ep_create_segment(shm_ep_t *ep)
{
    const cohort_host_v1_t *host = ep->host;
    ep->seg_size = SHM_PAGE + (size_t)ep->nranks * ep->slot_size;
    size_t coll_off = ep->seg_size, coll_bytes = 0;
    if (ep->rank == 0 && ep->nranks > 1 && ep->coll_round) {
        coll_bytes = shm_coll_area_bytes(ep->nranks, ep->coll_round);
        ep->seg_size += coll_bytes;
    }
    int fd = shm_open(ep->segname, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: shm_open(%s) failed: %s; is "
                           "/dev/shm mounted and writable (a stale segment of the same name "
                           "from a crashed run can be removed from /dev/shm)?", ep->rank,
                           ep->segname, strerror(errno));
    ep->linked = 1;
    ep->segfd = fd;
    if (ftruncate(fd, (off_t)ep->seg_size) < 0) {
        int e = errno;
        shm_ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: sizing segment %s to %zu bytes "
                           "failed: %s; df -h /dev/shm; raise its size or lower "
                           "COHORT_SHM_SEGMENT_SIZE", ep->rank, ep->segname, ep->seg_size,
                           strerror(e));
    }
    void *m = mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        shm_ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: mmap of segment %s failed: %s",
                           ep->rank, ep->segname, strerror(e));
    }
    int rc = posix_fallocate(fd, 0, (off_t)SHM_PAGE);
    if (rc != 0) {
        munmap(m, SHM_PAGE);
        shm_ep_unlink(ep);
        return host->error(COHORT_ERR_SYSTEM, "shm: rank %d: allocating segment %s failed: %s; "
                           "df -h /dev/shm; raise its size or lower COHORT_SHM_SEGMENT_SIZE",
                           ep->rank, ep->segname, strerror(rc));
    }
    if (coll_bytes) {
        rc = posix_fallocate(fd, (off_t)coll_off, (off_t)coll_bytes);
        void *area = rc ? MAP_FAILED : mmap(NULL, coll_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                                            fd, (off_t)coll_off);
        if (area == MAP_FAILED) {   /* run without node collectives, and say so */
            int e = rc ? rc : errno;
            host->log(COHORT_LOG_WARN, SUBSYS, "shm: rank %d: no node collectives: allocating "
                      "their %zu-byte area in segment %s failed: %s; collectives run over "
                      "point-to-point instead (df -h /dev/shm; raise its size, or lower "
                      "COHORT_SHM_COLL_CHUNK)", ep->rank, coll_bytes, ep->segname, strerror(e));
            coll_bytes = 0;
        } else {
            shm_coll_area_init(area, ep->nranks, ep->coll_round);
            ep->coll_area = area;
            ep->coll_len = coll_bytes;
        }
    }
    seg_hdr_t *h = m;
    memset(h, 0, sizeof *h);
    h->coll_off = coll_bytes ? coll_off : 0;
    h->coll_bytes = coll_bytes;
    h->version = SHM_LAYOUT_VERSION;
    h->nranks = (uint32_t)ep->nranks;
    h->rank = ep->rank;
    h->pid = getpid();
    h->comm_id = ep->comm_id;
    h->slot_size = ep->slot_size;
    h->ncells = ep->ncells;
    h->cell_size = SHM_CELL_SIZE;
    h->probe_addr = (uint64_t)(uintptr_t)&ep->probe_value;
    h->probe_value = ep->probe_value;
    memcpy(h->nonce, ep->nonce, SHM_NONCE_LEN);
    unsigned char sf[SEG_FRAME_LEN];
    seg_frame(ep->job_id, ep->comm_id, ep->rank, h->pid, ep->nonce, sf);
    const kit_part_t part = { sf, sizeof sf };
    (void)kit_mac_parts(host, &part, 1, h->mac);
    atomic_thread_fence(memory_order_release);
    h->magic = SHM_SEG_MAGIC;
    ep->hdr = h;
    return COHORT_SUCCESS;
}

void shm_conn_setup_dirs(shm_conn_t *c)
{
    unsigned char *d0 = c->slot + SHM_PAGE;
    unsigned char *d1 = d0 + dir_bytes(c->ncells);
    c->ctl = (slot_ctl_t *)(void *)c->slot;
    if (c->connector) {
        shm_ring_attach(&c->tx, d1, c->ncells);
        shm_ring_attach(&c->rx, d0, c->ncells);
    } else {
        shm_ring_attach(&c->tx, d0, c->ncells);
        shm_ring_attach(&c->rx, d1, c->ncells);
    }
}

/* ---- connection setup -------------------------------------------------------------------- */

void shm_ep_maybe_unlink(shm_ep_t *ep)
{
    if (ep->linked && ep->hdr && ep->naccepts_pending == 0) shm_ep_unlink(ep);
}

static void conn_ready(shm_conn_t *c)
{
    c->state = C_READY;
    c->ep->nevents++;
    c->tx_cma = (int)atomic_load_explicit(&c->ctl->cma_ok[c->connector ? SIDE_CONN : SIDE_ACC],
                                          memory_order_acquire);
    c->rx_cma = (int)atomic_load_explicit(&c->ctl->cma_ok[c->connector ? SIDE_ACC : SIDE_CONN],
                                          memory_order_acquire);
    c->ep->host->log(COHORT_LOG_TRACE, SUBSYS, "shm: rank %d connected to rank %d (pid %d), "
                     "large messages %s", c->ep->rank, c->peer, c->peer_pid,
                     c->rx_cma ? "by CMA" : "by copy through the ring");
    if (!c->connector) {
        c->ep->naccepts_pending--;
        shm_ep_maybe_unlink(c->ep);
    }
    if (c->pidfd < 0 && c->peer_pid > 0) c->pidfd = pidfd_open_(c->peer_pid);
}

/* Probes CMA towards pid at addr; returns 1 if it reads the expected value. */
static int cma_probe(shm_ep_t *ep, int pid, uint64_t addr, uint64_t expect, int peer)
{
    if (!ep->cma_allowed) return 0;
    uint64_t v = 0;
    int rc = shm_cma_read(pid, &v, addr, sizeof v);
    if (rc == 0 && v == expect) return 1;
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        ep->host->log(COHORT_LOG_INFO, SUBSYS, "shm: rank %d cannot read rank %d (pid %d) with "
                      "process_vm_readv (%s): large messages go by copy through shared memory "
                      "(check /proc/sys/kernel/yama/ptrace_scope, or the container's seccomp "
                      "profile and CAP_SYS_PTRACE)", ep->rank, peer, pid,
                      rc ? strerror(-rc) : "wrong value");
    return 0;
}

/* Connector, while the acceptor's segment exists but is not complete: an owner killed half-way
 * through creating it leaves it behind unless we remove it (checked at most every 2 ms). */
static void owner_gone_while_creating(shm_conn_t *c)
{
    uint64_t t = shm_now_ns();
    if (t < c->next_live_check) return;
    c->next_live_check = t + SHM_LIVENESS_NS;
    if (kill(c->paddr.pid, 0) == 0 || errno != ESRCH) return;
    (void)shm_unlink(c->paddr.segname);
    shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) died while creating its segment "
                  "%s (removed it)", c->peer, c->paddr.pid, c->paddr.segname);
}

/* Connector: map the acceptor's header and our slot, write the hello, wait for the ack. */
void shm_connector_step(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    const cohort_host_v1_t *host = ep->host;
    if (!c->slot) {
        int fd = shm_open(c->paddr.segname, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT) {
                /* not created yet (accept not called) or the acceptor is gone */
                uint64_t t = shm_now_ns();
                if (t >= c->next_live_check) {
                    c->next_live_check = t + SHM_LIVENESS_NS;
                    if (kill(c->paddr.pid, 0) < 0 && errno == ESRCH)
                        shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d (pid %d) exited "
                                      "before rank %d could connect to it (segment %s)", c->peer,
                                      c->paddr.pid, ep->rank, c->paddr.segname);
                }
                return;
            }
            shm_conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: shm_open(%s) of rank %d's segment "
                          "failed: %s; do both ranks see the same /dev/shm (containers: "
                          "--ipc=host)?", ep->rank, c->paddr.segname, c->peer, strerror(errno));
            return;
        }
        struct stat stt;
        if (fstat(fd, &stt) < 0 || (size_t)stt.st_size < SHM_PAGE) {
            close(fd);
            owner_gone_while_creating(c);
            return;   /* being created right now */
        }
        seg_hdr_t *h = mmap(NULL, SHM_PAGE, PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            int e = errno;
            close(fd);
            shm_conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: mmap of rank %d's segment %s "
                          "failed: %s", ep->rank, c->peer, c->paddr.segname, strerror(e));
            return;
        }
        if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_SEG_MAGIC) {
            munmap(h, SHM_PAGE);
            close(fd);
            owner_gone_while_creating(c);
            return;   /* header not written yet */
        }
        unsigned char sf[SEG_FRAME_LEN];
        seg_frame(ep->job_id, ep->comm_id, c->peer, c->paddr.pid, h->nonce, sf);
        const kit_part_t part = { sf, sizeof sf };
        size_t need = SHM_PAGE + (size_t)(c->peer > ep->rank ? c->peer : ep->rank + 1) *
                      (size_t)h->slot_size;
        if (h->version != SHM_LAYOUT_VERSION || h->comm_id != ep->comm_id ||
            h->rank != c->peer || h->pid != c->paddr.pid || h->cell_size != SHM_CELL_SIZE ||
            (int)h->nranks != ep->nranks || !kit_mac_parts_valid(host, &part, 1, h->mac) ||
            h->slot_size < (uint64_t)SHM_MIN_SLOT || h->slot_size % SHM_PAGE ||
            h->ncells < 2 || (size_t)stt.st_size < need ||
            2 * dir_bytes(h->ncells) + SHM_PAGE > h->slot_size) {
            munmap(h, SHM_PAGE);
            close(fd);
            shm_conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: segment %s does not belong to "
                          "rank %d of this job and communicator (bad header or HMAC); a stale "
                          "segment or another job's? remove it from /dev/shm", ep->rank,
                          c->paddr.segname, c->peer);
            return;
        }
        c->slot_size = (size_t)h->slot_size;
        c->ncells = h->ncells;
        void *s = mmap(NULL, c->slot_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       (off_t)(SHM_PAGE + (size_t)ep->rank * c->slot_size));
        int e = errno;
        if (s == MAP_FAILED) {
            close(fd);
            munmap(h, SHM_PAGE);
            shm_conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d: mmap of its slot in rank %d's "
                          "segment %s failed: %s", ep->rank, c->peer, c->paddr.segname,
                          strerror(e));
            return;
        }
        if (c->peer == 0 && h->coll_bytes) {
            size_t coff = SHM_PAGE + (size_t)ep->nranks * c->slot_size;
            size_t clen = (size_t)h->coll_bytes, round;
            void *area = MAP_FAILED;
            if (h->coll_off == coff && (size_t)stt.st_size >= coff + clen)
                area = mmap(NULL, clen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)coff);
            if (area == MAP_FAILED || shm_coll_area_check(area, clen, ep->nranks, &round)) {
                e = area == MAP_FAILED ? errno : EINVAL;
                close(fd);
                if (area != MAP_FAILED) munmap(area, clen);
                munmap(s, c->slot_size);
                munmap(h, SHM_PAGE);
                shm_conn_fail(c, COHORT_ERR_TRANSPORT, "shm: rank %d: the collective area of rank "
                              "0's segment %s (%zu bytes at %llu) cannot be used: %s", ep->rank,
                              c->paddr.segname, clen, (unsigned long long)h->coll_off,
                              strerror(e));
                return;
            }
            c->coll_map = area;
            c->coll_len = clen;
        }
        close(fd);
        c->hdr_map = h;
        c->slot = s;
        shm_conn_setup_dirs(c);
        c->peer_pid = c->paddr.pid;
        c->pidfd = pidfd_open_(c->peer_pid);
        shm_wake_name(&c->peer_sa, &c->peer_salen, c->paddr.segname);
    }
    if (ep->rank < SHM_HDR_STATES) {
        uint8_t sst = atomic_load_explicit(hdr_state(c->hdr_map, ep->rank), memory_order_acquire);
        if (sst == SLOT_FAILED) {
            shm_conn_fail(c, COHORT_ERR_SYSTEM, "shm: rank %d could not allocate the shared memory "
                          "for its connection with rank %d (segment %s): /dev/shm is probably "
                          "full; df -h /dev/shm, then raise its size (containers: --shm-size) or "
                          "lower COHORT_SHM_SEGMENT_SIZE", c->peer, ep->rank, c->paddr.segname);
            return;
        }
        if (sst == SLOT_CLOSED) {
            shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d closed its endpoint before "
                          "accepting rank %d (its communicator set-up failed: see its error)",
                          c->peer, ep->rank);
            return;
        }
        if (sst != SLOT_READY) {
            shm_check_peer_alive(c, 0);
            return;   /* accept(us) not called yet: do not touch the slot */
        }
    }
    slot_ctl_t *ctl = c->ctl;
    if (atomic_load_explicit(&ctl->state, memory_order_acquire) == ST_EMPTY) {
        if (!atomic_load_explicit(&ctl->ready, memory_order_acquire)) {
            shm_check_peer_alive(c, 0);
            return;   /* accept(us) not called yet */
        }
        seg_hdr_t *h = c->hdr_map;
        atomic_store_explicit(&ctl->cma_ok[SIDE_ACC],
                              (uint32_t)cma_probe(ep, c->peer_pid, h->probe_addr,
                                                  h->probe_value, c->peer),
                              memory_order_relaxed);
        ctl->conn_rank = ep->rank;
        ctl->conn_pid = getpid();
        ctl->conn_probe_addr = (uint64_t)(uintptr_t)&ep->probe_value;
        ctl->conn_probe_value = ep->probe_value;
        snprintf(ctl->conn_segname, sizeof ctl->conn_segname, "%s", ep->segname);
        unsigned char sf[SEG_FRAME_LEN], hf[HELLO_FRAME_LEN];
        seg_frame(ep->job_id, ep->comm_id, c->peer, c->paddr.pid, h->nonce, sf);
        hello_frame(ep->rank, ctl->conn_pid, ctl->conn_probe_addr, ctl->conn_probe_value,
                    ep->segname, NULL, hf);
        (void)kit_frame_seal_to(host, hf, sizeof hf, sf, sizeof sf);
        memcpy(ctl->mac, hf + HELLO_FIELDS, SHM_MAC_LEN);
        atomic_store_explicit(&ctl->state, ST_HELLO, memory_order_release);
    }
    if (atomic_load_explicit(&ctl->ack, memory_order_acquire) == ACK_ACCEPTED) {
        conn_ready(c);
        return;
    }
    if (atomic_load_explicit(&ctl->closed[SIDE_ACC], memory_order_acquire)) {
        shm_conn_fail(c, COHORT_ERR_PEER_LOST, "shm: rank %d closed its endpoint before accepting "
                      "rank %d (segment %s)", c->peer, ep->rank, c->paddr.segname);
        return;
    }
    shm_check_peer_alive(c, 0);
}

/* Acceptor: check the hello in the slot. */
void shm_acceptor_step(shm_conn_t *c)
{
    shm_ep_t *ep = c->ep;
    slot_ctl_t *ctl = c->ctl;
    if (atomic_load_explicit(&ctl->state, memory_order_acquire) != ST_HELLO) return;
    /* one reading of the hello: what its MAC is checked over is what is used */
    int conn_rank = ctl->conn_rank, conn_pid = ctl->conn_pid;
    uint64_t probe_addr = ctl->conn_probe_addr, probe_value = ctl->conn_probe_value;
    unsigned char mac[SHM_MAC_LEN];
    memcpy(mac, ctl->mac, sizeof mac);
    /* the connector's segment name (it names its wake socket) must be one of its names */
    char pfx[SHM_SEGNAME_LEN], cseg[SHM_SEGNAME_LEN];
    memcpy(cseg, ctl->conn_segname, sizeof cseg);
    cseg[sizeof cseg - 1] = 0;
    unsigned char sf[SEG_FRAME_LEN], hf[HELLO_FRAME_LEN];
    seg_frame(ep->job_id, ep->comm_id, ep->rank, (int)getpid(), ep->nonce, sf);
    hello_frame(conn_rank, conn_pid, probe_addr, probe_value, cseg, mac, hf);
    int pl = snprintf(pfx, sizeof pfx, "/cohort-%08x-%llx-%d-%d-", shm_fnv32(ep->job_id),
                      (unsigned long long)ep->comm_id, c->peer, conn_pid);
    if (conn_rank != c->peer || conn_pid <= 0 ||
        !kit_frame_valid_to(ep->host, hf, sizeof hf, sf, sizeof sf) ||
        pl <= 0 || strncmp(cseg, pfx, (size_t)pl) != 0) {
        ep->host->log(COHORT_LOG_WARN, SUBSYS, "shm: rank %d refused a hello in the slot of "
                      "rank %d of segment %s (claims rank %d, pid %d): bad HMAC; another job "
                      "or a stray process?", ep->rank, c->peer, ep->segname, conn_rank,
                      conn_pid);
        atomic_store_explicit(&ctl->state, ST_EMPTY, memory_order_release);
        return;
    }
    c->peer_pid = conn_pid;
    c->pidfd = pidfd_open_(c->peer_pid);
    shm_wake_name(&c->peer_sa, &c->peer_salen, cseg);
    atomic_store_explicit(&ctl->cma_ok[SIDE_CONN],
                          (uint32_t)cma_probe(ep, c->peer_pid, probe_addr, probe_value, c->peer),
                          memory_order_relaxed);
    atomic_store_explicit(&ctl->ack, ACK_ACCEPTED, memory_order_release);
    conn_ready(c);
}

