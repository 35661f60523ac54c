/* Registration cache of the verbs transport (pure C: registering and deregistering are callbacks,
 * so the unit tests run it without a device).
 *
 * Keyed by address range: a lookup of [addr, addr+len) returns an entry whose range covers it,
 * registering the page-aligned range on a miss. Entries in use (refs > 0) are never evicted;
 * when more than cap entries exist, the least recently used unused ones are deregistered.
 * Ranges that overlap a new registration are not merged (both stay valid until evicted).
 * Caveat, as in every such cache: the registration pins the pages mapped when it was made;
 * memory freed to the OS and mapped again at the same address must be dropped from the cache
 * (vb_rc_invalidate) before reuse, or data goes to the old pages.
 */
#ifndef COHORT_VB_REGCACHE_H
#define COHORT_VB_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct vb_rc_entry {
    uintptr_t start, end;          /* registered range [start, end) */
    void *handle;                  /* what reg returned (an ibv_mr) */
    unsigned refs;
    uint64_t last_use;
    struct vb_rc_entry *next;
} vb_rc_entry_t;

/* reg: registers [addr, addr+len), returns the handle or NULL (errno set). dereg: releases it. */
typedef void *(*vb_rc_reg_fn)(void *arg, void *addr, size_t len);
typedef void (*vb_rc_dereg_fn)(void *arg, void *handle);

typedef struct vb_regcache {
    vb_rc_entry_t *head;
    size_t count, cap;
    size_t page;
    uint64_t clock;
    uint64_t hits, misses, evictions;
    vb_rc_reg_fn reg;
    vb_rc_dereg_fn dereg;
    void *arg;
} vb_regcache_t;

void vb_rc_init(vb_regcache_t *rc, size_t cap, size_t page, vb_rc_reg_fn reg,
                vb_rc_dereg_fn dereg, void *arg);
/* Returns an entry covering [addr, addr+len) with one more reference, or NULL when reg failed
 * (errno from reg kept). len 0 is treated as 1 byte. */
vb_rc_entry_t *vb_rc_get(vb_regcache_t *rc, const void *addr, size_t len);
void vb_rc_put(vb_regcache_t *rc, vb_rc_entry_t *e);
/* Drops unused entries overlapping [addr, addr+len); returns how many remain in use there. */
size_t vb_rc_invalidate(vb_regcache_t *rc, const void *addr, size_t len);
/* Deregisters everything (references or not). */
void vb_rc_fini(vb_regcache_t *rc);

#endif /* COHORT_VB_REGCACHE_H */
