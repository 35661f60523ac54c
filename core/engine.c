/* The request engine (core/engine.h): a queue per communicator, run in issue order by a
 * progress thread or by the callers of test/wait. */
#include "core/engine.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define REQ_MAGIC 0x434f484f52524551ull   /* "COHORREQ" */
#define REQ_DEAD 0xdeadbeefdeadbeefull

struct cohort_request {
    uint64_t magic;
    cohort_comm_t *comm;
    struct cohort_request *next;      /* queue link */
    cohort_coll_args_t a;
    size_t *arrays;                   /* the v-variants' counts and displacements, copied */
    const char *fn;
    cohort_engine_exec_fn exec;
    int done;                         /* under the engine's lock */
    cohort_status_t st;
    char msg[1024];                   /* the error's message, from the thread that ran it */
};

typedef struct cohort_engine {
    pthread_mutex_t mu;
    pthread_cond_t work;              /* the progress thread waits here for a request */
    pthread_cond_t done;              /* waiters wait here for completions */
    cohort_request_t *head, *tail;    /* queued, not started */
    unsigned pending;                 /* queued or running */
    unsigned live;                    /* issued, not yet completed by test/wait */
    int running;                      /* a thread is running a request */
    int caller;                       /* COHORT_PROGRESS=caller */
    int started, stop;
    pthread_t tid;
} cohort_engine_t;

/* Runs the head of the queue; called and returns with the lock held. */
static void run_one(cohort_engine_t *e, cohort_comm_t *comm)
{
    cohort_request_t *r = e->head;
    e->head = r->next;
    if (!e->head) e->tail = NULL;
    e->running = 1;
    pthread_mutex_unlock(&e->mu);
    /* The busy mark keeps cohort_comm_destroy and a second issuing thread off comm while the
     * request runs. The thread that issues operations drained the queue before taking it for a
     * blocking call, so it is free here unless the application breaks the one-issuer rule. */
    while (atomic_exchange(&comm->busy, 1)) sched_yield();
    cohort_status_t st = r->exec(comm, &r->a, r->fn);
    atomic_store(&comm->busy, 0);
    pthread_mutex_lock(&e->mu);
    r->st = st;
    if (st) snprintf(r->msg, sizeof r->msg, "%s", cohort_last_error());
    r->done = 1;
    e->pending--;
    e->running = 0;
    pthread_cond_broadcast(&e->done);
}

static void *progress_thread(void *arg)
{
    cohort_comm_t *comm = arg;
    cohort_engine_t *e = comm->engine;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && !e->head) pthread_cond_wait(&e->work, &e->mu);
        if (!e->head) break;   /* stop, and nothing left */
        run_one(e, comm);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static cohort_status_t engine_get(cohort_comm_t *comm, cohort_engine_t **out)
{
    if (comm->engine) {
        *out = comm->engine;
        return COHORT_SUCCESS;
    }
    cohort_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return cohort_error(COHORT_ERR_NO_MEMORY, "rank %d: no memory for the request engine",
                            comm->rank);
    const char *mode = cohort_config_get("COHORT_PROGRESS");
    e->caller = mode && !strcasecmp(mode, "caller");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, &ca);
    pthread_cond_init(&e->done, &ca);
    pthread_condattr_destroy(&ca);
    comm->engine = e;
    if (!e->caller) {
        int rc = pthread_create(&e->tid, NULL, progress_thread, comm);
        if (rc) {
            comm->engine = NULL;
            pthread_cond_destroy(&e->work);
            pthread_cond_destroy(&e->done);
            pthread_mutex_destroy(&e->mu);
            free(e);
            return cohort_error(COHORT_ERR_SYSTEM, "rank %d: cannot start the progress thread "
                                "of the non-blocking calls: %s; set COHORT_PROGRESS=caller to "
                                "run them inside cohort_test/cohort_wait instead", comm->rank,
                                strerror(rc));
        }
        e->started = 1;
    }
    *out = e;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_engine_submit(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                     const char *fn, cohort_engine_exec_fn exec,
                                     cohort_request_t **req)
{
    cohort_engine_t *e = NULL;
    cohort_status_t st = engine_get(comm, &e);
    if (st) return st;
    cohort_request_t *r = calloc(1, sizeof *r);
    int n = comm->nranks, nv = a->coll == COHORT_COLL_ALLTOALLV ? 4
                               : a->coll == COHORT_COLL_ALLGATHERV ? 2 : 0;
    size_t *arr = nv ? malloc((size_t)nv * (size_t)n * sizeof *arr) : NULL;
    if (!r || (nv && !arr)) {
        free(r);
        free(arr);
        return cohort_error(COHORT_ERR_NO_MEMORY, "%s on rank %d: no memory for the request",
                            fn, comm->rank);
    }
    r->magic = REQ_MAGIC;
    r->comm = comm;
    r->a = *a;
    r->fn = fn;
    r->exec = exec;
    if (nv) {
        /* the application may reuse its arrays once the call returns */
        const size_t *src[4] = { a->rcounts, a->rdispls, a->scounts, a->sdispls };
        for (int i = 0; i < nv; i++) memcpy(arr + (size_t)i * n, src[i], (size_t)n * sizeof *arr);
        r->arrays = arr;
        r->a.rcounts = arr;
        r->a.rdispls = arr + n;
        r->a.scounts = nv == 4 ? arr + 2 * (size_t)n : NULL;
        r->a.sdispls = nv == 4 ? arr + 3 * (size_t)n : NULL;
    }
    pthread_mutex_lock(&e->mu);
    if (e->tail) e->tail->next = r;
    else e->head = r;
    e->tail = r;
    e->pending++;
    e->live++;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    *req = r;
    return COHORT_SUCCESS;
}

