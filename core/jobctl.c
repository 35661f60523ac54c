/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's control channel (jobctl.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/jobctl.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/timeutil.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SUBSYS "jobctl"
#define CAUSE_WAIT_MS 300     /* after a failure: how long to wait for the job's first one */
#define NOTE_WAIT_MS 1000     /* after a mismatch: how long to wait for the peer's account */
#define CENSUS_WAIT_MS 2000   /* after a timeout: how long to wait for every rank's answer (a
                                 rank that waits answers within milliseconds; a loaded host's
                                 scheduler must not make it look absent) */
#define MAX_NOTES 64
#define LOCAL_DEFER_MS 1000   /* a timeout waiting on a rank of the same node: see below */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;   /* the client and the state below */
static atomic_flag wlock = ATOMIC_FLAG_INIT;             /* one writer on the socket at a time */
static cohort_rdv_client_t *g_cl;
static cohort_rdv_server_t *g_srv;
static atomic_int g_fd = -1;
static pid_t g_owner;
static int g_rank = -1, g_server_rank = -1, g_atexit;
/* Failures heard of: the whole job's (comm_id 0: a rank lost, about that rank or -1 for
 * everyone) and single communicators'. Appended under mu; g_nfail published last. */
#define MAX_FAILS 64
typedef struct failure {
    uint64_t comm_id;
    int about;
    cohort_status_t st;
    char msg[1024];
    uint64_t at;                      /* when this process heard of it */
} failure_t;
static failure_t g_fails[MAX_FAILS];
static atomic_uint g_nfail;
static _Atomic uint64_t g_last_drain;   /* when the channel was last read (cohort_coarse_ns) */
static char g_sent[1024];             /* the last notice this process sent, to know its echo */
static int g_noted;                   /* this process answered a mismatch about it */
static struct { int rank; uint64_t at; char text[512]; } g_notes[MAX_NOTES];
static int g_nnotes;                  /* notes kept (a ring of MAX_NOTES once full) */
static unsigned g_note_next;          /* where the next one goes */
static unsigned g_timeout_noted;      /* failures up to this one answered (a timeout census) */
static char g_abort_frame[512];       /* ready-made notice for cohort_comm_abort */
static ssize_t g_abort_len;

static void wlock_take(void)
{
    while (atomic_flag_test_and_set(&wlock)) sched_yield();
}

static void wlock_give(void) { atomic_flag_clear(&wlock); }

static void send_locked(cohort_rdv_msg_t kind, uint64_t comm_id, int about, cohort_status_t st,
                        const char *text)
{
    wlock_take();
    cohort_status_t s = cohort_rdv_send(g_cl, kind, comm_id, about, st, text);
    wlock_give();
    if (s) COHORT_INFO(SUBSYS, "could not tell the job's rendezvous: %s", cohort_last_error());
}

static void at_exit(void)
{
    if (getpid() == g_owner) cohort_jobctl_detach();
}

void cohort_jobctl_attach(cohort_rdv_client_t *cl, cohort_rdv_server_t *srv, int rank,
                          int server_rank)
{
    pthread_mutex_lock(&mu);
    if (g_cl) {   /* one job per process: a second world keeps its own server only */
        pthread_mutex_unlock(&mu);
        cohort_rdv_close(cl);
        if (srv) {
            cohort_rdv_server_shutdown(srv);
            cohort_rdv_server_destroy(srv);
        }
        return;
    }
    g_cl = cl;
    g_srv = srv;
    g_owner = getpid();
    g_rank = rank;
    g_server_rank = server_rank;
    atomic_store(&g_nfail, 0);
    g_sent[0] = '\0';
    g_noted = 0;
    g_nnotes = 0;
    char host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char text[300];
    snprintf(text, sizeof text, "rank %d (%s, pid %d) aborted the job's communicator "
             "(cohort_comm_abort)", rank, host, (int)g_owner);
    g_abort_len = cohort_rdv_encode_notice(g_abort_frame, sizeof g_abort_frame, rank,
                                           COHORT_ERR_PEER_LOST, text);
    atomic_store(&g_fd, cohort_rdv_fd(cl));
    if (!g_atexit) g_atexit = atexit(at_exit) == 0;
    pthread_mutex_unlock(&mu);
}

