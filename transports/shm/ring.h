/* SPDX-License-Identifier: BSD-3-Clause */
/* cohort shm transport: the single-producer/single-consumer ring of one direction.
 *
 * Header-only (static inline): the plugin exports nothing but cohort_transport_v1, and the unit
 * test (tests/unit/test_shm_ring.c) includes this file as is. System headers only.
 *
 * Layout of a ring in memory (shared between two processes, or ordinary memory in the test):
 *   [control block: SHM_RING_CTL_BYTES (one page)][ncells cells of SHM_CELL_SIZE bytes]
 *   control block: head, tail, rdone, each a C11 atomic on its own 64-byte cache line.
 *   cell: 64-byte header (shm_cell_t) + up to SHM_CELL_PAYLOAD bytes of payload.
 * head and tail count cells since the ring was initialised (they never wrap in practice);
 * position p lives in cell p % ncells; head - tail is the number of cells in flight.
 *
 * Protocol (exactly one producer, exactly one consumer; neither ever blocks):
 *   producer: shm_ring_prod_begin (head relaxed, tail acquire), then per cell
 *             shm_ring_prod_reserve (NULL when full: tail re-read once with acquire), fill the
 *             cell, shm_ring_prod_commit; finally shm_ring_prod_publish (head release, once).
 *   consumer: shm_ring_cons_begin (tail relaxed, head acquire), then per cell
 *             shm_ring_cons_peek (NULL when empty: head re-read once with acquire), read the
 *             cell, shm_ring_cons_release; finally shm_ring_cons_publish (tail release, once).
 *   The release store of head orders the cell contents before it for the consumer's acquire;
 *   the release store of tail orders the consumer's reads before the producer reuses the cell.
 *   A cursor batches many cells per publish; it is only valid between begin and publish.
 * rdone belongs to the transport's rendezvous protocol (written by the consumer side, read by
 * the producer side); the ring only gives it its place in the control block.
 * The ring memory must be zero-filled, or shm_ring_init()ed, before either side uses it.
 */
#ifndef COHORT_SHM_RING_H
#define COHORT_SHM_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHM_RING_CTL_BYTES ((size_t)4096)    /* control block: one page before the cells */
#define SHM_CELL_SIZE ((size_t)8192)
#define SHM_CELL_HDR ((size_t)64)
#define SHM_CELL_PAYLOAD (SHM_CELL_SIZE - SHM_CELL_HDR)

/* Control block (shared). */
typedef struct shm_ring_ctl {
    alignas(64) _Atomic uint64_t head;   /* producer: cells written */
    alignas(64) _Atomic uint64_t tail;   /* consumer: cells consumed */
    alignas(64) _Atomic uint64_t rdone;  /* consumer: rendezvous messages finished */
} shm_ring_ctl_t;

/* Cell header (shared); the payload follows at SHM_CELL_HDR. The ring does not interpret it. */
typedef struct shm_cell {
    uint64_t tag, len, off, addr, seq;
    uint32_t flen, kind;
} shm_cell_t;

_Static_assert(sizeof(shm_ring_ctl_t) <= SHM_RING_CTL_BYTES, "ring control block too big");
_Static_assert(sizeof(shm_cell_t) <= SHM_CELL_HDR, "cell header too big");

/* A process-local view of a ring. */
typedef struct shm_ring {
    shm_ring_ctl_t *ctl;
    unsigned char *cells;
    uint64_t ncells;
} shm_ring_t;

/* A producer's or consumer's position between begin and publish. */
typedef struct shm_ring_cursor {
    uint64_t pos;     /* own counter: next cell to write (producer) or read (consumer) */
    uint64_t other;   /* last value read of the other side's counter */
    uint64_t start;   /* own counter as last published */
} shm_ring_cursor_t;

/* Bytes taken by a ring of ncells cells (control block included). */
static inline size_t shm_ring_bytes(uint64_t ncells)
{
    return SHM_RING_CTL_BYTES + (size_t)ncells * SHM_CELL_SIZE;
}

