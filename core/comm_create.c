/* SPDX-License-Identifier: BSD-3-Clause */
/* Building a communicator: what each rank tells the others (its card: versions, settings that
 * must agree, place, endpoint addresses), the plugins' endpoints, the transport chosen for each
 * pair, the connections, the node groups of the hierarchy; as allgather rounds over a bootstrap
 * (comm_create). core/comm.c holds the public entry points that call it. */
#include "core/comm_create.h"
#include "core/coll/coll.h"
#include "core/config.h"
#include "core/jobctl.h"
#include "core/jobtopo.h"
#include "core/netif.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/timeline.h"
#include "core/timeutil.h"
#include "topology/node.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUBSYS "init"
#define CARD_MAGIC 0x44524143u   /* "CARD" */
#define CARD_VERSION 4u
#define CARD_PLUGINS 8

typedef struct card_plugin {
    char name[32];
    char version[32];
    uint32_t abi;
    uint32_t addrlen;
    unsigned char addr[COHORT_ADDR_MAX];
} card_plugin_t;

/* What each rank tells every other at creation. Fixed size: every bootstrap allgathers it. */
typedef struct card {
    uint32_t magic, version;
    int32_t status;              /* 0, or the error this rank hit before the exchange */
    int32_t member;              /* 0: this rank takes part in the exchange only (split color < 0) */
    uint64_t comm_id;
    int64_t key;                 /* ordering key (split), ties by bootstrap rank */
    int32_t pid;
    uint32_t nplugins;
    char core_version[16];
    /* settings every rank must share, or the algorithms' messages stop matching */
    uint64_t chunk;
    int32_t hier_mode;            /* COHORT_HIERARCHICAL: the splits it makes are collective */
    char algo[128];
    char hostid[COHORT_HOSTID_MAX];
    char hostname[64];
    int32_t package, numa, core;  /* place (core/jobtopo.h), -1 unknown */
    char cpus[64];
    char nic[32];                 /* first interface a network transport would use */
    char bootid[40];              /* the machine whose CPUs this rank runs on... */
    uint64_t cpumask[16];         /* ...and its affinity there (CPUs 0-1023) */
    char netifs[224];             /* the interfaces allowed here, for messages */
    int32_t world_rank;           /* rank in the job of cohort_comm_init (jobctl.h), or -1 */
    /* keyed by the job secret over the job id (key_tag): ranks whose tags differ cannot pass any
     * transport's handshake, and the check names that instead of "nothing answered" */
    unsigned char key_tag[16];
    char errmsg[256];
    card_plugin_t plugins[CARD_PLUGINS];
} card_t;

/* The job id handed to transports for their handshakes (set by cohort_comm_init). */
static char g_job_id[COHORT_JOBID_MAX] = "oob";

void cohort_comm_set_job_id(const char *job_id)
{
    snprintf(g_job_id, sizeof g_job_id, "%s", job_id);
}

typedef struct status_msg {
    int32_t status;
    char msg[252];
    char coll_plugin[32];    /* the plugin this rank would run collectives on ("" none)... */
    uint32_t coll_mask;      /* ...and which (used only when every rank says the same) */
} status_msg_t;


/* ---- creation --------------------------------------------------------------------------- */

/* Written by cohort_comm_abort, which may run in a signal handler: formatted beforehand. */
static void set_abort_line(cohort_comm_t *c)
{
    c->abort_line[0] = '\0';
    if (cohort_log_enabled(COHORT_LOG_WARN, SUBSYS))
        snprintf(c->abort_line, sizeof c->abort_line, "cohort: rank %d: communicator %016llx "
                 "(%d ranks) aborted by cohort_comm_abort\n", c->rank,
                 (unsigned long long)c->comm_id, c->nranks);
}

/* timeout_s > 0: this communicator's timeout instead of COHORT_TIMEOUT (given at creation, or
 * inherited by a split). */
static cohort_status_t read_settings(cohort_comm_t *c, double timeout_s)
{
    c->coll_plugin = -1;
    c->ring_pos = -1;
    c->timeout_s = 300;
    long chunk = 262144, spin = 200, spin_us = 500;
    /* every setting, including those only transports read: a bad one fails here */
    cohort_status_t st = cohort_config_check();
    if (!st) st = cohort_config_table_double("COHORT_TIMEOUT", &c->timeout_s);
    if (timeout_s > 0) {
        c->timeout_s = timeout_s;
        c->timeout_given = 1;
    }
    if (!st) st = cohort_config_table_long("COHORT_CHUNK_SIZE", &chunk);
    if (!st) st = cohort_config_table_long("COHORT_SPIN", &spin);
    if (!st) st = cohort_config_table_long("COHORT_SPIN_US", &spin_us);
    c->stall_warn_s = 60;
    if (!st) st = cohort_config_table_double("COHORT_STALL_WARN", &c->stall_warn_s);
    c->fail_peer = -1;
    c->spin_ns = (uint64_t)spin_us * 1000u;
    c->chunk = (size_t)chunk;
    c->spin = (unsigned)spin;
    const char *algo = cohort_config_get("COHORT_ALGO");
    if (!st && algo && *algo) st = cohort_algo_spec_parse("COHORT_ALGO", algo, &c->algo_spec);
    if (!st) st = cohort_job_hier_mode(&c->hier_mode);
    const char *z = cohort_config_get("COHORT_COMPRESS");
    c->compress = !z || !strcasecmp(z, "none") ? 0
                  : !strcasecmp(z, "bf16") ? COHORT_BFLOAT16 : COHORT_FLOAT16;
    return st;
}

/* What tells two ranks they hold the same secret and job id, without telling the secret: the
 * first bytes of its MAC over a label and the job id. Only a diagnosis: the transports'
 * handshakes are what keep a rank of another job out. */