void cohort_jobctl_detach(void)
{
    pthread_mutex_lock(&mu);
    if (g_cl) {
        wlock_take();
        atomic_store(&g_fd, -1);
        cohort_rdv_close(g_cl);   /* goodbye: this rank ends normally */
        g_cl = NULL;
        wlock_give();
    }
    if (g_srv) {
        cohort_rdv_server_shutdown(g_srv);
        cohort_rdv_server_destroy(g_srv);
        g_srv = NULL;
    }
    g_owner = 0;
    pthread_mutex_unlock(&mu);
}

int cohort_jobctl_fd(void) { return atomic_load(&g_fd); }

int cohort_jobctl_joined(int *rank)
{
    pthread_mutex_lock(&mu);
    int joined = g_cl != NULL && g_owner == getpid();
    if (joined) *rank = g_rank;
    pthread_mutex_unlock(&mu);
    return joined;
}

unsigned cohort_jobctl_failures(void) { return atomic_load(&g_nfail); }

/* Runs before every collective, the smallest of which take a fraction of a microsecond: the
 * coarse clock (ticks of a few ms) is enough to pace the reads. */
int cohort_jobctl_due(void)
{
    return atomic_load(&g_fd) >= 0 && cohort_coarse_ns() - atomic_load(&g_last_drain) > 1000000ull;
}

static void add_failure(uint64_t comm_id, cohort_status_t st, int about, const char *text)
{
    unsigned n = atomic_load(&g_nfail);
    for (unsigned i = 0; i < n; i++)
        if (g_fails[i].comm_id == comm_id && g_fails[i].about == about && comm_id) return;
    if (n == MAX_FAILS) return;
    failure_t *f = &g_fails[n];
    f->comm_id = comm_id;
    f->st = st;
    f->about = about;
    f->at = cohort_now_ns();
    snprintf(f->msg, sizeof f->msg, "%.1000s", text);
    atomic_store(&g_nfail, n + 1);
}

/* The first failure that concerns comm: its own, or the loss of one of its ranks. */
static const failure_t *failure_for(const cohort_comm_t *comm)
{
    if (!comm->world_of) return NULL;   /* not a communicator of this job */
    unsigned n = atomic_load(&g_nfail);
    for (unsigned i = 0; i < n; i++) {
        const failure_t *f = &g_fails[i];
        /* "a rank waits on this one": this rank waits on someone else in turn, and its own
         * timeout (at about the same moment) names who; that account is the better one */
        if (f->comm_id == comm->comm_id && f->st == COHORT_ERR_TIMEOUT && f->about == g_rank &&
            f->about >= 0)
            continue;
        if (f->comm_id == comm->comm_id) return f;
        if (f->comm_id) continue;
        if (f->about == g_rank) continue;   /* this rank's own abort: it knows */
        if (f->about < 0) return f;
        for (int r = 0; r < comm->nranks; r++)
            if (comm->world_of[r] == f->about) return f;
    }
    return NULL;
}

/* With mu held: act on everything the server sent. comm: the communicator being waited on
 * (answers a mismatch about this rank with what it is doing). */
