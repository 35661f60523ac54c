/* SPDX-License-Identifier: BSD-3-Clause */
/* Algorithm table and selection.
 *
 * COHORT_ALGO (e.g. "allreduce:ring;broadcast:tree") wins when it names an algorithm for the
 * collective; otherwise the choice is by message size:
 *  - allreduce: recursive doubling up to RD_MAX_BYTES, ring above. Recursive doubling takes
 *    ceil(log2 n) (+2 when n is not a power of two) latency steps but moves the whole buffer at
 *    each, i.e. about log2(n) * S bytes per rank; the ring takes 2(n-1) steps and moves
 *    2 (n-1)/n * S. With per-message latencies of a few microseconds and links of 10-100 Gb/s,
 *    the crossover for n = 4..64 sits between tens and a few hundred KiB. Measured over loopback
 *    TCP (cohort-bench; docs/performance-log.md, "Measurements behind the code's constants"): at
 *    n = 2 the two are level at 64 KiB and the ring wins above; at n = 4 rd still wins at
 *    256 KiB and the ring at 1 MiB. So rd up to RD_MAX_BYTES_2 for two ranks, RD_MAX_BYTES
 *    above.
 *  - broadcast: binomial tree (log2 n steps, whole message each) up to TREE_MAX_BYTES, pipelined
 *    chain above (time ~ S/bandwidth + (n-2) chunk latencies).
 *  - a float32 SUM/AVG allreduce asked to travel compressed (COHORT_COMPRESS) runs
 *    "compressed" wherever its ranks span nodes (on one node memory outruns any conversion);
 *  - the other collectives have one algorithm each (gather and scatter: linear, the root posts
 *    every receive or send at once, as Gloo does; the v-variants: ring and pairwise).
 * On a communicator with a hierarchy (several nodes, core/comm.c; COHORT_HIERARCHICAL), allreduce
 * and broadcast run "hier" from HIER_MIN_BYTES (allgather: of the result) and so does allgather
 * when the nodes have equal numbers of ranks; COHORT_HIERARCHICAL=1 runs it at every size.
 * Measured over 2 netns nodes x 2 ranks (1 Gbit/s; docs/performance-log.md, "Measurements behind
 * the code's constants"): hier and ring are level at 256 KiB, hier wins from 1 MiB and loses
 * below (two sub-collectives, each a wake-up chain when, as there, the nodes' ranks share
 * cores).
 * COHORT_ALGO=<coll>:hier where there is no hierarchy (one node, or the node and cross
 * communicators themselves, which inherit the setting) falls back to the choice by size.
 */
#include <stdio.h>
#include <string.h>

#include "core/coll/coll.h"
#include "core/log.h"
#include "core/parse.h"

#define RD_MAX_BYTES_2 (64u * 1024u)
#define RD_MAX_BYTES   (256u * 1024u)
#define TREE_MAX_BYTES (64u * 1024u)
#define HIER_MIN_BYTES (512u * 1024u)


static const cohort_algo_t algos[] = {
    {COHORT_COLL_ALLREDUCE, "ring", cohort_allreduce_ring},
    {COHORT_COLL_ALLREDUCE, "rd", cohort_allreduce_rd},
    {COHORT_COLL_BROADCAST, "chain", cohort_broadcast_chain},
    {COHORT_COLL_BROADCAST, "tree", cohort_broadcast_tree},
    {COHORT_COLL_REDUCE, "tree", cohort_reduce_tree},
    {COHORT_COLL_ALLGATHER, "ring", cohort_allgather_ring},
    {COHORT_COLL_REDUCE_SCATTER, "ring", cohort_reduce_scatter_ring},
    {COHORT_COLL_ALLTOALL, "pairwise", cohort_alltoall_pairwise},
    {COHORT_COLL_BARRIER, "dissemination", cohort_barrier_dissemination},
    {COHORT_COLL_ALLREDUCE, "hier", cohort_allreduce_hier},
    {COHORT_COLL_BROADCAST, "hier", cohort_broadcast_hier},
    {COHORT_COLL_ALLGATHER, "hier", cohort_allgather_hier},
    {COHORT_COLL_ALLGATHERV, "ring", cohort_allgatherv_ring},
    {COHORT_COLL_ALLTOALLV, "pairwise", cohort_alltoallv_pairwise},
    {COHORT_COLL_GATHER, "linear", cohort_gather_linear},
    {COHORT_COLL_SCATTER, "linear", cohort_scatter_linear},
    {COHORT_COLL_ALLREDUCE, "compressed", cohort_allreduce_compressed},
};
#define NALGOS ((int)(sizeof(algos) / sizeof(algos[0])))