static void key_tag(unsigned char out[16])
{
    unsigned char in[sizeof "cohort-card-key" + COHORT_JOBID_MAX] = "cohort-card-key";
    memcpy(in + sizeof "cohort-card-key", g_job_id, strnlen(g_job_id, COHORT_JOBID_MAX));
    unsigned char mac[32];
    cohort_plugin_auth(in, sizeof in, mac);
    memcpy(out, mac, 16);
}

/* detail: the place and interfaces too (not for a rank whose settings are bad: they would
 * consult them again, log the same error again and overwrite its message). */
static void fill_card(card_t *card, cohort_comm_t *c, int member, int64_t key, int detail)
{
    memset(card, 0, sizeof *card);
    card->magic = CARD_MAGIC;
    card->version = CARD_VERSION;
    card->member = member;
    card->comm_id = c->comm_id;
    card->key = key;
    card->pid = (int32_t)getpid();
    key_tag(card->key_tag);
    snprintf(card->core_version, sizeof card->core_version, "%s", COHORT_VERSION_STRING);
    card->chunk = c->chunk;
    card->hier_mode = c->hier_mode;
    const char *algo = cohort_config_get("COHORT_ALGO");
    snprintf(card->algo, sizeof card->algo, "%s", algo ? algo : "");
    cohort_node_id(card->hostid, sizeof card->hostid);
    cohort_node_hostname(card->hostname, sizeof card->hostname);
    const char *hid = cohort_config_get("COHORT_HOSTID");
    if (hid && *hid && strcmp(hid, card->hostname)) {   /* name the node as the user did */
        size_t hl = strlen(card->hostname);
        if (hl < sizeof card->hostname - 2)
            snprintf(card->hostname + hl, sizeof card->hostname - hl, ":%s", hid);
    }
    if (!member || !detail) return;
    cohort_node_boot_id(card->bootid, sizeof card->bootid);
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        for (int i = 0; i < CPU_SETSIZE && i < 1024; i++)
            if (CPU_ISSET(i, &cpus)) card->cpumask[i / 64] |= 1ull << (i % 64);
    cohort_place_t p;
    cohort_job_place(&p);
    card->package = p.package;
    card->numa = p.numa;
    card->core = p.core;
    snprintf(card->cpus, sizeof card->cpus, "%s", p.cpus);
    const cohort_netif_t *ifs = NULL;
    int nifs = 0;
    if (cohort_netifs(&ifs, &nifs) == COHORT_SUCCESS) {
        size_t used = 0;
        for (int i = 0; i < nifs && used < sizeof card->netifs - 1; i++) {
            char one[96];
            cohort_netif_format(&ifs[i], one, sizeof one);
            used += (size_t)snprintf(card->netifs + used, sizeof card->netifs - used, "%s%s",
                                     i ? ", " : "", one);
        }
        if (nifs > 0) snprintf(card->nic, sizeof card->nic, "%.31s", ifs[0].name);
    } else {
        snprintf(card->netifs, sizeof card->netifs, "(%s)", cohort_last_error());
        cohort_error_clear();
    }
    if (!card->netifs[0]) snprintf(card->netifs, sizeof card->netifs, "none");
}

/* Opens an endpoint on every loaded plugin and records the addresses in the card. */
static cohort_status_t open_endpoints(cohort_comm_t *c, card_t *card)
{
    cohort_status_t st = cohort_plugins_get(&c->plugins, &c->nplugins);
    if (st) return st;
    c->eps = calloc((size_t)c->nplugins, sizeof *c->eps);
    if (!c->eps) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for endpoints");
    cohort_ep_info_t info = { sizeof info, c->rank, c->nranks, c->comm_id, NULL };
    info.job_id = g_job_id;
    cohort_status_t first_st = COHORT_SUCCESS;
    char first_why[768] = "";
    for (int i = 0; i < c->nplugins && card->nplugins < CARD_PLUGINS; i++) {
        const cohort_plugin_t *p = c->plugins[i];
        card_plugin_t *cp = &card->plugins[card->nplugins];
        size_t len = sizeof cp->addr;
        cohort_error_clear();
        st = p->ops->ep_open(p->ctx, &info, &c->eps[i], cp->addr, &len);
        if (st == COHORT_ERR_INVALID_ARG) {
            /* A setting the user gave is wrong (e.g. COHORT_SOCKET_IFNAME matching nothing):
             * fail, even if another transport could carry this job, rather than run on
             * without the configuration the user asked for. */
            char why[768];
            snprintf(why, sizeof why, "%s", cohort_last_error());
            return cohort_error(st, "rank %d: transport %s rejects its settings: %s", c->rank,
                                p->name, why);
        }
        if (st) {
            const char *why = cohort_last_error()[0] ? cohort_last_error() : "no reason given";
            cohort_log(COHORT_LOG_WARN, SUBSYS, "transport %s cannot open an endpoint, not "
                       "using it: %s", p->name, why);
            if (!first_st) {
                first_st = st;
                snprintf(first_why, sizeof first_why, "%s: %s", p->name, why);
            }
            c->eps[i] = NULL;
            continue;
        }
        snprintf(cp->name, sizeof cp->name, "%s", p->name);
        snprintf(cp->version, sizeof cp->version, "%s", p->ops->version ? p->ops->version : "");
        cp->abi = p->ops->abi_version;
        cp->addrlen = (uint32_t)(len <= sizeof cp->addr ? len : sizeof cp->addr);
        card->nplugins++;
    }
    if (card->nplugins == 0)
        return cohort_error(first_st ? first_st : COHORT_ERR_TRANSPORT, "rank %d: no transport "
                            "could open an endpoint (%s)", c->rank,
                            first_why[0] ? first_why : "no transport loaded");
    return COHORT_SUCCESS;
}

static int card_plugin_index(const card_t *card, const char *name)
{
    for (uint32_t i = 0; i < card->nplugins && i < CARD_PLUGINS; i++)
        if (!strncmp(card->plugins[i].name, name, sizeof card->plugins[i].name)) return (int)i;
    return -1;
}