static void drain_locked(cohort_comm_t *comm)
{
    for (;;) {
        cohort_rdv_event_t ev;
        if (!g_cl || cohort_rdv_fd(g_cl) < 0) break;
        if (cohort_rdv_next_event(g_cl, &ev)) {   /* it closed the channel */
            atomic_store(&g_fd, -1);
            COHORT_WARN(SUBSYS, "the job's control channel sent what this rank cannot read and "
                        "was closed (%s); peer loss is now noticed by the transports only",
                        cohort_last_error());
            break;
        }
        if (ev.kind == COHORT_RDV_EV_NONE) break;
        if (ev.kind == COHORT_RDV_EV_FAIL) {
            add_failure(ev.comm_id, ev.status, ev.rank, ev.text);
            /* A rank timed out: every rank that reads this while inside a wait says what it is
             * in, so that the ranks that time out can tell which ones never joined (those
             * cannot answer: stopped, or busy outside any cohort call). */
            unsigned nf = atomic_load(&g_nfail);
            if (ev.status == COHORT_ERR_TIMEOUT && comm && nf > g_timeout_noted) {
                g_timeout_noted = nf;
                char note[sizeof comm->desc + 32];
                snprintf(note, sizeof note, "%s", comm->cur ? cohort_comm_desc(comm)
                                                            : "not in a collective");
                send_locked(COHORT_RDV_NOTE, 0, -1, COHORT_SUCCESS, note);
            }
            if (ev.status == COHORT_ERR_MISMATCH && ev.rank == g_rank && !g_noted && comm) {
                char note[sizeof comm->desc + 32];
                g_noted = 1;
                snprintf(note, sizeof note, "%s", comm->cur ? cohort_comm_desc(comm)
                                                            : "not in a collective");
                send_locked(COHORT_RDV_NOTE, 0, -1, COHORT_SUCCESS, note);
            }
        } else if (ev.kind == COHORT_RDV_EV_NOTE) {
            unsigned k = g_note_next++ % MAX_NOTES;
            if (g_nnotes < MAX_NOTES) g_nnotes++;
            g_notes[k].rank = ev.rank;
            g_notes[k].at = cohort_now_ns();
            snprintf(g_notes[k].text, sizeof g_notes[k].text, "%.500s", ev.text);
        } else if (ev.kind == COHORT_RDV_EV_SHUTDOWN) {
            atomic_store(&g_fd, -1);
            COHORT_INFO(SUBSYS, "the job's rendezvous ended normally; peer loss is now noticed "
                        "by the transports only");
        } else if (ev.kind == COHORT_RDV_EV_GONE) {
            atomic_store(&g_fd, -1);
            char text[1100];
            if (g_server_rank >= 0)
                snprintf(text, sizeof text, "rank %d is gone: the job's rendezvous it hosted "
                         "closed without a shutdown (%.200s)", g_server_rank, ev.text);
            else
                snprintf(text, sizeof text, "the launcher (cohortrun), which hosts the job's "
                         "rendezvous, is gone: %.200s", ev.text);
            add_failure(0, COHORT_ERR_PEER_LOST, g_server_rank, text);
        }
    }
}

static cohort_status_t failure_error(cohort_comm_t *comm, const failure_t *f)
{
    cohort_status_t st = f->st;
    /* A mismatch or a stall in this communicator is every member's; anything else (a rank
     * lost, aborted or failing elsewhere) is, for this rank, a lost peer. */
    if (!f->comm_id || (st != COHORT_ERR_MISMATCH && st != COHORT_ERR_TIMEOUT))
        st = COHORT_ERR_PEER_LOST;
    return cohort_error(st, "rank %d: %s cannot complete: %s: %s", comm->rank,
                        cohort_comm_desc(comm), f->comm_id ? "the communicator failed on "
                        "another rank" : "the job lost a rank", f->msg);
}

cohort_status_t cohort_jobctl_check(cohort_comm_t *comm)
{
    if (!comm->world_of) return COHORT_SUCCESS;
    if (atomic_load(&g_fd) >= 0 && pthread_mutex_trylock(&mu) == 0) {
        drain_locked(comm);
        atomic_store(&g_last_drain, cohort_coarse_ns());
        pthread_mutex_unlock(&mu);
    }
    unsigned n = atomic_load(&g_nfail);
    if (n == comm->jobctl_seen) return COHORT_SUCCESS;
    pthread_mutex_lock(&mu);
    const failure_t *f = failure_for(comm);
    cohort_status_t st = f ? failure_error(comm, f) : COHORT_SUCCESS;
    pthread_mutex_unlock(&mu);
    if (!f) comm->jobctl_seen = n;
    return st;
}

/* With mu held: waits up to ms for cond() to hold, reading the channel. */
static void wait_for(cohort_comm_t *comm, int ms, int (*cond)(const cohort_comm_t *, int),
                     int arg)
{
    uint64_t deadline = cohort_now_ns() + (uint64_t)ms * 1000000ull;
    for (;;) {
        drain_locked(comm);
        if (cond(comm, arg)) return;
        int fd = g_cl ? cohort_rdv_fd(g_cl) : -1;
        uint64_t now = cohort_now_ns();
        if (fd < 0 || now >= deadline) return;
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int)((deadline - now) / 1000000ull) + 1;
        poll(&p, 1, left > 50 ? 50 : left);
    }
}

