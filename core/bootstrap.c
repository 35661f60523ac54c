/* SPDX-License-Identifier: BSD-3-Clause */
/* Identity from the launcher's environment, and the bootstrap allgathers. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/jobctl.h"
#include "core/launcher.h"
#include "core/config.h"
#include "core/hmac.h"
#include "core/log.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/timeutil.h"
#include "topology/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SUBSYS "boot"

/* ---- identity --------------------------------------------------------------------------- */

typedef struct launcher_vars {
    const char *name, *rank, *size, *local_rank, *local_size;
} launcher_vars_t;

static const launcher_vars_t launchers[] = {
    { "cohortrun", "COHORT_RANK", "COHORT_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_SIZE" },
    { "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE" },
    { "MPICH/hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS" },
    { "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL },
    { "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE" },
};

static cohort_status_t env_int(const char *name, long max, int *out)
{
    const char *v = getenv(name);
    if (!name || !v) return COHORT_SUCCESS;
    long x;
    cohort_status_t st = cohort_parse_long(name, v, 0, max, &x);
    if (!st) *out = (int)x;
    return st;
}

static cohort_status_t derive_job_id(cohort_identity_t *id)
{
    const char *v;
    char buf[256];
    if ((v = getenv("COHORT_JOB_ID")) && *v) {
        /* the user's own name for the job: cut short, two jobs could end up with one id */
        if (strlen(v) >= COHORT_JOBID_MAX)
            return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_JOB_ID='%.40s...' is %zu "
                                "characters long; at most %d are allowed (choose a shorter "
                                "job id, the same on every rank)", v, strlen(v),
                                COHORT_JOBID_MAX - 1);
        snprintf(buf, sizeof buf, "%s", v);
    } else if ((v = getenv("OMPI_MCA_ess_base_jobid")) && *v) {
        snprintf(buf, sizeof buf, "ompi-%s", v);
    } else if ((v = getenv("PMIX_NAMESPACE")) && *v) {
        snprintf(buf, sizeof buf, "pmix-%s", v);
    } else if ((v = getenv("SLURM_JOB_ID")) && *v) {
        const char *step = getenv("SLURM_STEP_ID");
        snprintf(buf, sizeof buf, "slurm-%s.%s", v, step ? step : "0");
    } else if ((v = getenv("TORCHELASTIC_RUN_ID")) && *v) {
        snprintf(buf, sizeof buf, "torch-%s", v);
    } else {
        snprintf(buf, sizeof buf, "rdv-%.200s", id->rendezvous);
    }
    snprintf(id->job_id, sizeof id->job_id, "%.63s", buf);
    return COHORT_SUCCESS;
}

/* Slurm without PMIx: the first host of the step's node list hosts the rendezvous, on a port
 * derived from the job and step ids. Only in a step srun started (SLURM_STEP_ID is set: not in a
 * batch script itself). Rank 0 must run on that host (Slurm's default block distribution puts
 * task 0 on the first node). */