const cohort_algo_t *cohort_algos(int *count)
{
    if (count)
        *count = NALGOS;
    return algos;
}

static const cohort_algo_t *find(cohort_coll_t coll, const char *name)
{
    for (int i = 0; i < NALGOS; i++)
        if (algos[i].coll == coll && strcmp(algos[i].name, name) == 0)
            return &algos[i];
    return NULL;
}

cohort_status_t cohort_coll_select(cohort_comm_t *comm, const cohort_coll_args_t *a,
                                   const cohort_algo_t **algo)
{
    if (!a || !algo || (int)a->coll < 0 || a->coll >= COHORT_COLL_COUNT)
        return cohort_error(COHORT_ERR_INTERNAL,
                            "algorithm selection: called without arguments or with an unknown "
                            "collective (%d); this is a bug in cohort, please report it",
                            a ? (int)a->coll : -1);
    const char *cname = cohort_coll_name(a->coll);
    const cohort_algo_spec_t *spec = comm ? cohort_coll_algo_spec(comm) : NULL;
    const char *want = spec ? cohort_algo_spec_get(spec, cname) : NULL;

    cohort_hier_view_t h;
    int avail = comm && cohort_coll_hier(comm, &h) &&
                (a->coll == COHORT_COLL_ALLREDUCE || a->coll == COHORT_COLL_BROADCAST ||
                 (a->coll == COHORT_COLL_ALLGATHER && h.even));
    int hier = avail;
    if (hier && !h.forced) {
        size_t total = a->count * a->esize *
                       (a->coll == COHORT_COLL_ALLGATHER ? (size_t)cohort_coll_size(comm) : 1);
        hier = total >= HIER_MIN_BYTES;
    }
    if (want && !strcmp(want, "hier") && !avail && find(a->coll, want))
        want = NULL;   /* no hierarchy here: by size */
    if (want && *want) {
        const cohort_algo_t *f = find(a->coll, want);
        if (!f) {
            char valid[256] = "";
            size_t len = 0;
            for (int i = 0; i < NALGOS; i++) {
                if (algos[i].coll != a->coll)
                    continue;
                int w = snprintf(valid + len, sizeof(valid) - len, "%s%s", len ? ", " : "",
                                 algos[i].name);
                if (w < 0 || (size_t)w >= sizeof(valid) - len)
                    break;
                len += (size_t)w;
            }
            return cohort_error(COHORT_ERR_INVALID_ARG,
                                "COHORT_ALGO names algorithm '%s' for %s, which has no such "
                                "algorithm; valid for %s: %s",
                                want, cname, cname, valid);
        }
        *algo = f;
        return COHORT_SUCCESS;
    }

    size_t bytes = a->count * a->esize;
    const char *name;
    if (hier) {
        *algo = find(a->coll, "hier");
        return COHORT_SUCCESS;
    }
    if (a->coll == COHORT_COLL_ALLREDUCE && a->wire && comm && cohort_coll_nodes(comm) > 1) {
        *algo = find(a->coll, "compressed");   /* the hierarchy's cross step lands here too */
        return COHORT_SUCCESS;
    }
    switch (a->coll) {
    case COHORT_COLL_ALLREDUCE:
        name = bytes <= (cohort_coll_size(comm) == 2 ? RD_MAX_BYTES_2 : RD_MAX_BYTES) ? "rd"
                                                                                     : "ring";
        break;
    case COHORT_COLL_BROADCAST: name = bytes <= TREE_MAX_BYTES ? "tree" : "chain"; break;
    case COHORT_COLL_REDUCE: name = "tree"; break;
    case COHORT_COLL_ALLGATHER: name = "ring"; break;
    case COHORT_COLL_REDUCE_SCATTER: name = "ring"; break;
    case COHORT_COLL_ALLTOALL: name = "pairwise"; break;
    case COHORT_COLL_BARRIER: name = "dissemination"; break;
    case COHORT_COLL_ALLGATHERV: name = "ring"; break;
    case COHORT_COLL_ALLTOALLV: name = "pairwise"; break;
    case COHORT_COLL_GATHER: name = "linear"; break;
    case COHORT_COLL_SCATTER: name = "linear"; break;
    default: name = "";
    }
    *algo = find(a->coll, name);
    if (!*algo)
        return cohort_error(COHORT_ERR_INTERNAL,
                            "algorithm selection: no default algorithm for %s; this is a bug in "
                            "cohort, please report it", cname);
    return COHORT_SUCCESS;
}