static int has_failure(const cohort_comm_t *comm, int unused)
{
    (void)unused;
    return failure_for(comm) != NULL;
}

static int has_note(const cohort_comm_t *comm, int rank)
{
    (void)comm;
    for (int i = 0; i < g_nnotes; i++)
        if (g_notes[i].rank == rank) return 1;
    return 0;
}

/* The newest note from world rank r heard at or after t, or NULL. */
static const char *note_since(int r, uint64_t t)
{
    const char *best = NULL;
    uint64_t at = 0;
    for (int i = 0; i < g_nnotes; i++)
        if (g_notes[i].rank == r && g_notes[i].at >= t && g_notes[i].at >= at) {
            best = g_notes[i].text;
            at = g_notes[i].at;
        }
    return best;
}

static uint64_t g_census_since;   /* for has_all_notes (mu held) */

static int has_all_notes(const cohort_comm_t *comm, int unused)
{
    (void)unused;
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && !note_since(comm->world_of[r], g_census_since)) return 0;
    return 1;
}

/* A timeout's root cause (mu held): every rank of comm was asked what it is in when the job
 * heard of the timeout (f); those that do not answer within NOTE_WAIT_MS never joined. */
static void census_locked(cohort_comm_t *comm, const failure_t *f, char *out, size_t len)
{
    g_census_since = f->at > 200000000ull ? f->at - 200000000ull : 0;   /* its notes may race */
    wait_for(comm, CENSUS_WAIT_MS, has_all_notes, 0);
    char silent[256] = "", said[1024] = "";
    size_t ns = 0, nsaid = 0;
    int nsilent = 0, shown = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank) continue;
        const char *t = note_since(comm->world_of[r], g_census_since);
        if (!t) {
            nsilent++;
            if (ns < sizeof silent - 16)
                ns += (size_t)snprintf(silent + ns, sizeof silent - ns, "%s%d", ns ? "," : "", r);
        } else if (shown++ < 6 && nsaid < sizeof said - 64) {
            nsaid += (size_t)snprintf(said + nsaid, sizeof said - nsaid, "%srank %d in %.160s",
                                      nsaid ? "; " : "", r, t);
        }
    }
    if (nsilent)
        snprintf(out, len, " [asked what they are in: rank%s %s did not answer within %d ms "
                 "(stopped, hung, or busy outside any cohort call): %s%s%s]",
                 nsilent > 1 ? "s" : "", silent, CENSUS_WAIT_MS,
                 nsilent > 1 ? "they never joined" : "it never joined",
                 nsaid ? "; " : "", said);
    else
        snprintf(out, len, " [asked what they are in: %s%s]", said,
                 shown > 6 ? "; ..." : "");
}

cohort_status_t cohort_jobctl_await(cohort_comm_t *comm)
{
    if (!comm->world_of) return COHORT_SUCCESS;
    pthread_mutex_lock(&mu);
    if (g_cl && cohort_rdv_fd(g_cl) >= 0) wait_for(comm, CAUSE_WAIT_MS, has_failure, 0);
    pthread_mutex_unlock(&mu);
    return cohort_jobctl_check(comm);
}

