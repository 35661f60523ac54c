/* SPDX-License-Identifier: BSD-3-Clause */
/* Node collectives in shared memory: the check at close (shm_coll_finish). Each rank publishes
 * its history and last collective in its history line (its fin record), then compares them with
 * every peer's, waiting a bounded time for peers that have not got as far, and names the
 * difference (COHORT_ERR_MISMATCH) so that small broadcasts whose roots disagreed are found
 * even when they were the last call. The protocol is described at the top of coll.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cohort/plugin.h>
#include "coll_int.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- at close ------------------------------------------------------------------------------ */

static const char *dtype_name(unsigned d)
{
    static const char *names[] = { "int8", "uint8", "int32", "uint32", "int64", "uint64",
                                   "float16", "bfloat16", "float32", "float64" };
    return d < sizeof names / sizeof names[0] ? names[d] : "?";
}

static const char *op_name(unsigned o)
{
    static const char *names[] = { "sum", "prod", "min", "max", "avg" };
    return o < sizeof names / sizeof names[0] ? names[o] : "?";
}

/* A collective as the core names it in its messages: "broadcast #3 (count 2, float32, root 0)". */
typedef struct fin_call {
    unsigned coll, dtype, op;      /* coll FIN_NO_COLL: none */
    uint32_t seq;
    int root;
    uint64_t count;
} fin_call_t;

static void describe_call(const fin_call_t *c, char *b, size_t len)
{
    if (c->coll == FIN_NO_COLL) {
        snprintf(b, len, "no node collective");
    } else if (c->coll == COHORT_TP_BARRIER) {
        snprintf(b, len, "barrier #%lu", (unsigned long)c->seq);
    } else {
        int reduces = c->coll == COHORT_TP_ALLREDUCE || c->coll == COHORT_TP_REDUCE ||
                      c->coll == COHORT_TP_REDUCE_SCATTER;
        int rooted = c->coll == COHORT_TP_BROADCAST || c->coll == COHORT_TP_REDUCE;
        snprintf(b, len, "%s #%lu (count %llu, %s%s%s, root %d)", coll_name((int)c->coll),
                 (unsigned long)c->seq, (unsigned long long)c->count, dtype_name(c->dtype),
                 reduces ? ", " : "", reduces ? op_name(c->op) : "", rooted ? c->root : -1);
    }
}

/* What differs between two calls of the same number and kind, in words (as core/p2p.c says). */
static void call_differences(const fin_call_t *a, const fin_call_t *b, char *buf, size_t len)
{
    int reduces = a->coll == COHORT_TP_ALLREDUCE || a->coll == COHORT_TP_REDUCE ||
                  a->coll == COHORT_TP_REDUCE_SCATTER;
    int rooted = a->coll == COHORT_TP_BROADCAST || a->coll == COHORT_TP_REDUCE;
    size_t used = 0;
    buf[0] = '\0';
#define DIFF(cond, ...)                                                                    \
    if ((cond) && used < len)                                                             \
        used += (size_t)snprintf(buf + used, len - used, "%s", used ? " and " : "");      \
    if ((cond) && used < len)                                                             \
        used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__)
    DIFF(rooted && a->root != b->root, "the root (%d here, %d there)", a->root, b->root);
    DIFF(a->count != b->count, "the count (%llu here, %llu there)",
         (unsigned long long)a->count, (unsigned long long)b->count);
    DIFF(a->dtype != b->dtype, "the dtype (%s here, %s there)", dtype_name(a->dtype),
         dtype_name(b->dtype));
    DIFF(reduces && a->op != b->op, "the op (%s here, %s there)", op_name(a->op), op_name(b->op));
#undef DIFF
}

static fin_call_t my_last(const shm_coll_t *co)
{
    const cohort_tp_coll_args_t *a = &co->a;
    fin_call_t c = { FIN_NO_COLL, 0, 0, 0, -1, 0 };
    if (co->step) c = (fin_call_t){ (unsigned)a->coll, (unsigned)a->dtype, (unsigned)a->op,
                                    (uint32_t)(a->tag >> 32), a->root, a->count };
    return c;
}

/* Our fin record: written once; the fields before fin, which publishes them (seq_cst, then the
 * armed flags are loaded: a peer sleeping in its own shm_coll_finish is woken, as publish()
 * does). A rank whose collectives were abandoned (or one still in flight) says FIN_BROKEN: its
 * history is not what it ran, and its failure was reported already. */
