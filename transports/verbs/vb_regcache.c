/* Registration cache (see vb_regcache.h). A short list: collectives use a handful of buffers. */
#include "vb_regcache.h"

#include <errno.h>
#include <stdlib.h>

void vb_rc_init(vb_regcache_t *rc, size_t cap, size_t page, vb_rc_reg_fn reg,
                vb_rc_dereg_fn dereg, void *arg)
{
    rc->head = NULL;
    rc->count = 0;
    rc->cap = cap ? cap : 1;
    rc->page = page ? page : 4096;
    rc->clock = rc->hits = rc->misses = rc->evictions = 0;
    rc->reg = reg;
    rc->dereg = dereg;
    rc->arg = arg;
}

static void evict(vb_regcache_t *rc)
{
    while (rc->count > rc->cap) {
        vb_rc_entry_t **victim = NULL;
        for (vb_rc_entry_t **pp = &rc->head; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->last_use < (*victim)->last_use))
                victim = pp;
        if (!victim) return;                  /* everything in use: stay above cap for now */
        vb_rc_entry_t *e = *victim;
        *victim = e->next;
        rc->dereg(rc->arg, e->handle);
        free(e);
        rc->count--;
        rc->evictions++;
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
    for (vb_rc_entry_t *e = rc->head; e; e = e->next)
        if (e->start <= a && b <= e->end) {
            e->refs++;
            e->last_use = ++rc->clock;
            rc->hits++;
            return e;
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
    evict(rc);
}

size_t vb_rc_invalidate(vb_regcache_t *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = a + (len ? len : 1);
    size_t busy = 0;
    vb_rc_entry_t **pp = &rc->head;
    while (*pp) {
        vb_rc_entry_t *e = *pp;
        if (e->start < b && a < e->end) {
            if (e->refs) {
                busy++;
            } else {
                *pp = e->next;
                rc->dereg(rc->arg, e->handle);
                free(e);
                rc->count--;
                continue;
            }
        }
        pp = &e->next;
    }
    return busy;
}

void vb_rc_fini(vb_regcache_t *rc)
{
    while (rc->head) {
        vb_rc_entry_t *e = rc->head;
        rc->head = e->next;
        rc->dereg(rc->arg, e->handle);
        free(e);
    }
    rc->count = 0;
}
