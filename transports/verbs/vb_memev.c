/* SPDX-License-Identifier: BSD-3-Clause */
/* Unmapped-memory log of the verbs transport (see vb_memev.h). Without VB_HAVE_UCM (and in the
 * unit tests) only the log exists: vb_memev_start reports that nothing feeds it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "vb_memev.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef VB_HAVE_UCM
#include <dlfcn.h>
#include <ucm/api/ucm.h>
#include <ucs/type/status.h>
#endif

/* The log: ranges [seq % VB_MEMEV_LOG] for seq in [head - VB_MEMEV_LOG, head). head is written
 * under the lock and read without it (a reader that sees its own position skips the lock); the
 * release store pairs with the acquire load, and a thread that unmapped memory and then asks
 * the cache for a registration sees its own store in any case. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static vb_memev_range_t ring[VB_MEMEV_LOG];
static _Atomic uint64_t head;

void vb_memev_record(const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = a + len;
    if (b < a) b = UINTPTR_MAX;
    pthread_mutex_lock(&log_lock);
    uint64_t h = atomic_load_explicit(&head, memory_order_relaxed);
    ring[h % VB_MEMEV_LOG] = (vb_memev_range_t){ a, b };
    atomic_store_explicit(&head, h + 1, memory_order_release);
    pthread_mutex_unlock(&log_lock);
}

uint64_t vb_memev_now(void) { return atomic_load_explicit(&head, memory_order_acquire); }

size_t vb_memev_read(uint64_t *seen, vb_memev_range_t *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&log_lock);
    uint64_t h = atomic_load_explicit(&head, memory_order_relaxed);
    if (h - *seen > VB_MEMEV_LOG) {
        *seen = h;
        pthread_mutex_unlock(&log_lock);
        return SIZE_MAX;
    }
    for (; *seen != h && n < max; ++*seen) out[n++] = ring[*seen % VB_MEMEV_LOG];
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* ---- the source: libucm ------------------------------------------------------------------- */

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static int users;   /* vb_memev_start calls that returned 1 and are not stopped */

#ifdef VB_HAVE_UCM
/* Called by libucm before a range is unmapped, in the unmapping thread (any thread, inside
 * free or munmap): must not allocate, and takes only the log's lock. */
static void on_unmap(ucm_event_type_t type, ucm_event_t *ev, void *arg)
{
    (void)type;
    (void)arg;
    vb_memev_record(ev->vm_unmapped.address, ev->vm_unmapped.size);
}

/* Above UCX's own registration cache handlers' default: the order does not matter, both only
 * take note. */
#define VB_UCM_PRIORITY 1000

/* A malloc block too large for any heap (glibc maps it alone: above its largest dynamic mmap
 * threshold), freed at once: its pages are never touched, so the check costs two system calls. */
#define VB_PROBE_BYTES ((size_t)64 << 20)

/* Did freeing a large malloc block reach the hook? */
static int allocator_reports(void)
{
    uint64_t from = vb_memev_now();
    void *p = malloc(VB_PROBE_BYTES);
    if (!p) return 0;
    uintptr_t a = (uintptr_t)p, b = a + VB_PROBE_BYTES;
    free(p);
    vb_memev_range_t r[64];
    size_t n;
    while ((n = vb_memev_read(&from, r, 64)) != 0 && n != SIZE_MAX)
        for (size_t i = 0; i < n; i++)
            if (r[i].start <= a && b <= r[i].end) return 1;
    return 0;
}
#endif

int vb_memev_start(char *why, size_t whylen)
{
    pthread_mutex_lock(&start_lock);
    if (users > 0) {
        users++;
        pthread_mutex_unlock(&start_lock);
        return 1;
    }
#ifndef VB_HAVE_UCM
    snprintf(why, whylen, "built without UCX's libucm (install libucx-dev and rebuild), so "
             "nothing reports unmapped memory");
    pthread_mutex_unlock(&start_lock);
    return 0;
#else
    ucs_status_t s = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, VB_UCM_PRIORITY, on_unmap, NULL);
    if (s != UCS_OK) {
        snprintf(why, whylen, "libucm cannot report unmapped memory: %s (UCX_MEM_EVENTS=n turns "
                 "it off)", ucs_status_string(s));
        pthread_mutex_unlock(&start_lock);
        return 0;
    }
    if (!allocator_reports()) {
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, on_unmap, NULL);
        snprintf(why, whylen, "freeing a %zu MiB malloc block did not reach libucm's hooks: the "
                 "allocator maps and unmaps without libc (as AddressSanitizer's and valgrind's "
                 "do) or keeps freed blocks mapped", VB_PROBE_BYTES >> 20);
        pthread_mutex_unlock(&start_lock);
        return 0;
    }
    /* libucm keeps calling on_unmap until it is unset: this code must stay mapped even if the
     * plugin is closed while an endpoint is still open. */
    Dl_info di;
    if (dladdr((void *)on_unmap, &di) && di.dli_fname)
        (void)dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    users = 1;
    pthread_mutex_unlock(&start_lock);
    return 1;
#endif
}

void vb_memev_stop(void)
{
    pthread_mutex_lock(&start_lock);
    if (users > 0 && --users == 0) {
#ifdef VB_HAVE_UCM
        ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, on_unmap, NULL);
#endif
    }
    pthread_mutex_unlock(&start_lock);
}