static void fin_publish(shm_coll_t *co)
{
    rank_ctl_t *c = &co->ctl[co->rank];
    fin_call_t m = my_last(co);
    c->fin_seq = m.seq;
    c->fin_coll = (uint8_t)m.coll;
    c->fin_dtype = (uint8_t)m.dtype;
    c->fin_op = (uint8_t)m.op;
    c->fin_root = m.root;
    c->fin_count = m.count;
    c->fin_chain = co->chain;
    atomic_store_explicit(&c->fin, co->broken || co->active ? FIN_BROKEN : FIN_DONE,
                          memory_order_seq_cst);
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;
        if (atomic_load_explicit(&co->ctl[j].armed, memory_order_seq_cst) &&
            atomic_exchange_explicit(&co->ctl[j].armed, 0, memory_order_seq_cst))
            co->hooks.wake(co->hooks.ep, j);
    }
    co->fin_pub = 1;
    co->fin_t0 = shm_now_ns();
}

/* What shm_coll_finish knows of a peer: its fin says the same history as ours, or another, or
 * that its collectives failed; or, without a fin, it has not reached our last step yet, or is at
 * that step with the same history, or with another, or went beyond it. */
enum { PF_SAME, PF_DIFF, PF_BROKEN, PF_WAIT, PF_LIVE_DIFF, PF_AHEAD, PF_GONE, PF_KINDS };

static int fin_peer(const shm_coll_t *co, int j)
{
    const rank_ctl_t *c = &co->ctl[j];
    uint32_t f = atomic_load_explicit(&c->fin, memory_order_acquire);   /* then its record */
    if (f == FIN_BROKEN) return PF_BROKEN;
    if (f == FIN_DONE) return c->fin_chain == co->chain ? PF_SAME : PF_DIFF;
    uint64_t t = co->step;
    if (!coll_started(co, j, t)) return PF_WAIT;
    if (coll_started(co, j, t + 1)) return PF_AHEAD;   /* it started a collective we never did */
    if (t == 0) return PF_SAME;
    /* its history at step t, published before it started step t (acquire); like check_tags.
     * A peer that ran ahead since may be rewriting the slot: then what we read is a later
     * history, which differs from ours as the peer's does */
    const sb_hdr_t *e = sb_of(co, j, t);
    int small = atomic_load_explicit(&e->step, memory_order_acquire) == t;
    uint64_t chain = atomic_load_explicit(small ? &e->chain : &c->chain[t % SHM_COLL_NSLOTS],
                                          memory_order_relaxed);
    return chain == co->chain ? PF_SAME : PF_LIVE_DIFF;
}

#define FIN_ADVICE "Every rank must make the same collective calls on a communicator, in the " \
                   "same order, with the same count, dtype, op and root"

/* Appends ", j" (or "j" first) to a list of ranks. */
static void list_add(char *b, size_t len, int j)
{
    size_t used = strlen(b);
    if (used >= 3 && !strcmp(b + used - 3, "...")) return;   /* full */
    if (used + 16 < len) snprintf(b + used, len - used, "%s%d", used ? ", " : "", j);
    else snprintf(b + used, len - used, ", ...");
}