static cohort_status_t slurm_rendezvous(cohort_identity_t *id)
{
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    const char *list = getenv("SLURM_STEP_NODELIST"), *which = "SLURM_STEP_NODELIST";
    if (!list || !*list) {
        list = getenv("SLURM_JOB_NODELIST");
        which = "SLURM_JOB_NODELIST";
    }
    if (!job || !*job || !step || !*step || !list || !*list)
        return cohort_error(COHORT_ERR_INVALID_ARG, "Slurm gave rank %d of %d but not the job id, "
                            "step id and node list that would say where the rendezvous is "
                            "(SLURM_JOB_ID='%s', SLURM_STEP_ID='%s', SLURM_STEP_NODELIST='%s': "
                            "started outside srun?): set COHORT_RENDEZVOUS=tcp://<rank 0's "
                            "host>:<free port> or file://<shared dir>", id->rank, id->nranks,
                            job ? job : "", step ? step : "", list ? list : "");
    long jid, sid;
    cohort_status_t st;
    if ((st = cohort_parse_long("SLURM_JOB_ID", job, 0, 0xffffffffL, &jid))) return st;
    if ((st = cohort_parse_long("SLURM_STEP_ID", step, 0, 0xffffffffL, &sid))) return st;
    char first[256];
    if ((st = cohort_slurm_first_host(list, first, sizeof first))) return st;
    int port = cohort_slurm_port((unsigned long)jid, (unsigned long)sid);
    if (id->rank == 0) {
        /* slurmd names the node (all of a machine's namespaces share one hostname); else the
         * host name, short form on both sides */
        char node[256];
        const char *nn = getenv("SLURMD_NODENAME");
        if (nn && *nn) snprintf(node, sizeof node, "%s", nn);
        else if (gethostname(node, sizeof node) != 0) node[0] = '\0';
        node[sizeof node - 1] = '\0';
        size_t a = strcspn(node, "."), b = strcspn(first, ".");
        if (a != b || strncmp(node, first, a))
            return cohort_error(COHORT_ERR_INVALID_ARG, "Slurm put rank 0 on node '%s', but "
                                "cohort hosts the rendezvous on the first node of the step "
                                "(%s='%s': '%s', port %d, derived from job %ld step %ld), so rank "
                                "0 must run there (srun's default block distribution does "
                                "that). Use the default distribution, or set "
                                "COHORT_RENDEZVOUS=tcp://%s:<free port> (rank 0's node)",
                                node, which, list, first, port, jid, sid, node);
    }
    snprintf(id->rendezvous, sizeof id->rendezvous, strchr(first, ':') ? "tcp://[%s]:%d"
             : "tcp://%s:%d", first, port);
    id->rdv_from = COHORT_RDV_FROM_SLURM;
    COHORT_INFO(SUBSYS, "rank %d: Slurm job %ld step %ld without PMIx: the rendezvous is at %s "
                "(the step's first node; the port is derived from the ids)", id->rank, jid, sid,
                id->rendezvous);
    return COHORT_SUCCESS;
}

/* A task of a Slurm step whose identity came from another launcher's variables that agree with
 * Slurm's (srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE): Slurm's way to the rendezvous applies. */
static int slurm_step_task(const cohort_identity_t *id)
{
    const char *step = getenv("SLURM_STEP_ID"), *r = getenv("SLURM_PROCID");
    const char *n = getenv("SLURM_NTASKS");
    if (!step || !*step || !r || !*r || !n || !*n) return 0;
    char *e1, *e2;
    long rank = strtol(r, &e1, 10), size = strtol(n, &e2, 10);
    return !*e1 && !*e2 && rank == id->rank && size == id->nranks;
}

