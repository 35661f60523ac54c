/* SPDX-License-Identifier: BSD-3-Clause */
/* The rendezvous address from the launcher: PMIx, or Slurm's node list (core/launcher.h). */
#include "core/launcher.h"
#include "core/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_PMIX
#include <pmix.h>
#endif

#define SUBSYS "boot"
/* The key rank 0 puts: its rendezvous address, or "error:" and why it has none. */
#define RDV_KEY "cohort.rendezvous"

int cohort_pmix_present(void)
{
    const char *ns = getenv("PMIX_NAMESPACE"), *rk = getenv("PMIX_RANK");
    return (ns && *ns) || (rk && *rk);
}

#ifdef HAVE_PMIX

static int g_inited;
static pmix_proc_t g_me;

int cohort_pmix_built(void) { return 1; }

static const char *what_to_set =
    "set COHORT_RENDEZVOUS=tcp://<rank 0's host>:<free port> (or file://<shared dir>) instead";

static cohort_status_t pmix_init(void)
{
    if (g_inited) return COHORT_SUCCESS;
    pmix_status_t rc = PMIx_Init(&g_me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return cohort_error(COHORT_ERR_SYSTEM, "PMIx_Init failed: %s (PMIX_NAMESPACE='%s', "
                            "PMIX_RANK='%s': the launcher's PMIx server cannot be reached); %s",
                            PMIx_Error_string(rc), getenv("PMIX_NAMESPACE") ?
                            getenv("PMIX_NAMESPACE") : "", getenv("PMIX_RANK") ?
                            getenv("PMIX_RANK") : "", what_to_set);
    g_inited = 1;
    return COHORT_SUCCESS;
}

void cohort_pmix_finalize(void)
{
    if (!g_inited) return;
    g_inited = 0;
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        COHORT_INFO(SUBSYS, "PMIx_Finalize: %s", PMIx_Error_string(rc));
}

/* An integer key of proc (this process, or PMIX_RANK_WILDCARD: the job); -1 when PMIx has none. */
static long get_int(pmix_rank_t rank, const char *key, pmix_status_t *rc)
{
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, g_me.nspace, rank);
    pmix_value_t *val = NULL;
    *rc = PMIx_Get(&proc, key, NULL, 0, &val);
    if (*rc != PMIX_SUCCESS || !val) return -1;
    long v = -1;
    switch (val->type) {
    case PMIX_UINT16: v = val->data.uint16; break;
    case PMIX_UINT32: v = val->data.uint32; break;
    case PMIX_INT: v = val->data.integer; break;
    case PMIX_UINT64: v = val->data.uint64 > (1u << 30) ? -1 : (long)val->data.uint64; break;
    default: break;
    }
    PMIX_VALUE_RELEASE(val);
    return v;
}

