/* SPDX-License-Identifier: BSD-3-Clause */
/* Which memory the process has unmapped: what the registration cache (vb_regcache.h) needs to
 * never hand out a registration whose pages are gone.
 *
 * A registration pins the pages mapped when it was made. When the range is unmapped (munmap,
 * free of an mmap'd malloc block, mremap, brk shrinking, madvise(MADV_DONTNEED)) and memory is
 * mapped there again, the same virtual address has other pages, and an RDMA through the old
 * registration reads or writes the old ones: wrong data with no error. So the cache drops every
 * registration that overlaps an unmapped range before its next lookup.
 *
 * The events come from UCX's libucm (VB_HAVE_UCM), which patches those calls in libc and reports
 * each unmapped range (UCM_EVENT_VM_UNMAPPED) before it goes. The hook runs in whatever thread
 * unmaps, inside the call: it only appends the range to a process-wide log (a ring of
 * VB_MEMEV_LOG ranges under a mutex; it never allocates), and each cache reads the log from
 * where it last stopped. A cache that fell more than VB_MEMEV_LOG ranges behind learns that it
 * lost some and drops everything it can.
 *
 * libucm sees only what goes through libc. An allocator that maps and unmaps by raw system calls
 * (AddressSanitizer's, valgrind's) would free pages behind the hook's back, so vb_memev_start
 * checks the allocator itself: it frees a large malloc block and requires the hook to report
 * it. When that fails (or there is no libucm, or UCX_MEM_EVENTS=n) the cache must not keep
 * registrations beyond the message that made them.
 */
#ifndef COHORT_VB_MEMEV_H
#define COHORT_VB_MEMEV_H

#include <stddef.h>
#include <stdint.h>

#define VB_MEMEV_LOG 1024

typedef struct vb_memev_range {
    uintptr_t start, end;   /* [start, end) */
} vb_memev_range_t;

/* Starts the events for one more user: the first installs libucm's handler and checks that
 * freeing a large malloc block is reported. Returns 1 when unmaps are seen (pair it with
 * vb_memev_stop), 0 when they are not, with the reason in why. */
int vb_memev_start(char *why, size_t whylen);
void vb_memev_stop(void);

/* Records [addr, addr + len) as unmapped: the hook's work, callable directly (unit tests). */
void vb_memev_record(const void *addr, size_t len);

/* Where the log is now: a reader whose position equals it has nothing to read. */
uint64_t vb_memev_now(void);

/* Copies up to max ranges recorded since *seen into out and advances *seen past them. Returns
 * how many, or SIZE_MAX when ranges the reader had not seen were overwritten: *seen is then
 * moved to the present and the reader must treat every range as unmapped. */
size_t vb_memev_read(uint64_t *seen, vb_memev_range_t *out, size_t max);

#endif /* COHORT_VB_MEMEV_H */