static int local_plugin_index(const cohort_comm_t *c, const char *name)
{
    for (int i = 0; i < c->nplugins; i++)
        if (c->eps[i] && !strcmp(c->plugins[i]->name, name)) return i;
    return -1;
}

/* Every member must run the same core and the same version of every plugin they share. */
static cohort_status_t check_versions(const cohort_comm_t *c, const card_t *cards,
                                      const int *members)
{
    const card_t *c0 = &cards[members[0]];
    for (int r = 1; r < c->nranks; r++) {
        const card_t *cr = &cards[members[r]];
        if (memcmp(cr->key_tag, c0->key_tag, sizeof c0->key_tag))
            return cohort_error(COHORT_ERR_MISMATCH, "rank 0 (%s, pid %d) and rank %d (%s, pid "
                                "%d) do not hold the same COHORT_SECRET and job id, so no "
                                "transport would let them connect: a launcher (cohortrun, "
                                "mpirun, srun) gives every rank of a job the same; a program "
                                "that calls cohort_comm_init_oob exports one COHORT_SECRET to "
                                "all its ranks (or none to any)", c0->hostname, (int)c0->pid, r,
                                cr->hostname, (int)cr->pid);
        if (strncmp(cr->core_version, c0->core_version, sizeof c0->core_version))
            return cohort_error(COHORT_ERR_MISMATCH, "ranks run different cohort versions: "
                                "rank 0 (%s) has %.16s, rank %d (%s) has %.16s; install the same "
                                "cohort on every node", c0->hostname, c0->core_version, r,
                                cr->hostname, cr->core_version);
        if (cr->chunk != c0->chunk)
            return cohort_error(COHORT_ERR_MISMATCH, "COHORT_CHUNK_SIZE differs between ranks: "
                                "rank 0 (%s) uses %llu, rank %d (%s) uses %llu; set the same "
                                "value on every rank", c0->hostname,
                                (unsigned long long)c0->chunk, r, cr->hostname,
                                (unsigned long long)cr->chunk);
        if (cr->hier_mode != c0->hier_mode) {
            static const char *const hm[] = { "0", "1", "auto" };
            return cohort_error(COHORT_ERR_MISMATCH, "COHORT_HIERARCHICAL differs between ranks: "
                                "rank 0 (%s) has %s, rank %d (%s) has %s; set the same value on "
                                "every rank", c0->hostname, hm[c0->hier_mode % 3], r,
                                cr->hostname, hm[cr->hier_mode % 3]);
        }
        if (strncmp(cr->algo, c0->algo, sizeof c0->algo))
            return cohort_error(COHORT_ERR_MISMATCH, "COHORT_ALGO differs between ranks: rank 0 "
                                "(%s) has '%.128s', rank %d (%s) has '%.128s'; set the same value "
                                "on every rank", c0->hostname, c0->algo, r, cr->hostname,
                                cr->algo);
    }
    for (int a = 0; a < c->nranks; a++)
        for (int b = a + 1; b < c->nranks; b++) {
            const card_t *ca = &cards[members[a]], *cb = &cards[members[b]];
            for (uint32_t i = 0; i < ca->nplugins && i < CARD_PLUGINS; i++) {
                int j = card_plugin_index(cb, ca->plugins[i].name);
                if (j < 0) continue;
                const card_plugin_t *pa = &ca->plugins[i], *pb = &cb->plugins[j];
                if (pa->abi != pb->abi || strncmp(pa->version, pb->version, sizeof pa->version))
                    return cohort_error(COHORT_ERR_MISMATCH, "transport '%.32s' differs between "
                                        "ranks: rank %d (%s) has version %.32s (ABI %u.%u), rank "
                                        "%d (%s) has version %.32s (ABI %u.%u); install the same "
                                        "plugin on every node", pa->name, a, ca->hostname,
                                        pa->version, pa->abi >> 16, pa->abi & 0xffff, b,
                                        cb->hostname, pb->version, pb->abi >> 16, pb->abi & 0xffff);
            }
        }
    return COHORT_SUCCESS;
}

/* The transport for pair (a, b): the first in the lower rank's preference order that both
 * loaded and both can reach the other with. -1 if none. Returns the lower rank's card index. */
static int choose(const card_t *cards, const unsigned char *rows, int nboot, int ba, int bb)
{
    int lo = ba < bb ? ba : bb, hi = ba < bb ? bb : ba;
    const card_t *cl = &cards[lo], *ch = &cards[hi];
    for (uint32_t i = 0; i < cl->nplugins && i < CARD_PLUGINS; i++) {
        int j = card_plugin_index(ch, cl->plugins[i].name);
        if (j < 0) continue;
        if ((rows[(size_t)lo * nboot + hi] >> i & 1) && (rows[(size_t)hi * nboot + lo] >> j & 1))
            return (int)i;
    }
    return -1;
}

static void describe_plugins(const card_t *card, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < card->nplugins && i < CARD_PLUGINS && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%.32s", i ? "," : "",
                                 card->plugins[i].name);
    if (!card->nplugins) snprintf(buf, len, "none");
}

/* Waits until every connection is up. Polls the bootstrap (when it can say so) for a rank that
 * failed meanwhile, so that one rank's failure ends everybody's wait at once. */