static cohort_status_t identity_from_env(cohort_identity_t *id)
{
    memset(id, 0, sizeof *id);
    id->rank = id->nranks = id->local_rank = id->local_size = -1;
    const launcher_vars_t *L = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !L; i++)
        if (getenv(launchers[i].rank) && getenv(launchers[i].size)) L = &launchers[i];
    cohort_status_t st;
    if (L) {
        id->launcher = L->name;
        if ((st = env_int(L->size, 1 << 24, &id->nranks))) return st;
        if ((st = env_int(L->rank, 1 << 24, &id->rank))) return st;
        if (L->local_rank && (st = env_int(L->local_rank, 1 << 24, &id->local_rank))) return st;
        if (L->local_size && (st = env_int(L->local_size, 1 << 24, &id->local_size)))
            return st;
        if (id->nranks < 1 || id->rank >= id->nranks)
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s: rank %d is not in [0, %d) (%s=%s, "
                                "%s=%s)", L->name, id->rank, id->nranks, L->rank,
                                getenv(L->rank), L->size, getenv(L->size));
    } else if (cohort_pmix_present()) {
        /* A PMIx launcher that sets none of the variables above (prterun): ask PMIx. */
        id->launcher = "PMIx";
        if ((st = cohort_pmix_identity(&id->rank, &id->nranks, &id->local_rank,
                                       &id->local_size)))
            return st;
    } else {
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init: no rank/size in the "
                            "environment. Launch with cohortrun, mpirun, srun or torchrun, set "
                            "COHORT_RANK and COHORT_SIZE, or use cohort_comm_init_oob()");
    }
    const char *rdv = cohort_config_get("COHORT_RENDEZVOUS");
    /* Who serves the rendezvous: cohortrun says it does (COHORT_RENDEZVOUS_SERVER=launcher);
     * otherwise rank 0 hosts it, whatever else is set (a job id, a secret, COHORT_RANK). */
    const char *served = getenv("COHORT_RENDEZVOUS_SERVER");
    if (served && *served && strcasecmp(served, "launcher") && strcasecmp(served, "rank0"))
        return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_RENDEZVOUS_SERVER='%.64s' must be "
                            "'launcher' (cohortrun sets it: it serves the rendezvous) or "
                            "'rank0' (rank 0 hosts it, the default)", served);
    id->external_server = served && !strcasecmp(served, "launcher");
    /* launched by srun: Slurm's own variables, or ones that agree with them */
    int slurm_task = L && (!strcmp(L->name, "Slurm") || slurm_step_task(id));
    if (rdv && *rdv) {
        snprintf(id->rendezvous, sizeof id->rendezvous, "%s", rdv);
    } else {
        const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
        if (ma && *ma && mp && *mp) {
            long port;
            if ((st = cohort_parse_long("MASTER_PORT", mp, 1, 65534, &port))) return st;
            /* MASTER_PORT itself belongs to torch's TCPStore: use the next port. */
            snprintf(id->rendezvous, sizeof id->rendezvous, strchr(ma, ':') ? "tcp://[%s]:%ld"
                     : "tcp://%s:%ld", ma, port + 1);
        } else if (id->nranks > 1 && !id->external_server && cohort_pmix_present() &&
                   (cohort_pmix_built() || !slurm_task)) {
            /* PMIx tells the others where rank 0 hosts it (core/launcher.h) */
            if (!cohort_pmix_built())   /* (says that it is not built in) */
                return cohort_pmix_identity(&id->rank, &id->nranks, &id->local_rank,
                                            &id->local_size);
            id->rdv_from = COHORT_RDV_FROM_PMIX;
            snprintf(id->rendezvous, sizeof id->rendezvous, "pmix");
        } else if (id->nranks > 1 && !id->external_server && slurm_task) {
            if ((st = slurm_rendezvous(id))) return st;
        } else if (id->nranks > 1) {
            return cohort_error(COHORT_ERR_INVALID_ARG, "%s gave rank %d of %d but no "
                                "rendezvous: set COHORT_RENDEZVOUS=tcp://<rank 0's host>:<free "
                                "port> (e.g. mpirun -x COHORT_RENDEZVOUS=...), or MASTER_ADDR and "
                                "MASTER_PORT, or file://<shared dir>", id->launcher, id->rank,
                                id->nranks);
        }
    }
    if (strncmp(id->rendezvous, "tcp://", 6) && strncmp(id->rendezvous, "file://", 7) &&
        id->rdv_from != COHORT_RDV_FROM_PMIX && id->nranks > 1)
        return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_RENDEZVOUS='%s' must be "
                            "tcp://host:port or file://<directory>", id->rendezvous);
    if (id->external_server && id->nranks > 1 && strncmp(id->rendezvous, "tcp://", 6))
        return cohort_error(COHORT_ERR_INVALID_ARG, "COHORT_RENDEZVOUS_SERVER=launcher says the "
                            "launcher serves the rendezvous, but COHORT_RENDEZVOUS='%s' is not "
                            "its tcp://host:port (unset COHORT_RENDEZVOUS_SERVER when rank 0 "
                            "should host it)", id->rendezvous);
    if ((st = derive_job_id(id))) return st;
    const char *secret = cohort_config_get("COHORT_SECRET");
    if (secret && *secret) {
        size_t sl = strlen(secret);
        if (sl > COHORT_SECRET_MAX) {
            /* Long secrets are hashed down to 32 bytes. */
            cohort_sha256(secret, sl, id->secret);
            id->secretlen = 32;
        } else {
            memcpy(id->secret, secret, sl);
            id->secretlen = sl;
        }
    } else {
        char seed[128];
        snprintf(seed, sizeof seed, "cohort-derived-secret:%s", id->job_id);
        cohort_sha256(seed, strlen(seed), id->secret);
        id->secretlen = 32;
        if (id->rank == 0)
            cohort_log(COHORT_LOG_INFO, SUBSYS, "COHORT_SECRET is not set: connections are "
                       "keyed by a secret derived from the job id '%s', which keeps strays out "
                       "but not a determined attacker on your network (cohortrun sets a random "
                       "one)", id->job_id);
    }
    return COHORT_SUCCESS;
}

