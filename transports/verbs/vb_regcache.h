/* SPDX-License-Identifier: BSD-3-Clause */
/* Registration cache of the verbs transport (pure C: registering and deregistering are callbacks,
 * so the unit tests run it without a device).
 *
 * Keyed by address range: a lookup of [addr, addr+len) returns an entry whose range covers it,
 * registering the page-aligned range on a miss. Entries in use (refs > 0) are never evicted;
 * when more than cap entries exist, the least recently used unused ones are deregistered.
 * Ranges that overlap a new registration are not merged (both stay valid until evicted).
 *
 * A registration pins the pages mapped when it was made, so an entry may outlive its message
 * only while nothing can unmap its range unnoticed: with keep set, every lookup first reads the
 * process's log of unmapped ranges (vb_memev.h) and drops the entries they overlap (one in use
 * is marked stale: never found again, deregistered when its last user puts it). Without keep
 * (nothing reports unmaps) every entry is stale from the start: registered for one message and
 * deregistered when it completes.
 */
#ifndef COHORT_VB_REGCACHE_H
#define COHORT_VB_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct vb_rc_entry {
    uintptr_t start, end;          /* registered range [start, end) */
    void *handle;                  /* what reg returned (an ibv_mr) */
    unsigned refs;
    int stale;                     /* its pages may be gone: deregistered at the last put */
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
    int keep;                      /* entries outlive their message (the unmap log is read) */
    uint64_t seen;                 /* position in the unmap log (vb_memev_read) */
    uint64_t clock;
    uint64_t hits, misses, evictions, invalidated;
    vb_rc_reg_fn reg;
    vb_rc_dereg_fn dereg;
    void *arg;
} vb_regcache_t;

/* keep: 1 when unmaps are reported (vb_memev_start returned 1), else 0. */
void vb_rc_init(vb_regcache_t *rc, size_t cap, size_t page, int keep, vb_rc_reg_fn reg,
                vb_rc_dereg_fn dereg, void *arg);
/* Returns an entry covering [addr, addr+len) with one more reference, or NULL when reg failed
 * (errno from reg kept). len 0 is treated as 1 byte. */
vb_rc_entry_t *vb_rc_get(vb_regcache_t *rc, const void *addr, size_t len);
void vb_rc_put(vb_regcache_t *rc, vb_rc_entry_t *e);
/* Drops the entries overlapping [addr, addr+len): unused ones are deregistered, those in use
 * marked stale. Returns how many were in use. */
size_t vb_rc_invalidate(vb_regcache_t *rc, const void *addr, size_t len);
/* Deregisters everything (references or not). */
void vb_rc_fini(vb_regcache_t *rc);

#endif /* COHORT_VB_REGCACHE_H */