static cohort_status_t connect_all(cohort_comm_t *c, cohort_bootstrap_t *boot)
{
    cohort_status_t st = COHORT_SUCCESS;
    uint64_t deadline = cohort_now_ns() + (uint64_t)(c->timeout_s * 1e9), next_check = 0;
    int pending;
    unsigned spins = 0;
    do {
        pending = 0;
        for (int i = 0; i < c->nplugins; i++)
            if (c->eps[i] && (st = c->plugins[i]->ops->progress(c->eps[i]))) return st;
        for (int p = 0; p < c->nranks; p++) {
            cohort_peer_t *peer = &c->peers[p];
            if (p == c->rank || peer->plugin < 0) continue;
            st = c->plugins[peer->plugin]->ops->conn_test(peer->conn);
            if (st == COHORT_IN_PROGRESS) pending++;
            else if (st) {
                cohort_error_prefix("rank %d connecting to rank %d (%s) over %s", c->rank, p,
                                    peer->host, c->plugins[peer->plugin]->name);
                return st;
            }
        }
        if (!pending) break;
        if (atomic_load(&c->aborted))
            return cohort_error(COHORT_ERR_ABORTED, "rank %d: communicator aborted while "
                                "connecting", c->rank);
        if (boot->check && cohort_now_ns() >= next_check) {
            next_check = cohort_now_ns() + 20000000ull;
            if ((st = boot->check(boot))) {
                cohort_error_prefix("rank %d stopped connecting", c->rank);
                return st;
            }
        }
        if (cohort_now_ns() > deadline) {
            char who[512] = "";
            size_t used = 0;
            for (int p = 0; p < c->nranks && used < sizeof who - 40; p++) {
                cohort_peer_t *peer = &c->peers[p];
                if (p == c->rank || peer->plugin < 0) continue;
                if (c->plugins[peer->plugin]->ops->conn_test(peer->conn) == COHORT_IN_PROGRESS)
                    used += (size_t)snprintf(who + used, sizeof who - used, " %d(%s)", p,
                                             peer->host);
            }
            return cohort_error(COHORT_ERR_TIMEOUT, "rank %d could not connect within %g s "
                                "to ranks:%s. A firewall, or an interface the peers cannot "
                                "reach? Set COHORT_SOCKET_IFNAME; %s sets the wait",
                                c->rank, c->timeout_s, who, cohort_comm_timeout_source(c));
        }
        if (++spins > 16) {
            cohort_p2p_idle(c, 5);
        }
    } while (pending);
    return COHORT_SUCCESS;
}

/* Endpoints no peer uses would only cost progress() calls (and keep a listening socket or a
 * segment), and one without an event fd would stop the waits from sleeping: close them. */
static void close_unused_endpoints(cohort_comm_t *c)
{
    for (int i = 0; i < c->nplugins; i++) {
        if (!c->eps[i]) continue;
        int users = 0;
        for (int p = 0; p < c->nranks; p++) users += c->peers[p].plugin == i;
        if (users) continue;
        c->plugins[i]->ops->ep_close(c->eps[i]);
        c->eps[i] = NULL;
    }
}

/* After a local failure to connect: close every connection and endpoint now, before the last
 * exchange round, so that peers still waiting to connect to us see the close (shm marks the
 * slots it never allocated, tcp refuses) and fail at once instead of after COHORT_TIMEOUT. */
static void abandon_endpoints(cohort_comm_t *c)
{
    for (int p = 0; c->peers && p < c->nranks; p++) {
        cohort_peer_t *peer = &c->peers[p];
        if (peer->conn && peer->plugin >= 0) c->plugins[peer->plugin]->ops->conn_close(peer->conn);
        peer->conn = NULL;
    }
    for (int i = 0; i < c->nplugins; i++) {
        if (!c->eps[i]) continue;
        c->plugins[i]->ops->ep_close(c->eps[i]);
        c->eps[i] = NULL;
    }
}

/* The plugin that could run collectives itself for this rank: every peer is connected through
 * it and it has an ABI >= 1.1 collective table offering some. The ranks then compare (round 4). */
static void coll_candidate(cohort_comm_t *c, status_msg_t *sm)
{
    if (c->nranks < 2) return;
    int p = c->peers[c->rank == 0 ? 1 : 0].plugin;
    for (int r = 0; r < c->nranks; r++)
        if (r != c->rank && c->peers[r].plugin != p) return;
    if (p < 0 || !c->eps[p]) return;
    const cohort_transport_v1_t *ops = c->plugins[p]->ops;
    if ((ops->abi_version & 0xffffu) < 1 || !ops->coll) return;
    const cohort_transport_coll_v1_t *ct = ops->coll;
    if (!COHORT_HAS_FIELD(ct, cohort_transport_coll_v1_t, cancel) || !ct->colls || !ct->start ||
        !ct->test || !ct->cancel)
        return;
    unsigned mask = ct->colls(c->eps[p]) & ((1u << (COHORT_TP_BARRIER + 1)) - 1u);
    if (!mask) return;
    snprintf(sm->coll_plugin, sizeof sm->coll_plugin, "%s", c->plugins[p]->name);
    sm->coll_mask = mask;
}

/* Node index of every rank (nodes numbered in the order of their lowest rank), its rank within
 * its node (and so node_count, local_rank, local_size), and the ring order from everyone's place
 * (topology/topo.h: nodes contiguous, then package, NUMA node, core). */
static cohort_status_t build_layout(cohort_comm_t *c, const card_t *cards, const int *members,
                                    int n)
{
    c->ring = malloc((size_t)n * sizeof *c->ring);
    c->node_of = malloc((size_t)n * sizeof *c->node_of);
    c->local_of = malloc((size_t)n * sizeof *c->local_of);
    cohort_rank_loc_t *locs = malloc((size_t)n * sizeof *locs);
    int *per_node = calloc((size_t)n, sizeof *per_node);
    if (!c->ring || !c->node_of || !c->local_of || !locs || !per_node) {
        free(locs);
        free(per_node);
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for the layout of %d ranks", n);
    }
    int nodes = 0;
    for (int r = 0; r < n; r++) {
        const card_t *cr = &cards[members[r]];
        int d = -1;
        for (int q = 0; q < r && d < 0; q++)
            if (!strcmp(cards[members[q]].hostid, cr->hostid)) d = c->node_of[q];
        if (d < 0) d = nodes++;
        c->node_of[r] = d;
        c->local_of[r] = per_node[d]++;
        locs[r] = (cohort_rank_loc_t){ d, cr->package, cr->numa, cr->core };
    }
    cohort_topo_ring(locs, n, c->ring);
    for (int p = 0; p < n; p++)
        if (c->ring[p] == c->rank) c->ring_pos = p;
    c->node_count = nodes;
    c->local_rank = c->local_of[c->rank];
    c->local_size = per_node[c->node_of[c->rank]];
    c->hier_even = 1;
    for (int d = 1; d < nodes; d++)
        if (per_node[d] != per_node[0]) c->hier_even = 0;
    free(locs);
    free(per_node);
    if (c->ring_pos < 0)
        return cohort_error(COHORT_ERR_INTERNAL, "rank %d is missing from the ring order built "
                            "from the topology; this is a bug in cohort, please report it",
                            c->rank);
    return COHORT_SUCCESS;
}