cohort_status_t cohort_identity_from_env(cohort_identity_t *id)
{
    cohort_status_t st = identity_from_env(id);
    /* PMIx stays initialized only for the exchange cohort_bootstrap_rdv makes */
    if (st || id->rdv_from != COHORT_RDV_FROM_PMIX) cohort_pmix_finalize();
    return st;
}

/* ---- over the rendezvous ---------------------------------------------------------------- */

typedef struct rdv_boot {
    cohort_bootstrap_t base;
    cohort_rdv_client_t *cl;
    double timeout_s;
    char published[560];   /* rank 0 with file://: the address file, until every rank joined */
} rdv_boot_t;

/* The address file is only for finding rank 0: once every rank has joined (the first round is
 * complete) or the bootstrap ends, rank 0 removes it, so that no later job with the same id
 * reads a dead address from it. */
static void unpublish(char *path)
{
    if (path[0] && unlink(path) != 0 && errno != ENOENT)
        COHORT_INFO(SUBSYS, "cannot remove the rendezvous address file %s: %s", path,
                    strerror(errno));
    path[0] = '\0';
}

static cohort_status_t rdv_allgather(cohort_bootstrap_t *b, const void *s, void *r, size_t n)
{
    rdv_boot_t *rb = (rdv_boot_t *)b;
    cohort_status_t st = cohort_rdv_allgather(rb->cl, s, r, n, rb->timeout_s);
    if (!st) unpublish(rb->published);
    return st;
}

static void rdv_fail(cohort_bootstrap_t *b, const char *msg)
{
    cohort_rdv_fail(((rdv_boot_t *)b)->cl, msg);
}

static cohort_status_t rdv_check(cohort_bootstrap_t *b)
{
    return cohort_rdv_check(((rdv_boot_t *)b)->cl);
}

static void rdv_close(cohort_bootstrap_t *b)
{
    rdv_boot_t *rb = (rdv_boot_t *)b;
    unpublish(rb->published);
    cohort_rdv_close(rb->cl);
    free(b);
}

cohort_rdv_client_t *cohort_bootstrap_take_rdv(cohort_bootstrap_t *b)
{
    if (!b || b->close != rdv_close) return NULL;
    rdv_boot_t *rb = (rdv_boot_t *)b;
    cohort_rdv_client_t *cl = rb->cl;
    rb->cl = NULL;   /* cohort_rdv_close(NULL) does nothing */
    return cl;
}

/* file://dir: the file where rank 0 publishes its server's tcp:// address. */
static void rdv_file_path(const cohort_identity_t *id, char *path, size_t len)
{
    char safe[COHORT_JOBID_MAX];
    snprintf(safe, sizeof safe, "%s", id->job_id);
    for (char *p = safe; *p; p++)
        if (*p == '/' || *p == ':') *p = '_';
    snprintf(path, len, "%s/cohort-%s.rdv", id->rendezvous + 7, safe);
}

/* Rank 0: writes url (its server's address) to path, atomically. */
static cohort_status_t publish(const char *path, const char *url)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", url) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        if (f) unlink(tmp);
        return cohort_error(COHORT_ERR_SYSTEM, "rank 0 cannot publish the rendezvous address in "
                            "%s: %s (COHORT_RENDEZVOUS=file://<dir> needs a directory writable "
                            "by rank 0 and shared by all ranks)", path, strerror(e));
    }
    return COHORT_SUCCESS;
}