cohort_status_t cohort_pmix_identity(int *rank, int *nranks, int *local_rank, int *local_size)
{
    cohort_status_t st = pmix_init();
    if (st) return st;
    pmix_status_t rc;
    long size = get_int(PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, &rc);
    if (rc != PMIX_SUCCESS)
        return cohort_error(COHORT_ERR_SYSTEM, "PMIx_Get(%s) of namespace '%s' failed: %s; set "
                            "COHORT_RANK and COHORT_SIZE, or %s", PMIX_JOB_SIZE, g_me.nspace,
                            PMIx_Error_string(rc), what_to_set);
    if (size < 1 || size > (1 << 24) || g_me.rank >= (pmix_rank_t)size)
        return cohort_error(COHORT_ERR_SYSTEM, "PMIx gave rank %u of %ld in namespace '%s': "
                            "not a rank of the job; set COHORT_RANK and COHORT_SIZE, or %s",
                            (unsigned)g_me.rank, size, g_me.nspace, what_to_set);
    *rank = (int)g_me.rank;
    *nranks = (int)size;
    /* on this node: optional (-1 when the server does not say) */
    long lr = get_int(g_me.rank, PMIX_LOCAL_RANK, &rc), ls = get_int(PMIX_RANK_WILDCARD,
                                                                       PMIX_LOCAL_SIZE, &rc);
    *local_rank = lr >= 0 && ls > lr ? (int)lr : -1;
    *local_size = lr >= 0 && ls > lr ? (int)ls : -1;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_pmix_exchange(int rank, const char *url, const char *why, char *out,
                                     size_t outlen, double timeout_s)
{
    cohort_status_t st = pmix_init();
    if (st) return st;
    if ((int)g_me.rank != rank)
        return cohort_error(COHORT_ERR_INVALID_ARG, "PMIx says this process is rank %u of "
                            "namespace '%s', the launcher's variables say rank %d: set "
                            "COHORT_RENDEZVOUS (and COHORT_RANK/COHORT_SIZE) to say which",
                            (unsigned)g_me.rank, g_me.nspace, rank);
    pmix_status_t rc;
    if (rank == 0) {
        char text[1100];
        if (url) snprintf(text, sizeof text, "%s", url);
        else snprintf(text, sizeof text, "error:%.1000s", why ? why : "no reason given");
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_STRING;
        v.data.string = text;
        rc = PMIx_Put(PMIX_GLOBAL, RDV_KEY, &v);
        if (rc != PMIX_SUCCESS)
            return cohort_error(COHORT_ERR_SYSTEM, "rank 0: PMIx_Put(%s) failed: %s; %s",
                                RDV_KEY, PMIx_Error_string(rc), what_to_set);
    }
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS)
        return cohort_error(COHORT_ERR_SYSTEM, "rank %d: PMIx_Commit failed: %s; %s", rank,
                            PMIx_Error_string(rc), what_to_set);
    /* Every rank of the namespace (NULL procs); PMIx's timeout is whole seconds, at least 1. */
    pmix_info_t info[2];
    bool collect = true;
    int secs = timeout_s < 1 ? 1 : timeout_s > 1e6 ? 1000000 : (int)(timeout_s + 0.999);
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS)
        return cohort_error(rc == PMIX_ERR_TIMEOUT ? COHORT_ERR_TIMEOUT : COHORT_ERR_SYSTEM,
                            "rank %d: PMIx_Fence over namespace '%s' (to share rank 0's "
                            "rendezvous address, at most %d s, COHORT_TIMEOUT) failed: %s; did "
                            "every rank call cohort_comm_init? Otherwise %s", rank, g_me.nspace,
                            secs, PMIx_Error_string(rc), what_to_set);
    if (rank == 0) return COHORT_SUCCESS;
    pmix_proc_t zero;
    PMIX_PROC_LOAD(&zero, g_me.nspace, 0);
    pmix_value_t *val = NULL;
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Get(&zero, RDV_KEY, info, 1, &val);
    PMIX_INFO_DESTRUCT(&info[0]);
    if (rc != PMIX_SUCCESS || !val || val->type != PMIX_STRING || !val->data.string) {
        if (val) PMIX_VALUE_RELEASE(val);
        return cohort_error(COHORT_ERR_SYSTEM, "rank %d: PMIx_Get(%s) from rank 0 of namespace "
                            "'%s' failed: %s; %s", rank, RDV_KEY, g_me.nspace,
                            rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "not a string",
                            what_to_set);
    }
    char text[1100];
    snprintf(text, sizeof text, "%s", val->data.string);
    PMIX_VALUE_RELEASE(val);
    if (!strncmp(text, "error:", 6))
        return cohort_error(COHORT_ERR_ABORTED, "rank 0 could not host the rendezvous (it "
                            "said so through PMIx): %s", text + 6);
    if (strlen(text) >= outlen)
        return cohort_error(COHORT_ERR_SYSTEM, "rank %d: the rendezvous address from PMIx is "
                            "%zu characters long, more than %zu", rank, strlen(text), outlen - 1);
    memcpy(out, text, strlen(text) + 1);
    return COHORT_SUCCESS;
}

#else /* !HAVE_PMIX */

int cohort_pmix_built(void) { return 0; }

