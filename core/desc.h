/* SPDX-License-Identifier: BSD-3-Clause */
/* What a call is, in shape and in words: the per-collective descriptor table (what each
 * collective's arguments are, read by the checks in api.c and by cohort_comm_desc), the names
 * of collectives, data types and operators, the collective's tag and the description of the
 * call in progress that error messages quote. Below everything that reports or checks a
 * call (api, p2p, jobctl, plugin_coll); it calls nothing else of the core. */
#ifndef COHORT_DESC_H
#define COHORT_DESC_H

#include "cohort/cohort.h"
#include "core/coll/coll.h"

/* What each collective's arguments are: validate() (api.c) and cohort_comm_desc read this
 * table instead of chains of conditions. The v-variants have their own checks (check_v). */
enum { IP_NONE, IP_SAME, IP_SEND_IN_RECV, IP_RECV_IN_SEND };
typedef struct cohort_coll_desc {
    unsigned reduces : 1;    /* takes an op */
    unsigned rooted : 1;     /* takes a root */
    unsigned send : 1;       /* reads sendbuf */
    unsigned recv : 1;       /* writes recvbuf */
    unsigned send_root : 1;  /* only the root reads sendbuf (elsewhere it is ignored) */
    unsigned recv_root : 1;  /* only the root writes recvbuf (elsewhere it is ignored) */
    unsigned send_n : 1;     /* sendbuf holds one block of count per rank */
    unsigned recv_n : 1;     /* recvbuf holds one block of count per rank */
    unsigned inplace : 2;    /* the in-place form (cohort.h): IP_* */
    unsigned v : 1;          /* counts and displacements per rank (check_v) */
} cohort_coll_desc_t;

/* The descriptor of coll (a cohort_coll_t, COHORT_OP_SEND or COHORT_OP_RECV). */
const cohort_coll_desc_t *cohort_coll_desc(int coll);

#endif
