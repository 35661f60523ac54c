/* SPDX-License-Identifier: BSD-3-Clause */
/* Memory the ranks of one node can map: cohort_mem_alloc / cohort_mem_free (cohort.h), and the
 * lookup the plugins get through the host table (ABI 1.3, mem_shared).
 *
 * A block is a memfd named "cohort-mem-<pid>-<id>", mapped shared and read-write here. A peer on
 * the same node maps it read-only by opening /proc/<pid>/fd/<fd> (the shm transport does, for
 * its node collectives): that needs the same rights as reading the process's file descriptors,
 * which is less than process_vm_readv needs (Yama's ptrace_scope does not apply). Nothing here
 * knows of peers: the registry only answers "is this range in a block, which one".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memfd_create */
#endif
#include "cohort/cohort.h"
#include "core/log.h"
#include "core/mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct block {
    uintptr_t base;
    size_t len;        /* mapped length (whole pages) */
    int fd;
    uint64_t id;
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *blocks;
static size_t nblocks, capblocks;
static _Atomic size_t live;    /* nblocks, readable without the lock (the empty case is common) */
static uint64_t next_id;
static pid_t owner;            /* the process that made the blocks: a forked child inherits the
                                  mappings but not the right to hand them out under its pid */

cohort_status_t cohort_mem_alloc(size_t size, void **ptr)
{
    if (!ptr) return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_mem_alloc: ptr is NULL");
    *ptr = NULL;
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (size == 0 || size > ((size_t)1 << 46))
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_mem_alloc: size %zu is not in "
                            "[1, 64 TiB]", size);
    size_t len = (size + pg - 1) / pg * pg;

    pthread_mutex_lock(&lock);
    if (owner != getpid()) {   /* first use, or in a forked child: its blocks are not its own */
        owner = getpid();
        nblocks = 0;
        atomic_store(&live, 0);
    }
    uint64_t id = ++next_id;
    pthread_mutex_unlock(&lock);

    char name[64];
    snprintf(name, sizeof name, "cohort-mem-%d-%llu", (int)getpid(), (unsigned long long)id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return cohort_error(errno == EMFILE || errno == ENFILE ? COHORT_ERR_SYSTEM
                            : errno == ENOMEM ? COHORT_ERR_NO_MEMORY : COHORT_ERR_SYSTEM,
                            "cohort_mem_alloc: memfd_create for %zu bytes failed: %s%s", size,
                            strerror(errno), errno == EMFILE || errno == ENFILE
                            ? " (every block holds a file descriptor: raise ulimit -n, or "
                              "allocate fewer, larger blocks)" : "");
    if (ftruncate(fd, (off_t)len) < 0) {
        int e = errno;
        close(fd);
        return cohort_error(COHORT_ERR_NO_MEMORY, "cohort_mem_alloc: sizing a memfd to %zu "
                            "bytes failed: %s", len, strerror(e));
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return cohort_error(COHORT_ERR_NO_MEMORY, "cohort_mem_alloc: mapping %zu bytes failed: "
                            "%s", len, strerror(e));
    }
    pthread_mutex_lock(&lock);
    if (nblocks == capblocks) {
        size_t cap = capblocks ? capblocks * 2 : 16;
        block_t *nb = realloc(blocks, cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&lock);
            munmap(p, len);
            close(fd);
            return cohort_error(COHORT_ERR_NO_MEMORY, "cohort_mem_alloc: out of memory for "
                                "the block list");
        }
        blocks = nb;
        capblocks = cap;
    }
    blocks[nblocks++] = (block_t){ (uintptr_t)p, len, fd, id };
    atomic_store(&live, nblocks);
    pthread_mutex_unlock(&lock);
    cohort_log(COHORT_LOG_TRACE, "mem", "cohort_mem_alloc: %zu bytes at %p (memfd %d, %s)",
               size, p, fd, name);
    *ptr = p;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_mem_free(void *ptr)
{
    if (!ptr) return COHORT_SUCCESS;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < nblocks && blocks[i].base != (uintptr_t)ptr) i++;
    if (owner != getpid() || i == nblocks) {
        pthread_mutex_unlock(&lock);
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_mem_free: %p is not the start of a "
                            "block from cohort_mem_alloc in this process (freed twice, or "
                            "from malloc?)", ptr);
    }
    block_t b = blocks[i];
    blocks[i] = blocks[--nblocks];
    atomic_store(&live, nblocks);
    pthread_mutex_unlock(&lock);
    munmap((void *)b.base, b.len);
    close(b.fd);
    return COHORT_SUCCESS;
}

int cohort_mem_shared(const void *ptr, size_t len, int *fd, uint64_t *id, uint64_t *offset)
{
    if (!ptr || !fd || !id || !offset || atomic_load_explicit(&live, memory_order_relaxed) == 0)
        return 0;
    uintptr_t p = (uintptr_t)ptr;
    int found = 0;
    pthread_mutex_lock(&lock);
    if (owner == getpid()) {
        for (size_t i = 0; i < nblocks; i++) {
            const block_t *b = &blocks[i];
            if (p >= b->base && p - b->base <= b->len && len <= b->len - (p - b->base)) {
                *fd = b->fd;
                *id = b->id;
                *offset = (uint64_t)(p - b->base);
                found = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}
