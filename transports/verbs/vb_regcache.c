/* SPDX-License-Identifier: BSD-3-Clause */
/* Registration cache (see vb_regcache.h). A short list: collectives use a handful of buffers. */
#include "vb_regcache.h"
#include "vb_memev.h"

#include <errno.h>
#include <stdlib.h>

void vb_rc_init(vb_regcache_t *rc, size_t cap, size_t page, int keep, vb_rc_reg_fn reg,
                vb_rc_dereg_fn dereg, void *arg)
{
    rc->head = NULL;
    rc->count = 0;
    rc->cap = cap ? cap : 1;
    rc->page = page ? page : 4096;
    rc->keep = keep;
    rc->seen = vb_memev_now();   /* what was unmapped before is not in the cache */
    rc->clock = rc->hits = rc->misses = rc->evictions = rc->invalidated = 0;
    rc->reg = reg;
    rc->dereg = dereg;
    rc->arg = arg;
}

static void drop(vb_regcache_t *rc, vb_rc_entry_t **pp)
{
    vb_rc_entry_t *e = *pp;
    *pp = e->next;
    rc->dereg(rc->arg, e->handle);
    free(e);
    rc->count--;
}

static void evict(vb_regcache_t *rc)
{
    while (rc->count > rc->cap) {
        vb_rc_entry_t **victim = NULL;
        for (vb_rc_entry_t **pp = &rc->head; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->last_use < (*victim)->last_use))
                victim = pp;
        if (!victim) return;                  /* everything in use: stay above cap for now */
        drop(rc, victim);
        rc->evictions++;
    }
}

static size_t invalidate(vb_regcache_t *rc, uintptr_t a, uintptr_t b)
{
    size_t busy = 0;
    vb_rc_entry_t **pp = &rc->head;
    while (*pp) {
        vb_rc_entry_t *e = *pp;
        if (e->start < b && a < e->end) {
            if (!e->stale) rc->invalidated++;
            if (e->refs) {
                e->stale = 1;
                busy++;
            } else {
                drop(rc, pp);
                continue;
            }
        }
        pp = &e->next;
    }
    return busy;
}

/* Applies what was unmapped since the last lookup. Deregistering may itself unmap (and so log)
 * memory: the loop reads on until the log is caught up. */
static void sync_unmaps(vb_regcache_t *rc)
{
    if (vb_memev_now() == rc->seen) return;
    vb_memev_range_t r[32];
    size_t n;
    while ((n = vb_memev_read(&rc->seen, r, sizeof r / sizeof *r)) != 0) {
        if (!rc->head) continue;              /* nothing to drop: just catch up */
        if (n == SIZE_MAX) {                  /* lost track: anything may be gone */
            invalidate(rc, 0, UINTPTR_MAX);
            continue;
        }
        for (size_t i = 0; i < n; i++) invalidate(rc, r[i].start, r[i].end);
    }
}

vb_rc_entry_t *vb_rc_get(vb_regcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    if (len == 0) len = 1;
    if (a + len < a) {
        errno = EINVAL;
        return NULL;
    }
    uintptr_t b = a + len;
    if (rc->keep) {
        sync_unmaps(rc);
        for (vb_rc_entry_t *e = rc->head; e; e = e->next)
            if (!e->stale && e->start <= a && b <= e->end) {
                e->refs++;
                e->last_use = ++rc->clock;
                rc->hits++;
                return e;
            }
    }
    uintptr_t s = a & ~(uintptr_t)(rc->page - 1);
    uintptr_t t = (b + rc->page - 1) & ~(uintptr_t)(rc->page - 1);
    if (t < b) t = b;                         /* the very top of the address space */
    vb_rc_entry_t *e = calloc(1, sizeof *e);
    if (!e) {
        errno = ENOMEM;
        return NULL;
    }
    e->handle = rc->reg(rc->arg, (void *)s, (size_t)(t - s));
    if (!e->handle) {
        int err = errno;
        free(e);
        errno = err;
        return NULL;
    }
    e->start = s;
    e->end = t;
    e->refs = 1;
    e->stale = !rc->keep;
    e->last_use = ++rc->clock;
    e->next = rc->head;
    rc->head = e;
    rc->count++;
    rc->misses++;
    evict(rc);
    return e;
}

void vb_rc_put(vb_regcache_t *rc, vb_rc_entry_t *e)
{
    if (!e) return;
    if (e->refs) e->refs--;
    if (e->refs == 0 && e->stale)
        for (vb_rc_entry_t **pp = &rc->head; *pp; pp = &(*pp)->next)
            if (*pp == e) {
                drop(rc, pp);
                break;
            }
    evict(rc);
}

size_t vb_rc_invalidate(vb_regcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = a + (len ? len : 1);
    if (b < a) b = UINTPTR_MAX;
    return invalidate(rc, a, b);
}

void vb_rc_fini(vb_regcache_t *rc)
{
    while (rc->head) drop(rc, &rc->head);
    rc->count = 0;
}