cohort_status_t cohort_jobctl_failure(cohort_comm_t *comm, cohort_status_t st, int peer)
{
    if (st != COHORT_ERR_PEER_LOST && st != COHORT_ERR_TIMEOUT && st != COHORT_ERR_MISMATCH &&
        st != COHORT_ERR_TRANSPORT)
        return st;
    if (!comm->world_of) return st;
    pthread_mutex_lock(&mu);
    if (!g_cl || cohort_rdv_fd(g_cl) < 0) {
        pthread_mutex_unlock(&mu);
        return st;
    }
    char own[2048];
    snprintf(own, sizeof own, "%s", cohort_last_error());
    if (strstr(own, " cannot complete: the ") || strstr(own, "[first failure: ")) {
        /* already the job's account (another rank's, or a sub-communicator's); a timeout's
         * still gets the census, which names the ranks that never joined */
        const failure_t *f = failure_for(comm);
        char census[1400] = "";
        if (st == COHORT_ERR_TIMEOUT && f && !strstr(own, "[asked what they are in"))
            census_locked(comm, f, census, sizeof census);
        pthread_mutex_unlock(&mu);
        if (census[0]) cohort_error(st, "%.1500s%s", own, census);
        return st;
    }
    int about = peer >= 0 && peer < comm->nranks ? comm->world_of[peer] : -1;
    /* A rank that timed out waiting on a rank of its own node is most likely at the end of a
     * chain of waits (its node peer waits across the network in turn): it lets the rank nearer
     * to the cause speak first. */
    if (st == COHORT_ERR_TIMEOUT && about >= 0 && comm->node_of &&
        comm->node_of[peer] == comm->node_of[comm->rank])
        wait_for(comm, LOCAL_DEFER_MS, has_failure, 0);
    if (!failure_for(comm)) {
        snprintf(g_sent, sizeof g_sent, "%.900s", own);
        send_locked(COHORT_RDV_NOTICE, comm->comm_id, about, st, g_sent);
    }
    /* The job's account: our own notice coming back, or an earlier one (a rank lost). */
    wait_for(comm, CAUSE_WAIT_MS, has_failure, 0);
    char extra[3000] = "";
    const failure_t *f = failure_for(comm);
    if (f && strncmp(f->msg, g_sent, 800) != 0)
        snprintf(extra, sizeof extra, " [first failure: %s]", f->msg);
    /* the peer's own notice (about this rank) already says what it called */
    int told = f && f->comm_id == comm->comm_id && f->about == g_rank;
    if (st == COHORT_ERR_MISMATCH && about >= 0 && !told) {
        wait_for(comm, NOTE_WAIT_MS, has_note, about);
        size_t used = strlen(extra);
        int found = 0;
        for (int i = 0; i < g_nnotes; i++)
            if (g_notes[i].rank == about) {
                snprintf(extra + used, sizeof extra - used, " [rank %d is in %s; this rank in "
                         "%s]", peer, g_notes[i].text, cohort_comm_desc(comm));
                found = 1;
                break;
            }
        if (!found)
            snprintf(extra + used, sizeof extra - used, " [rank %d did not say what it called "
                     "within %d ms: it is not inside a cohort call]", peer, NOTE_WAIT_MS);
    }
    if (st == COHORT_ERR_TIMEOUT && f && !strstr(own, "[asked what they are in")) {
        size_t used = strlen(extra);
        census_locked(comm, f, extra + used, sizeof extra - used);
    }
    /* A peer that hung up because this communicator had already failed on another rank (a
     * mismatch found there: the peer's collective ended and it closed its connections) is a
     * consequence: the status is the first failure's, as its message is. A peer that was lost
     * (killed, its host gone) stays PEER_LOST. */
    if (st == COHORT_ERR_PEER_LOST && f && f->comm_id == comm->comm_id &&
        f->st == COHORT_ERR_MISMATCH)
        st = f->st;
    comm->jobctl_seen = atomic_load(&g_nfail);   /* this failure is the one being returned */
    pthread_mutex_unlock(&mu);
    if (extra[0]) cohort_error(st, "%.1500s%s", own, extra);
    return st;
}

void cohort_jobctl_stalled(cohort_comm_t *comm, double waited_s, const char *what)
{
    char text[900];
    snprintf(text, sizeof text, "%s, no progress for %.0f s, waiting on: %s",
             cohort_comm_desc(comm), waited_s, what);
    pthread_mutex_lock(&mu);
    int have = g_cl && cohort_rdv_fd(g_cl) >= 0;
    if (have) send_locked(COHORT_RDV_STALL, 0, -1, COHORT_SUCCESS, text);
    pthread_mutex_unlock(&mu);
    if (!have)   /* no job-wide report without the channel: say it here */
        cohort_log(COHORT_LOG_WARN, "stall", "rank %d: %s (COHORT_STALL_WARN)", comm->rank, text);
}

void cohort_jobctl_abort_notice(void)
{
    int fd = atomic_load(&g_fd);
    if (fd < 0 || getpid() != g_owner || g_abort_len <= 0) return;
    if (!atomic_flag_test_and_set(&wlock)) {
        ssize_t w = send(fd, g_abort_frame, (size_t)g_abort_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        atomic_flag_clear(&wlock);
        if (w == g_abort_len) return;
    }
    /* Mid-message or a full socket: hang up instead; the server reports this rank as gone. */
    shutdown(fd, SHUT_WR);
}