typedef struct hier_msg {
    int32_t status;
    char msg[236];
} hier_msg_t;

/* Hierarchical collectives run on this rank's node group and on its peers of the same local
 * rank on the other nodes, as communicators of their own (so the node's gets the shm
 * transport's node collectives). Made when COHORT_HIERARCHICAL allows and the job spans two or
 * more nodes with two or more ranks on one of them (auto: on every node, evenly). Every rank
 * makes both (the splits are collective), then all agree: a failure anywhere leaves every rank
 * on the flat algorithms, with a WARN saying who failed and why. *plan describes the result. */
static void hier_setup(cohort_comm_t *c, char *plan, size_t planlen)
{
    int nodes = c->node_count, maxl = 0;
    for (int r = 0; r < c->nranks; r++)
        maxl = c->local_of[r] + 1 > maxl ? c->local_of[r] + 1 : maxl;
    const char *why = NULL;
    if (nodes < 2) why = "one node";
    else if (maxl < 2) why = "one rank per node";
    else if (c->hier_mode == COHORT_HIER_OFF) why = "COHORT_HIERARCHICAL=0";
    else if (c->hier_mode == COHORT_HIER_AUTO && !c->hier_even)
        why = "nodes have different numbers of ranks (COHORT_HIERARCHICAL=1 forces a "
              "leader-based plan)";
    if (why) {
        snprintf(plan, planlen, "flat: %s", why);
        return;
    }
    cohort_comm_t *node = NULL, *cross = NULL;
    hier_msg_t mine = { 0, "" }, *all = calloc((size_t)c->nranks, sizeof *all);
    cohort_status_t st = cohort_comm_split(c, c->node_of[c->rank], c->rank, &node);
    if (st) snprintf(mine.msg, sizeof mine.msg, "node group: %s", cohort_last_error());
    cohort_status_t st2 = cohort_comm_split(c, c->local_of[c->rank], c->rank, &cross);
    if (st2 && !st) snprintf(mine.msg, sizeof mine.msg, "across nodes: %s", cohort_last_error());
    mine.status = st ? st : st2;
    cohort_bootstrap_t *boot = NULL;
    cohort_status_t bst = all ? cohort_bootstrap_comm(c, &boot) : COHORT_ERR_NO_MEMORY;
    if (!bst) {
        bst = boot->allgather(boot, &mine, all, sizeof mine);
        boot->close(boot);
    }
    int bad = bst ? c->rank : -1;
    for (int r = 0; r < c->nranks && bad < 0; r++)
        if (all[r].status) bad = r;
    if (bad >= 0) {
        cohort_comm_destroy(node);
        cohort_comm_destroy(cross);
        if (c->rank == 0 || bad == c->rank)
            COHORT_WARN(SUBSYS, "hierarchical collectives are off: rank %d could not set them "
                        "up: %.236s", bad, bst ? cohort_last_error() : all[bad].msg);
        snprintf(plan, planlen, "flat: rank %d could not set up the hierarchy", bad);
    } else {
        c->hier_node = node;
        c->hier_cross = cross;
        node->hier_parent = cross->hier_parent = c;
        snprintf(plan, planlen, "hierarchical (%s): node groups over %s, then %s across nodes",
                 c->hier_even ? "every node drives its shards: node reduce-scatter, allreduce "
                                "of each shard among equal local ranks, node allgather"
                              : "uneven nodes, leader plan: node reduce to local rank 0, "
                                "allreduce among the leaders, node broadcast",
                 node->coll_plugin >= 0 ? node->plugins[node->coll_plugin]->name
                                        : "point-to-point",
                 cross->nranks > 1 ? cohort_comm_peer_transport(cross, cross->rank ? 0 : 1)
                                   : "nothing");
    }
    free(all);
}

/* One communicator's creation (comm_create): four allgather rounds over the bootstrap, each a
 * function below. A rank that failed locally still takes part in every remaining round, so that
 * the other ranks learn about it instead of waiting; only a failed allgather (boot_failed) ends
 * the rounds, since the bootstrap itself is then gone. */
typedef struct create {
    cohort_bootstrap_t *boot;
    int member, world, nboot, me, n;
    uint64_t comm_id;
    cohort_comm_t *c;
    card_t *cards, *mine;
    unsigned char *rows;          /* nboot x nboot: which plugins reach which rank (round 3) */
    int *members;                 /* bootstrap ranks of the members, by (key, bootstrap rank) */
    status_msg_t *stats;
    int boot_failed;
} create_t;

static cohort_status_t exchange(create_t *cr, const void *mine, void *all, size_t len)
{
    cohort_status_t bst = cr->boot->allgather(cr->boot, mine, all, len);
    if (bst) cr->boot_failed = 1;
    return bst;
}

/* The first member's failure that a round's cards report, as this rank's error. */
static cohort_status_t joined(create_t *cr)
{
    for (int r = 0; r < cr->n; r++) {
        const card_t *cd = &cr->cards[cr->members[r]];
        if (cd->status)
            return cohort_error(cd->status, "rank %d (%s) failed to join: %s", r, cd->hostname,
                                cd->errmsg);
    }
    return COHORT_SUCCESS;
}

