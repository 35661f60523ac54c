/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): the pieces of a request's life that
 * every transport wrote again: where its memory comes from and goes back to, the queues it
 * waits in, the conn's list of live requests.
 *
 * kit_pool_t, a free list of request objects. A finished request goes back to the pool (up to
 * its cap; past it, to free) and the next isend/irecv takes it from there instead of from
 * calloc: kit_pool_get hands out the object zeroed, as calloc did, so a reused request starts
 * from nothing (whatever it owned, an error message say, is freed by the transport before
 * kit_pool_put). All the pool's objects have one size, set by kit_pool_init; a transport whose
 * requests are sometimes larger asks for them with kit_pool_get_sized, which gives those
 * calloc's memory, and returns them with kit_pool_put_sized, which frees them. kit_pool_drain
 * frees what the pool keeps: the owner calls it when it goes (the endpoint's close, say), after
 * the last kit_pool_put. An idle object's first pointer's bytes link the list; under
 * AddressSanitizer the whole idle object is poisoned, so that a stale pointer to a finished
 * request still faults. LeakSanitizer does not follow links through poisoned memory: a pool
 * still full at the process's exit shows all its objects but the first as leaks, so an owner
 * that outlives its use (an endpoint kept to the end) drains it first.
 *
 * The pool has no lock of its own: a transport uses it only where one thread owns it at a time
 * (the core drives an endpoint and its conns from one thread at a time, plugin.h) or under a
 * lock the transport already holds there, and says which where it declares the pool.
 *
 * KIT_FIFO, the singly linked queues of requests (posted receives waiting for their message,
 * requests posted before their conn was ready, sends waiting for room): KIT_FIFO(q, my_req_t,
 * qnext); defines q_push(&head, &tail, r), which appends r, and q_pop(&head, &tail), which
 * takes the oldest (NULL when the queue is empty) and clears its link. The queue is the pair of
 * pointers the caller keeps; an empty one is NULL, NULL.
 *
 * KIT_LIST, the doubly linked list of a conn's live requests (what a failure finishes and a close
 * frees): KIT_LIST(all, my_req_t, anext, aprev); defines all_add(&head, r), which puts r first,
 * and all_del(&head, r), which takes r off wherever it is and clears its links. */
#ifndef COHORT_KIT_REQ_H
#define COHORT_KIT_REQ_H

#include "transports/common/kit_objs.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define KIT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KIT_ASAN 1
#endif
#endif
#ifdef KIT_ASAN
#include <sanitizer/asan_interface.h>
#define KIT_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KIT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KIT_POISON(p, n) ((void)(p), (void)(n))
#define KIT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ---- the free list ----------------------------------------------------------------------- */

typedef struct kit_pool {
    void *head;                    /* idle objects, most recently put first */
    int n;                         /* how many */
    int cap;                       /* kept at most; more go to free */
    size_t size;                   /* every pooled object's size (at least a pointer's) */
} kit_pool_t;

/* An empty pool of objects of size bytes, keeping at most cap idle ones. */
static inline void kit_pool_init(kit_pool_t *p, size_t size, int cap)
{
    p->head = NULL;
    p->n = 0;
    p->cap = cap;
    p->size = size < sizeof(void *) ? sizeof(void *) : size;
}

/* A zeroed object of size bytes: an idle one when size is the pool's, else calloc's; NULL
 * without memory. */
static inline void *kit_pool_get_sized(kit_pool_t *p, size_t size)
{
    void *o = size == p->size ? p->head : NULL;
    if (!o) return calloc(1, size);
    KIT_UNPOISON(o, p->size);
    memcpy(&p->head, o, sizeof p->head);
    p->n--;
    memset(o, 0, p->size);
    return o;
}

static inline void *kit_pool_get(kit_pool_t *p)
{
    return kit_pool_get_sized(p, p->size);
}

/* Object o of size bytes (kit_pool_get_sized's) is done with: kept when it has the pool's size
 * and the pool has room, else freed. NULL is ignored. */
static inline void kit_pool_put_sized(kit_pool_t *p, void *o, size_t size)
{
    if (!o) return;
    if (size != p->size || p->n >= p->cap) {
        free(o);
        return;
    }
    memcpy(o, &p->head, sizeof p->head);
    p->head = o;
    p->n++;
    KIT_POISON(o, p->size);
}

static inline void kit_pool_put(kit_pool_t *p, void *o)
{
    kit_pool_put_sized(p, o, p->size);
}

/* Frees every idle object; the pool is empty (and usable) after. */
static inline void kit_pool_drain(kit_pool_t *p)
{
    while (p->head) {
        void *o = p->head;
        KIT_UNPOISON(o, p->size);
        memcpy(&p->head, o, sizeof p->head);
        free(o);
    }
    p->n = 0;
}

/* ---- FIFO queues ------------------------------------------------------------------------- */

/* Defines name##_push and name##_pop for a queue of type linked through its member link (see
 * the top); a semicolon follows the use. */
#define KIT_FIFO(name, type, link)                                                       \
    static inline void name##_push(type **h_, type **t_, type *x_)                       \
    {                                                                                    \
        x_->link = NULL;                                                                 \
        if (*t_) (*t_)->link = x_;                                                       \
        else *h_ = x_;                                                                   \
        *t_ = x_;                                                                        \
    }                                                                                    \
    static inline type *name##_pop(type **h_, type **t_)                                 \
    {                                                                                    \
        type *x_ = *h_;                                                                  \
        if (!x_) return NULL;                                                            \
        *h_ = x_->link;                                                                  \
        if (!*h_) *t_ = NULL;                                                            \
        x_->link = NULL;                                                                 \
        return x_;                                                                       \
    }                                                                                    \
    struct kit_fifo_##name##_

/* ---- lists ------------------------------------------------------------------------------- */

/* Defines name##_add and name##_del for a list of type linked through its members nx and pv
 * (see the top); a semicolon follows the use. */
#define KIT_LIST(name, type, nx, pv)                                                     \
    static inline void name##_add(type **h_, type *x_)                                   \
    {                                                                                    \
        KIT_LIST_PUSH_VIA(*h_, x_, nx, pv);                                              \
    }                                                                                    \
    static inline void name##_del(type **h_, type *x_)                                   \
    {                                                                                    \
        KIT_LIST_UNLINK_VIA(*h_, x_, nx, pv);                                            \
        x_->nx = x_->pv = NULL;                                                          \
    }                                                                                    \
    struct kit_list_##name##_

#endif /* COHORT_KIT_REQ_H */