void cohort_engine_drain(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    while (e->pending) {
        if (e->caller && !e->running && e->head) run_one(e, comm);
        else pthread_cond_wait(&e->done, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}

unsigned cohort_engine_live(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return 0;
    pthread_mutex_lock(&e->mu);
    unsigned n = e->live;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void cohort_engine_free(cohort_comm_t *comm)
{
    cohort_engine_t *e = comm->engine;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->tid, NULL);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->done);
    pthread_mutex_destroy(&e->mu);
    free(e);
    comm->engine = NULL;
}

/* ---- completion: cohort_test, cohort_wait, cohort_waitall ---- */

static cohort_status_t check_req(const cohort_request_t *r, const char *fn)
{
    if (!r)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: the request is NULL", fn);
    if (r->magic != REQ_MAGIC)
        return cohort_error(COHORT_ERR_INVALID_ARG, "%s: %p is not a live request (%s)", fn,
                            (const void *)r, r->magic == REQ_DEAD
                            ? "it completed and was freed by an earlier cohort_test, cohort_wait "
                              "or cohort_waitall" : "never returned by a non-blocking call");
    return COHORT_SUCCESS;
}

/* Frees a completed request; the lock is held. Returns its status. */
static cohort_status_t finish(cohort_engine_t *e, cohort_request_t *r, char *msg, size_t len)
{
    cohort_status_t st = r->st;
    if (st && msg) snprintf(msg, len, "%s", r->msg);
    e->live--;
    r->magic = REQ_DEAD;
    free(r->arrays);
    free(r);
    return st;
}

/* Waits (lock held) until r is done, running queued requests in caller mode. */
static void wait_done(cohort_engine_t *e, cohort_request_t *r)
{
    while (!r->done) {
        if (e->caller && !e->running && e->head) run_one(e, r->comm);
        else pthread_cond_wait(&e->done, &e->mu);
    }
}

/* The request's own error becomes this thread's last error (it was logged where it ran). */
static cohort_status_t report(cohort_status_t st, const char *msg)
{
    if (st) cohort_error_restore(msg);
    return st;
}

cohort_status_t cohort_test(cohort_request_t *req, int *done)
{
    if (done) *done = 0;
    cohort_status_t st = check_req(req, "cohort_test");
    if (st) return st;
    if (!done) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_test: done is NULL");
    cohort_engine_t *e = req->comm->engine;
    char msg[1024];
    pthread_mutex_lock(&e->mu);
    /* caller mode: the request advances only here; it runs once it reaches the queue's head */
    if (e->caller && !req->done && !e->running && e->head) wait_done(e, req);
    if (!req->done) {
        pthread_mutex_unlock(&e->mu);
        return COHORT_SUCCESS;
    }
    *done = 1;
    st = finish(e, req, msg, sizeof msg);
    pthread_mutex_unlock(&e->mu);
    return report(st, msg);
}

cohort_status_t cohort_wait(cohort_request_t *req)
{
    cohort_status_t st = check_req(req, "cohort_wait");
    if (st) return st;
    cohort_engine_t *e = req->comm->engine;
    char msg[1024];
    pthread_mutex_lock(&e->mu);
    wait_done(e, req);
    st = finish(e, req, msg, sizeof msg);
    pthread_mutex_unlock(&e->mu);
    return report(st, msg);
}

cohort_status_t cohort_waitall(size_t n, cohort_request_t **reqs, cohort_status_t *statuses)
{
    if (n && !reqs) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_waitall: reqs is NULL "
                                        "with n = %zu", n);
    for (size_t i = 0; i < n; i++) {
        cohort_status_t st = check_req(reqs[i], "cohort_waitall");
        if (st) {
            cohort_error_prefix("cohort_waitall: reqs[%zu]", i);
            return st;
        }
        for (size_t j = 0; j < i; j++)
            if (reqs[j] == reqs[i])
                return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_waitall: reqs[%zu] and "
                                    "reqs[%zu] are the same request", j, i);
    }
    cohort_status_t first = COHORT_SUCCESS;
    char msg[1024] = "", one[1024];
    for (size_t i = 0; i < n; i++) {
        cohort_engine_t *e = reqs[i]->comm->engine;
        pthread_mutex_lock(&e->mu);
        wait_done(e, reqs[i]);
        cohort_status_t st = finish(e, reqs[i], one, sizeof one);
        pthread_mutex_unlock(&e->mu);
        reqs[i] = NULL;
        if (statuses) statuses[i] = st;
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof msg, "%s", one);
        }
    }
    return report(first, msg);
}