/* Makes r a view of the ring at mem (shm_ring_bytes(ncells) bytes, page aligned). */
static inline void shm_ring_attach(shm_ring_t *r, unsigned char *mem, uint64_t ncells)
{
    r->ctl = (shm_ring_ctl_t *)(void *)mem;
    r->cells = mem + SHM_RING_CTL_BYTES;
    r->ncells = ncells;
}

/* Empties the ring (head = tail = rdone = 0). Neither side may be using it. */
static inline void shm_ring_init(shm_ring_t *r)
{
    memset(r->ctl, 0, sizeof *r->ctl);
}

static inline shm_cell_t *shm_ring_cell_at(const shm_ring_t *r, uint64_t pos)
{
    return (shm_cell_t *)(void *)(r->cells + (size_t)(pos % r->ncells) * SHM_CELL_SIZE);
}

static inline unsigned char *shm_cell_payload(shm_cell_t *c)
{
    return (unsigned char *)c + SHM_CELL_HDR;
}

/* ---- producer ---------------------------------------------------------------------------- */

static inline void shm_ring_prod_begin(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    k->pos = k->start = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
    k->other = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
}

/* The next free cell, or NULL if the ring is full. Nothing is visible to the consumer before
 * shm_ring_prod_commit + shm_ring_prod_publish; reserving again without commit returns the
 * same cell. */
static inline shm_cell_t *shm_ring_prod_reserve(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos - k->other >= r->ncells) {
        k->other = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
        if (k->pos - k->other >= r->ncells) return NULL;
    }
    return shm_ring_cell_at(r, k->pos);
}

static inline void shm_ring_prod_commit(shm_ring_cursor_t *k)
{
    k->pos++;
}

/* Makes the committed cells visible to the consumer (one release store, none if none). */
static inline void shm_ring_prod_publish(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos != k->start) {
        atomic_store_explicit(&r->ctl->head, k->pos, memory_order_release);
        k->start = k->pos;
    }
}

/* shm_ring_prod_publish as a seq_cst exchange (a full barrier on x86, like a store + fence),
 * for a caller that next loads a "peer sleeping" flag (Dekker-style wake-up: the store of head
 * must not be reordered after that load). Returns 1 if it published cells. */
static inline int shm_ring_prod_publish_sc(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos == k->start) return 0;
    atomic_exchange_explicit(&r->ctl->head, k->pos, memory_order_seq_cst);
    k->start = k->pos;
    return 1;
}

/* Free cells as the producer sees them now. Producer side only. */
static inline uint64_t shm_ring_prod_space(const shm_ring_t *r)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
    return r->ncells - (head - tail);
}

/* ---- consumer ---------------------------------------------------------------------------- */

static inline void shm_ring_cons_begin(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    k->pos = k->start = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
    k->other = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
}

/* The oldest published cell not yet released, or NULL if the ring is empty. */
static inline shm_cell_t *shm_ring_cons_peek(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos == k->other) {
        k->other = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
        if (k->pos == k->other) return NULL;
    }
    return shm_ring_cell_at(r, k->pos);
}

static inline void shm_ring_cons_release(shm_ring_cursor_t *k)
{
    k->pos++;
}

/* Gives the released cells back to the producer (one release store, none if none). */
static inline void shm_ring_cons_publish(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos != k->start) {
        atomic_store_explicit(&r->ctl->tail, k->pos, memory_order_release);
        k->start = k->pos;
    }
}

/* shm_ring_cons_publish as a seq_cst exchange (see shm_ring_prod_publish_sc). Returns 1 if it
 * gave cells back. */
static inline int shm_ring_cons_publish_sc(const shm_ring_t *r, shm_ring_cursor_t *k)
{
    if (k->pos == k->start) return 0;
    atomic_exchange_explicit(&r->ctl->tail, k->pos, memory_order_seq_cst);
    k->start = k->pos;
    return 1;
}

/* Published cells not yet given back, as the consumer sees them now. Consumer side only. */
static inline uint64_t shm_ring_cons_count(const shm_ring_t *r)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
    return head - tail;
}

#endif /* COHORT_SHM_RING_H */