static cohort_status_t not_built(void)
{
    return cohort_error(COHORT_ERR_UNSUPPORTED, "this process was started by a PMIx launcher "
                        "(PMIX_NAMESPACE is set), but this cohort was built without PMIx "
                        "(configure did not find it, or was given --without-pmix: apt-get "
                        "install libpmix-dev, configure again and rebuild); or set "
                        "COHORT_RENDEZVOUS=tcp://<rank 0's host>:<free port> or file://<shared "
                        "dir> instead");
}

cohort_status_t cohort_pmix_identity(int *rank, int *nranks, int *local_rank, int *local_size)
{
    (void)rank, (void)nranks, (void)local_rank, (void)local_size;
    return not_built();
}

cohort_status_t cohort_pmix_exchange(int rank, const char *url, const char *why, char *out,
                                     size_t outlen, double timeout_s)
{
    (void)rank, (void)url, (void)why, (void)out, (void)outlen, (void)timeout_s;
    return not_built();
}

void cohort_pmix_finalize(void) {}

#endif /* HAVE_PMIX */

/* ---- Slurm --------------------------------------------------------------------------------- */

static cohort_status_t bad_list(const char *list, const char *why)
{
    return cohort_error(COHORT_ERR_INVALID_ARG, "cannot read the first host of the Slurm node "
                        "list '%.200s': %s; set COHORT_RENDEZVOUS=tcp://<rank 0's "
                        "host>:<free port> instead", list, why);
}

cohort_status_t cohort_slurm_first_host(const char *list, char *host, size_t hostlen)
{
    if (!list || !*list) return bad_list(list ? list : "", "it is empty");
    size_t n = 0;
    int depth = 0;
    const char *p = list;
    /* The first host is the first comma-separated item (commas inside brackets do not end it)
     * with each bracket replaced by the first number written in it, digits as written. */
    for (; *p && !(*p == ',' && depth == 0); p++) {
        if (*p == '[') {
            if (depth) return bad_list(list, "a '[' inside brackets");
            depth = 1;
            const char *d = p + 1;
            size_t len = 0;
            while (isdigit((unsigned char)d[len])) len++;
            if (len == 0) return bad_list(list, "a bracket that does not start with a number");
            const char *after = d + len;
            if (*after == '-') {
                const char *h = after + 1;
                size_t hl = 0;
                while (isdigit((unsigned char)h[hl])) hl++;
                if (hl == 0) return bad_list(list, "a range without its upper end");
                if (strtoul(h, NULL, 10) < strtoul(d, NULL, 10))
                    return bad_list(list, "a range whose upper end is below its lower end");
                after = h + hl;
            }
            if (!strchr(after, ']')) return bad_list(list, "a '[' without its ']'");
            if (*after != ',' && *after != ']')
                return bad_list(list, "a bracket holding something other than numbers and "
                                "ranges");
            if (n + len >= hostlen) return bad_list(list, "the host name is too long");
            memcpy(host + n, d, len);
            n += len;
            /* skip the rest of the bracket, checking that it closes */
            const char *close = strchr(after, ']');
            if (!close) return bad_list(list, "a '[' without its ']'");
            for (const char *q = after; q < close; q++)
                if (!isdigit((unsigned char)*q) && *q != ',' && *q != '-')
                    return bad_list(list, "a bracket holding something other than numbers and "
                                    "ranges");
            p = close;
            depth = 0;
            continue;
        }
        if (*p == ']') return bad_list(list, "a ']' without its '['");
        if (isspace((unsigned char)*p)) return bad_list(list, "a blank in a host name");
        if (n + 1 >= hostlen) return bad_list(list, "the host name is too long");
        host[n++] = *p;
    }
    if (n == 0) return bad_list(list, "its first host name is empty");
    host[n] = '\0';
    return COHORT_SUCCESS;
}

int cohort_slurm_port(unsigned long job_id, unsigned long step_id)
{
    return 20000 + (int)((job_id % 12000 * 8 + step_id % 12000) % 12000);
}
