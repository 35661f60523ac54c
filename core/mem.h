/* SPDX-License-Identifier: BSD-3-Clause */
/* Node-shareable memory (cohort_mem_alloc): the lookup behind the host table's mem_shared. */
#ifndef COHORT_CORE_MEM_H
#define COHORT_CORE_MEM_H

#include <stddef.h>
#include <stdint.h>

/* 1 if [ptr, ptr + len) lies in one block of this process: its memfd, id and ptr's offset. */
int cohort_mem_shared(const void *ptr, size_t len, int *fd, uint64_t *id, uint64_t *offset);

#endif