static void card_failed(card_t *mine, cohort_status_t st)
{
    mine->status = st;
    snprintf(mine->errmsg, sizeof mine->errmsg, "%s", cohort_last_error());
}

/* Round 1: who is in which communicator, with which key. This rank's rank in the new
 * communicator is only known after it, and endpoints need it: they are opened for round 2. */
static cohort_status_t round_members(create_t *cr, int64_t key, double timeout_s)
{
    cohort_comm_t *c = cr->c;
    cohort_status_t st = COHORT_SUCCESS;
    if (cr->member) st = read_settings(c, timeout_s);
    fill_card(cr->mine, c, cr->member, key, !st);
    cr->mine->world_rank = cr->boot->world_rank;
    if (st) card_failed(cr->mine, st);
    cohort_status_t bst = exchange(cr, cr->mine, cr->cards, sizeof *cr->mine);
    if (bst) return bst;
    for (int b = 0; b < cr->nboot; b++)
        if (cr->cards[b].magic != CARD_MAGIC || cr->cards[b].version != CARD_VERSION) {
            cr->boot_failed = 1;   /* the rounds cannot go on with cards they cannot read */
            return cohort_error(COHORT_ERR_MISMATCH, "rank %d sent a bootstrap card of another "
                                "cohort version; install the same cohort everywhere", b);
        }
    if (!cr->member) return st;
    int n = 0;
    for (int b = 0; b < cr->nboot; b++)
        if (cr->cards[b].member && cr->cards[b].comm_id == cr->comm_id) {
            int pos = n++;
            while (pos > 0 && cr->cards[cr->members[pos - 1]].key > cr->cards[b].key) {
                cr->members[pos] = cr->members[pos - 1];
                pos--;
            }
            cr->members[pos] = b;
        }
    cr->n = c->nranks = n;
    for (int r = 0; r < n; r++)
        if (cr->members[r] == cr->me) c->rank = r;
    /* the job's rank of each member, when all are ranks of a job with a control channel */
    int known = 1;
    for (int r = 0; r < n; r++) known &= cr->cards[cr->members[r]].world_rank >= 0;
    if (known && n > 1 && (c->world_of = malloc((size_t)n * sizeof *c->world_of)))
        for (int r = 0; r < n; r++) c->world_of[r] = cr->cards[cr->members[r]].world_rank;
    return st ? st : joined(cr);
}

/* Round 2: endpoint addresses, and the members' versions checked against each other. */
static cohort_status_t round_endpoints(create_t *cr, cohort_status_t st)
{
    if (cr->member && !st) {
        cr->mine->nplugins = 0;
        st = open_endpoints(cr->c, cr->mine);
    }
    if (st) card_failed(cr->mine, st);
    cohort_status_t bst = exchange(cr, cr->mine, cr->cards, sizeof *cr->mine);
    if (bst) return bst;
    if (cr->member && !st) {
        st = joined(cr);
        if (!st) st = check_versions(cr->c, cr->cards, cr->members);
    }
    return st;
}

/* Round 3: which peers each of this rank's transports can reach (one row of bits per rank). */
static cohort_status_t round_reach(create_t *cr, cohort_status_t st)
{
    cohort_comm_t *c = cr->c;
    unsigned char *row = cr->rows + (size_t)cr->me * (size_t)cr->nboot;
    if (cr->member && !st) {
        for (int r = 0; r < cr->n; r++) {
            int b = cr->members[r];
            if (b == cr->me) continue;
            for (uint32_t i = 0; i < cr->mine->nplugins; i++) {
                int li = local_plugin_index(c, cr->mine->plugins[i].name);
                int j = card_plugin_index(&cr->cards[b], cr->mine->plugins[i].name);
                const card_plugin_t *peer_pl = j >= 0 ? &cr->cards[b].plugins[j] : NULL;
                if (li >= 0 && peer_pl &&
                    c->plugins[li]->ops->can_reach(c->eps[li], r, peer_pl->addr, peer_pl->addrlen))
                    row[b] |= (unsigned char)(1u << i);
            }
        }
    }
    unsigned char *myrow = malloc((size_t)cr->nboot);
    if (!myrow) {
        cr->boot_failed = 1;
        return cohort_error(COHORT_ERR_NO_MEMORY, "no memory");
    }
    memcpy(myrow, row, (size_t)cr->nboot);
    cohort_status_t bst = exchange(cr, myrow, cr->rows, (size_t)cr->nboot);
    free(myrow);
    return bst ? bst : st;
}

/* The transport of every pair (all ranks check every pair, so that all fail together). */
static cohort_status_t check_pairs(create_t *cr)
{
    for (int a = 0; a < cr->n; a++)
        for (int b = a + 1; b < cr->n; b++) {
            if (choose(cr->cards, cr->rows, cr->nboot, cr->members[a], cr->members[b]) >= 0)
                continue;
            char pa[128], pb[128];
            const card_t *ca = &cr->cards[cr->members[a]], *cb = &cr->cards[cr->members[b]];
            describe_plugins(ca, pa, sizeof pa);
            describe_plugins(cb, pb, sizeof pb);
            return cohort_error(COHORT_ERR_MISMATCH, "no transport connects rank %d (%s, "
                                "loaded: %s; interfaces: %.224s) and rank %d (%s, loaded: "
                                "%s; interfaces: %.224s): none of the interfaces answered "
                                "from the other side (COHORT_DEBUG=INFO shows each probe). "
                                "Load the same transports everywhere (COHORT_TRANSPORTS) "
                                "and set COHORT_SOCKET_IFNAME to interfaces the hosts "
                                "share (e.g. eth,ens for different names per host)", a,
                                ca->hostname, pa, ca->netifs, b, cb->hostname, pb, cb->netifs);
        }
    return COHORT_SUCCESS;
}