/* The other ranks: read the address rank 0 published, waiting for the file until deadline. */
static cohort_status_t read_published(const cohort_identity_t *id, const char *path, char *url,
                                      size_t len, uint64_t deadline, double timeout_s)
{
    for (unsigned ms = 10;; ms = ms < 500 ? ms * 2 : ms) {
        FILE *f = fopen(path, "r");
        if (f) {
            char *ok = fgets(url, (int)len, f);
            fclose(f);
            if (ok) {
                url[strcspn(url, "\n")] = '\0';
                return COHORT_SUCCESS;
            }
        }
        if (cohort_now_ns() > deadline)
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d waited %.0f s for rank 0 to "
                                "publish the rendezvous address in %s; is rank 0 running and "
                                "is the directory shared?", id->rank, timeout_s, path);
        struct timespec ts = { 0, (long)ms * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* The other ranks with file://: the address in the file, then connect. A file left by an
 * earlier job with the same id (its rank 0 killed before it could remove it) names a dead
 * address: when that cannot be reached, the file is read again, since this job's rank 0
 * replaces it. */
static cohort_status_t connect_published(const cohort_identity_t *id, double timeout_s,
                                         cohort_rdv_client_t **cl)
{
    char path[512], url[320];
    rdv_file_path(id, path, sizeof path);
    uint64_t deadline = cohort_now_ns() + (uint64_t)(timeout_s * 1e9);
    for (;;) {
        cohort_status_t st = read_published(id, path, url, sizeof url, deadline, timeout_s);
        if (st) return st;
        uint64_t now = cohort_now_ns();
        double left = now < deadline ? (double)(deadline - now) * 1e-9 : 0;
        st = cohort_rdv_connect(url, id->job_id, id->secret, id->secretlen, id->rank,
                                id->nranks, left < 2 ? left : 2, cl);
        if (st != COHORT_ERR_TIMEOUT) return st;
        if (cohort_now_ns() >= deadline) {
            char why[1024];
            snprintf(why, sizeof why, "%s", cohort_last_error());
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d could not reach the rendezvous "
                                "address %s, which rank 0 published in %s, within %.0f s: %s",
                                id->rank, url, path, timeout_s, why);
        }
        COHORT_INFO(SUBSYS, "rank %d cannot reach %s (read from %s) yet; reading the file "
                    "again", id->rank, url, path);
    }
}

/* Rank 0 under PMIx that cannot host the rendezvous: it still takes part in the exchange, with
 * its error, so that the other ranks fail at once with it instead of waiting out COHORT_TIMEOUT.
 * The error stays rank 0's own. */
static void pmix_tell_failure(const cohort_identity_t *id, cohort_status_t st, double timeout_s)
{
    char why[1024], unused[8];
    snprintf(why, sizeof why, "%s", cohort_last_error());
    if (cohort_pmix_exchange(id->rank, NULL, why, unused, sizeof unused, timeout_s))
        cohort_error(st, "%s", why);
    cohort_pmix_finalize();
}

static cohort_status_t bootstrap_rdv(const cohort_identity_t *id, double timeout_s,
                                     cohort_bootstrap_t **out, cohort_rdv_server_t **server)
{
    *out = NULL;
    *server = NULL;
    /* One job per process (core/jobctl.h): a second cohort_comm_init while the first world
     * lives would only be refused by the rendezvous, or collide with rank 0's own server. */
    int joined_as;
    if (cohort_jobctl_joined(&joined_as))
        return cohort_error(COHORT_ERR_INVALID_ARG, "cohort_comm_init: this process already "
                            "joined its job as rank %d (job '%s'), and that world "
                            "communicator is still alive. A process joins a job once: make "
                            "more communicators with cohort_comm_split, or pass the one you "
                            "have", joined_as, id->job_id);
    char url[320];
    snprintf(url, sizeof url, "%s", id->rendezvous);
    int is_file = !strncmp(url, "file://", 7);
    cohort_status_t st = COHORT_SUCCESS;
    rdv_boot_t *rb = calloc(1, sizeof *rb);
    if (!rb) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the bootstrap");
    int via_pmix = id->rdv_from == COHORT_RDV_FROM_PMIX;
    if (id->rank == 0 && !id->external_server) {
        int port = 0;
        char host[256];
        if (!is_file && !via_pmix &&
            (st = cohort_rdv_parse_url(url, host, sizeof host, &port))) {
            free(rb);
            return st;
        }
        st = cohort_rdv_server_create(NULL, port, id->nranks, id->job_id, id->secret,
                                      id->secretlen, server);
        if (!st) st = cohort_rdv_server_start_thread(*server);
        if (st) {
            cohort_rdv_server_destroy(*server);
            *server = NULL;
            free(rb);
            if (id->rdv_from == COHORT_RDV_FROM_SLURM) {
                char why[1024];
                snprintf(why, sizeof why, "%s", cohort_last_error());
                return cohort_error(st, "rank 0 cannot host the rendezvous on port %d, which "
                                    "cohort derives from the Slurm job and step ids (%s): %s. "
                                    "Set COHORT_RENDEZVOUS=tcp://<rank 0's node>:<free port>, "
                                    "or run under srun --mpi=pmix", port, id->rendezvous, why);
            }
            cohort_error_prefix("rank 0 hosting the rendezvous for %s", id->launcher);
            if (via_pmix) pmix_tell_failure(id, st, timeout_s);
            return st;
        }
        if (is_file || via_pmix) {
            /* the address the other ranks reach this host at: the first interface
             * COHORT_SOCKET_IFNAME allows (file:// falls back to loopback, for one host) */
            const cohort_netif_t *ifs;
            int n;
            st = cohort_netifs(&ifs, &n);
            if (!st && n < 1 && via_pmix)
                st = cohort_error(COHORT_ERR_SYSTEM, "rank 0 has no network interface with "
                                  "an address for the other ranks to reach its rendezvous at");
            char addr[INET6_ADDRSTRLEN] = "127.0.0.1";
            if (!st && n > 0) inet_ntop(ifs[0].family, ifs[0].addr, addr, sizeof addr);
            snprintf(url, sizeof url, !st && n > 0 && ifs[0].family == AF_INET6
                     ? "tcp://[%s]:%d" : "tcp://%s:%d", addr, cohort_rdv_server_port(*server));
            if (via_pmix) {
                if (st) {
                    pmix_tell_failure(id, st, timeout_s);
                } else {
                    char unused[8];
                    st = cohort_pmix_exchange(0, url, NULL, unused, sizeof unused, timeout_s);
                    cohort_pmix_finalize();
                    if (!st)
                        COHORT_INFO(SUBSYS, "rank 0 hosts the rendezvous at %s and told the "
                                    "other ranks through PMIx", url);
                }
            } else {
                char path[512];
                rdv_file_path(id, path, sizeof path);
                if (!st) st = publish(path, url);
                if (!st) snprintf(rb->published, sizeof rb->published, "%s", path);
            }
        }
        /* Rank 0 reaches its own server over loopback. */
        if (!st) snprintf(url, sizeof url, "tcp://127.0.0.1:%d", cohort_rdv_server_port(*server));
        if (!st) st = cohort_rdv_connect(url, id->job_id, id->secret, id->secretlen, id->rank,
                                         id->nranks, timeout_s, &rb->cl);
    } else if (is_file) {
        st = connect_published(id, timeout_s, &rb->cl);
    } else if (via_pmix) {
        st = cohort_pmix_exchange(id->rank, NULL, NULL, url, sizeof url, timeout_s);
        cohort_pmix_finalize();
        if (!st) st = cohort_rdv_connect(url, id->job_id, id->secret, id->secretlen, id->rank,
                                         id->nranks, timeout_s, &rb->cl);
    } else {
        st = cohort_rdv_connect(url, id->job_id, id->secret, id->secretlen, id->rank,
                                id->nranks, timeout_s, &rb->cl);
    }
    if (st) {
        unpublish(rb->published);
        free(rb);
        if (*server) {
            cohort_rdv_server_destroy(*server);
            *server = NULL;
        }
        return st;
    }
    rb->base.rank = id->rank;
    rb->base.world_rank = id->rank;
    rb->base.nranks = id->nranks;
    rb->base.allgather = rdv_allgather;
    rb->base.fail = rdv_fail;
    rb->base.check = rdv_check;
    rb->base.close = rdv_close;
    rb->timeout_s = timeout_s;
    *out = &rb->base;
    return COHORT_SUCCESS;
}

cohort_status_t cohort_bootstrap_rdv(const cohort_identity_t *id, double timeout_s,
                                     cohort_bootstrap_t **out, cohort_rdv_server_t **server)
{
    cohort_status_t st = bootstrap_rdv(id, timeout_s, out, server);
    cohort_pmix_finalize();   /* PMIx served the exchange only (nothing if it did not) */
    return st;
}

/* ---- over the caller's OOB allgather ---------------------------------------------------- */

typedef struct oob_boot {
    cohort_bootstrap_t base;
    cohort_oob_allgather_fn fn;
    void *ctx;
} oob_boot_t;

static cohort_status_t oob_allgather(cohort_bootstrap_t *b, const void *s, void *r, size_t n)
{
    oob_boot_t *ob = (oob_boot_t *)b;
    int rc = ob->fn(s, r, n, ob->ctx);
    if (rc != 0)
        return cohort_error(COHORT_ERR_TRANSPORT, "the caller's OOB allgather returned %d on "
                            "rank %d (exchanging %zu bytes per rank)", rc, b->rank, n);
    return COHORT_SUCCESS;
}

static void oob_close(cohort_bootstrap_t *b) { free(b); }

cohort_status_t cohort_bootstrap_oob(int rank, int nranks, cohort_oob_allgather_fn fn, void *ctx,
                                     cohort_bootstrap_t **out)
{
    oob_boot_t *ob = calloc(1, sizeof *ob);
    if (!ob) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the bootstrap");
    ob->base.rank = rank;
    ob->base.world_rank = -1;
    ob->base.nranks = nranks;
    ob->base.allgather = oob_allgather;
    ob->base.close = oob_close;
    ob->fn = fn;
    ob->ctx = ctx;
    *out = &ob->base;
    return COHORT_SUCCESS;
}

/* ---- over a parent communicator --------------------------------------------------------- */

typedef struct comm_boot {
    cohort_bootstrap_t base;
    cohort_comm_t *parent;
} comm_boot_t;

static cohort_status_t comm_allgather(cohort_bootstrap_t *b, const void *s, void *r, size_t n)
{
    return cohort_comm_allgather_held(((comm_boot_t *)b)->parent, s, r, n, COHORT_UINT8);
}

/* While the new communicator connects: an abort of the parent (or a failure of the job) ends
 * the wait at once. */
static cohort_status_t comm_check(cohort_bootstrap_t *b)
{
    cohort_comm_t *parent = ((comm_boot_t *)b)->parent;
    if (atomic_load(&parent->aborted))
        return cohort_error(COHORT_ERR_ABORTED, "rank %d: the parent communicator was aborted",
                            parent->rank);
    return cohort_jobctl_check(parent);
}

cohort_status_t cohort_bootstrap_comm(cohort_comm_t *parent, cohort_bootstrap_t **out)
{
    comm_boot_t *cb = calloc(1, sizeof *cb);
    if (!cb) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the bootstrap");
    cb->base.rank = parent->rank;
    cb->base.world_rank = parent->world_of ? parent->world_of[parent->rank] : -1;
    cb->base.nranks = parent->nranks;
    cb->base.allgather = comm_allgather;
    cb->base.check = comm_check;
    cb->base.close = oob_close;
    cb->parent = parent;
    *out = &cb->base;
    return COHORT_SUCCESS;
}