cohort_status_t shm_coll_finish(shm_coll_t *co, uint64_t deadline, int *waiting_on)
{
    *waiting_on = -1;
    if (!co->fin_pub) fin_publish(co);
    if (co->broken || co->active || co->n < 2) return COHORT_SUCCESS;
    int late = shm_now_ns() >= deadline;
    int kind[PF_KINDS] = { 0 }, first[PF_KINDS];   /* per PF_*: how many peers, the first */
    char diffs[256] = "", waits[256] = "", gone[256] = "";
    for (int k = 0; k < PF_KINDS; k++) first[k] = -1;
    for (int j = 0; j < co->n; j++) {
        if (j == co->rank) continue;
        int k = fin_peer(co, j);
        if (k == PF_WAIT || k == PF_LIVE_DIFF || k == PF_AHEAD) {
            /* no fin yet: wait for it (LIVE_DIFF, AHEAD: for the peer to describe its calls)
             * while the peer is there and the deadline is not past. One that left is looked at
             * once more: what it published before it closed or exited counts. */
            if (co->hooks.peer_check(co->hooks.ep, j, 0) == COHORT_SUCCESS) {
                if (!late) {
                    *waiting_on = j;
                    return COHORT_IN_PROGRESS;
                }
            } else {
                k = fin_peer(co, j);
                if (k == PF_WAIT) k = PF_GONE;
            }
        }
        if (!kind[k]++) first[k] = j;
        if (k == PF_DIFF || k == PF_LIVE_DIFF || k == PF_AHEAD) list_add(diffs, sizeof diffs, j);
        else if (k == PF_WAIT) list_add(waits, sizeof waits, j);
        else if (k == PF_GONE) list_add(gone, sizeof gone, j);
    }
    char me[160];
    fin_call_t mine = my_last(co);
    describe_call(&mine, me, sizeof me);
    double waited = (double)(shm_now_ns() - co->fin_t0) * 1e-9;
    if (kind[PF_WAIT])
        co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d at close: rank(s) %s had not reached "
                      "this rank's last node collective (%s) nor closed within %.1f s: not "
                      "compared with them (a rank compares with those that closed before it "
                      "when it closes)", co->rank, waits, me, waited);
    if (kind[PF_GONE])
        co->host->log(COHORT_LOG_INFO, "shm", "shm: rank %d at close: rank(s) %s left (closed, "
                      "failed or exited) before reaching this rank's last node collective (%s): "
                      "not compared with them", co->rank, gone, me);
    if (!kind[PF_DIFF] && !kind[PF_LIVE_DIFF] && !kind[PF_AHEAD]) return COHORT_SUCCESS;

    /* One peer described (one with a fin if any: it names its last call), every one listed. */
    int d = kind[PF_DIFF] ? first[PF_DIFF] : kind[PF_LIVE_DIFF] ? first[PF_LIVE_DIFF]
                                                                 : first[PF_AHEAD];
    const rank_ctl_t *c = &co->ctl[d];
    char what[600], also[300] = "";
    int same_calls = 1;   /* the cause: a broadcast's roots, counts or dtypes (else: calls that
                             some ranks made and others did not) */
    if (kind[PF_DIFF] + kind[PF_LIVE_DIFF] + kind[PF_AHEAD] > 1)
        snprintf(also, sizeof also, " (all that differ: rank(s) %s)", diffs);
    if (kind[PF_DIFF]) {
        fin_call_t theirs = { c->fin_coll, c->fin_dtype, c->fin_op, c->fin_seq, c->fin_root,
                              c->fin_count };
        char them[160], diff[200], how[240] = "";
        describe_call(&theirs, them, sizeof them);
        call_differences(&mine, &theirs, diff, sizeof diff);
        if (theirs.seq != mine.seq || theirs.coll != mine.coll)
            same_calls = 0;
        else if (diff[0])
            snprintf(how, sizeof how, "; they differ in %s", diff);
        else
            snprintf(how, sizeof how, ": the same call, so an earlier broadcast differed");
        snprintf(what, sizeof what, "This rank's last was %s, rank %d's %s%s", me, d, them, how);
    } else if (kind[PF_LIVE_DIFF]) {
        snprintf(what, sizeof what, "Rank %d has reached this rank's last step, %s, with another "
                 "history (it had not closed within %.1f s to name its own calls)", d, me,
                 waited);
    } else {
        same_calls = 0;
        snprintf(what, sizeof what, "Rank %d started collectives after this rank's last, %s (it "
                 "had not closed within %.1f s to name them)", d, me, waited);
    }
    if (same_calls)
        return co->host->error(COHORT_ERR_MISMATCH, "shm: rank %d at close: its node collectives "
                               "differ from those of rank %d%s: a broadcast of at most %zu bytes "
                               "had another root, count or dtype on some ranks; its root does "
                               "not wait, so this shows only at destroy. %s. %s", co->rank, d,
                               also, co->sb_max, what, FIN_ADVICE);
    return co->host->error(COHORT_ERR_MISMATCH, "shm: rank %d at close: its node collectives "
                           "differ from those of rank %d%s: some ranks called collectives that "
                           "others did not (a broadcast of at most %zu bytes returns on its root "
                           "without waiting for the others, so this shows only at destroy). "
                           "%s. %s", co->rank, d, also, co->sb_max, what, FIN_ADVICE);
}