/* connect or accept, with the transport round 3 chose, for every peer */
static cohort_status_t start_connections(create_t *cr)
{
    cohort_comm_t *c = cr->c;
    for (int r = 0; r < cr->n; r++) {
        const card_t *cd = &cr->cards[cr->members[r]];
        cohort_peer_t *peer = &c->peers[r];
        snprintf(peer->host, sizeof peer->host, "%s", cd->hostname);
        if (r == c->rank) {
            peer->plugin = -1;
            continue;
        }
        int lo = cr->members[r] < cr->me ? cr->members[r] : cr->me;
        int ci = choose(cr->cards, cr->rows, cr->nboot, cr->me, cr->members[r]);
        const char *name = cr->cards[lo].plugins[ci].name;
        peer->plugin = local_plugin_index(c, name);
        int j = card_plugin_index(cd, name);
        const cohort_transport_v1_t *ops = c->plugins[peer->plugin]->ops;
        cohort_tp_ep_t ep = c->eps[peer->plugin];
        cohort_status_t st = r < c->rank ? ops->connect(ep, r, cd->plugins[j].addr,
                                                        cd->plugins[j].addrlen, &peer->conn)
                                         : ops->accept(ep, r, &peer->conn);
        if (st) {
            peer->conn = NULL;
            cohort_error_prefix("rank %d starting a %s connection to rank %d (%s)", c->rank,
                                name, r, cd->hostname);
            return st;
        }
    }
    return COHORT_SUCCESS;
}

/* More ranks than cores to run them: waits must yield, not spin (see p2p.c). Counted over the
 * ranks on this machine (same boot id, whatever COHORT_HOSTID says: containers or network
 * namespaces on one host share its CPUs) whose affinity overlaps ours, against the CPUs they may
 * use between them. */
static void count_sharing(create_t *cr)
{
    cohort_comm_t *c = cr->c;
    int sharing = 0, ncpu = 0;
    uint64_t uni[16] = { 0 };
    for (int r = 0; r < cr->n; r++) {
        const card_t *cd = &cr->cards[cr->members[r]];
        int overlap = 0;
        for (int w = 0; w < 16; w++) overlap |= (cd->cpumask[w] & cr->mine->cpumask[w]) != 0;
        if (strncmp(cd->bootid, cr->mine->bootid, sizeof cr->mine->bootid) || !overlap) continue;
        sharing++;
        for (int w = 0; w < 16; w++) uni[w] |= cd->cpumask[w];
    }
    for (int w = 0; w < 16; w++) ncpu += __builtin_popcountll(uni[w]);
    if (ncpu == 0) ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->oversubscribed = ncpu > 0 && (sharing > ncpu || c->local_size > ncpu);
    c->cpu_sharing = sharing > c->local_size ? sharing : c->local_size;
    c->cpus = ncpu;
}

/* Between rounds 3 and 4: the peers, the layout, the connections. */
static cohort_status_t connect_peers(create_t *cr)
{
    cohort_comm_t *c = cr->c;
    c->peers = calloc((size_t)cr->n, sizeof *c->peers);
    cohort_status_t st = c->peers ? COHORT_SUCCESS
                                  : cohort_error(COHORT_ERR_NO_MEMORY, "no memory for %d peers",
                                                 cr->n);
    if (!st) st = check_pairs(cr);
    if (!st) st = build_layout(c, cr->cards, cr->members, cr->n);
    if (!st) st = start_connections(cr);
    count_sharing(cr);
    if (!st) st = connect_all(c, cr->boot);
    if (!st) {
        close_unused_endpoints(c);
    } else {
        /* tell the others now, first through the bootstrap (so that this failure, the cause,
         * is the one reported), then by closing: they may be waiting for us */
        if (cr->boot->fail) cr->boot->fail(cr->boot, cohort_last_error());
        if (c->eps) abandon_endpoints(c);
    }
    return st;
}

/* Round 4: everyone says whether it got connected, so failures are shared, and which
 * collectives its transport could run itself: they run there only if every member agrees. */
static cohort_status_t round_status(create_t *cr, cohort_status_t st)
{
    cohort_comm_t *c = cr->c;
    status_msg_t sm = { st, "", "", 0 };
    if (st) snprintf(sm.msg, sizeof sm.msg, "%s", cohort_last_error());
    else if (cr->member) coll_candidate(c, &sm);
    cohort_status_t bst = exchange(cr, &sm, cr->stats, sizeof sm);
    if (bst) return bst;
    if (!cr->member || st) return st;
    for (int r = 0; r < cr->n; r++)
        if (cr->stats[cr->members[r]].status)
            return cohort_error(COHORT_ERR_PEER_LOST, "rank %d (%s) could not join the "
                                "communicator: %.252s", r, cr->cards[cr->members[r]].hostname,
                                cr->stats[cr->members[r]].msg);
    if (!sm.coll_mask) return COHORT_SUCCESS;
    int agree = 1;
    for (int r = 0; r < cr->n && agree; r++)
        agree = cr->stats[cr->members[r]].coll_mask == sm.coll_mask &&
                !strncmp(cr->stats[cr->members[r]].coll_plugin, sm.coll_plugin,
                         sizeof sm.coll_plugin);
    if (agree) {
        c->coll_plugin = local_plugin_index(c, sm.coll_plugin);
        c->coll_mask = sm.coll_mask;
    } else if (c->rank == 0) {
        cohort_log(COHORT_LOG_INFO, SUBSYS, "the ranks differ on which transport could run "
                   "collectives itself: the core's algorithms run them");
    }
    return COHORT_SUCCESS;
}

/* rank 0's INFO line: the transports in use, the ring, the hierarchy's plan */
static void log_ready(create_t *cr, const char *plan)
{
    cohort_comm_t *c = cr->c;
    int n = cr->n;
    char tp[256] = "";
    size_t used = 0;
    for (int i = 0; i < c->nplugins; i++) {
        int users = 0;
        for (int p = 0; p < n; p++) users += c->peers[p].plugin == i;
        if (users)
            used += (size_t)snprintf(tp + used, sizeof tp - used, "%s%s (%d peers)",
                                     used ? ", " : "", c->plugins[i]->name, users);
    }
    char ring[160] = "";
    for (int p = 0, rl = 0; p < n && rl < (int)sizeof ring - 16; p++)
        rl += snprintf(ring + rl, sizeof ring - (size_t)rl, "%s%d", p ? " " : "; ring ",
                       c->ring[p]);
    if (n > 24) snprintf(ring, sizeof ring, "; ring of %d ranks (COHORT_TOPO_DUMP shows it)", n);
    cohort_log(COHORT_LOG_INFO, SUBSYS, "communicator %016llx ready: %d ranks on %d node(s); "
               "rank 0 uses %s%s%s%s%s%s", (unsigned long long)c->comm_id, n, c->node_count,
               n > 1 ? tp : "no transport (single rank)",
               c->coll_plugin >= 0 ? "; collectives run by " : "",
               c->coll_plugin >= 0 ? c->plugins[c->coll_plugin]->name : "", ring,
               c->node_count > 1 ? "; " : "", c->node_count > 1 ? plan : "");
}

/* A member's communicator after the rounds: the hierarchy, the topology report
 * (COHORT_TOPO_DUMP, world only), the INFO line, the abort line, the timeline. */
static cohort_status_t finish(create_t *cr)
{
    cohort_comm_t *c = cr->c;
    char plan[400];
    hier_setup(c, plan, sizeof plan);
    const char *dump = cohort_config_get("COHORT_TOPO_DUMP");
    if (cr->world && c->rank == 0 && dump && *dump) {
        cohort_job_rank_t *jr = calloc((size_t)cr->n, sizeof *jr);
        if (jr) {
            for (int r = 0; r < cr->n; r++) {
                const card_t *cd = &cr->cards[cr->members[r]];
                jr[r] = (cohort_job_rank_t){ c->node_of[r], c->local_of[r], cd->package,
                                             cd->numa, cd->core, "", cd->hostname, cd->nic };
                snprintf(jr[r].cpus, sizeof jr[r].cpus, "%s", cd->cpus);
            }
            if (cohort_job_dump(dump, jr, cr->n, c->ring, plan) == COHORT_SUCCESS)
                cohort_log(COHORT_LOG_INFO, SUBSYS, "topology report written to %s", dump);
            free(jr);
        }
    }
    if (c->rank == 0) log_ready(cr, plan);
    set_abort_line(c);
    return cohort_timeline_attach(c);
}

/* The rounds above (core/comm_create.h). */
cohort_status_t cohort_comm_create(cohort_bootstrap_t *boot, int member, uint64_t comm_id,
                                   int64_t key, int world, double timeout_s, cohort_comm_t **out,
                                   cohort_comm_t **dispose)
{
    *out = NULL;
    *dispose = NULL;
    int nboot = boot->nranks;
    create_t cr = { .boot = boot, .member = member, .world = world, .nboot = nboot,
                    .me = boot->rank, .comm_id = comm_id };
    cr.c = calloc(1, sizeof *cr.c);
    cr.cards = calloc((size_t)nboot, sizeof *cr.cards);
    cr.mine = calloc(1, sizeof *cr.mine);
    cr.rows = calloc((size_t)nboot * (size_t)nboot, 1);
    cr.members = calloc((size_t)nboot, sizeof *cr.members);
    cr.stats = calloc((size_t)nboot, sizeof *cr.stats);
    cohort_status_t st = COHORT_SUCCESS;
    if (!cr.c || !cr.cards || !cr.mine || !cr.rows || !cr.members || !cr.stats) {
        st = cohort_error(COHORT_ERR_NO_MEMORY, "no memory to create a communicator of %d ranks",
                          nboot);
        free(cr.c);
        cr.c = NULL;
        goto out;
    }
    cohort_comm_t *c = cr.c;
    c->magic = COHORT_COMM_MAGIC;
    c->comm_id = comm_id;
    c->rank = -1;
    atomic_init(&c->aborted, 0);
    st = round_members(&cr, key, timeout_s);
    if (!cr.boot_failed) st = round_endpoints(&cr, st);
    if (!cr.boot_failed) st = round_reach(&cr, st);
    if (!cr.boot_failed && member && !st) st = connect_peers(&cr);
    if (!cr.boot_failed) st = round_status(&cr, st);
    if (!st && member) {
        if ((st = finish(&cr))) *dispose = c;
        else *out = c;
    } else {
        c->magic = COHORT_COMM_MAGIC;
        if (c->plugins) c->nranks = c->peers ? cr.n : 0;
        *dispose = c;
    }
out:
    free(cr.cards);
    free(cr.mine);
    free(cr.rows);
    free(cr.members);
    free(cr.stats);
    return st;
}

cohort_status_t cohort_comm_create_single(uint64_t comm_id, double timeout_s, cohort_comm_t **out)
{
    *out = NULL;
    cohort_comm_t *c = calloc(1, sizeof *c);
    if (!c) return cohort_error(COHORT_ERR_NO_MEMORY, "no memory for a communicator");
    *c = (cohort_comm_t){ .magic = COHORT_COMM_MAGIC, .nranks = 1, .local_size = 1,
                          .node_count = 1, .comm_id = comm_id };
    atomic_init(&c->aborted, 0);
    cohort_status_t st = read_settings(c, timeout_s);
    if (!st) set_abort_line(c);
    if (!st) st = cohort_timeline_attach(c);
    if (st) {
        free(c);
        return st;
    }
    *out = c;
    return COHORT_SUCCESS;
}
