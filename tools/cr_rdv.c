/* SPDX-License-Identifier: BSD-3-Clause */
/* cohortrun's job identity and meeting points: the job id and secret, the rendezvous server the
 * ranks meet at and the address remote ranks reach it by, and torch's MASTER_ADDR and
 * MASTER_PORT. One file, since together they are what every rank is told about whom it works
 * with and where to meet them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/log.h"
#include "core/netif.h"
#include "core/parse.h"
#include "core/rendezvous.h"
#include "tools/cr_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* A value of MASTER_ADDR/MASTER_PORT that the user set: the last -x with a value, else
 * cohortrun's environment. An empty value counts as not set. *from says where it came from. */
static const char *user_value(const opts_t *o, const char *name, const char **from)
{
    for (int i = o->nx - 1; i >= 0; i--)
        if (!strcmp(o->xvars[i].name, name) && o->xvars[i].value && *o->xvars[i].value) {
            *from = "-x";
            return o->xvars[i].value;
        }
    const char *v = getenv(name);
    *from = "cohortrun's environment";
    return v && *v ? v : NULL;
}

static void random_bytes(unsigned char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = getrandom(buf + got, len - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (got == len) return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (fd >= 0) close(fd);
    if (got != len) {
        cr_msg("cannot read random bytes for the job secret (getrandom and /dev/urandom failed)");
        exit(1);
    }
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Whether a TCP port is free on every local address: bound on the IPv6 wildcard with
 * IPV6_V6ONLY off (IPv4 too; where IPv6 is missing, the IPv4 wildcard), as torch's TCPStore
 * binds it, then closed. port 0: the kernel picks one; returns the port, or 0 when not free. */
static int bind_wildcard(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), got = 0;
    if (fd >= 0) {
        int off = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons((uint16_t)port);
        socklen_t len = sizeof a;
        int e = 0;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0)
            got = ntohs(a.sin6_port);
        else
            e = errno;
        close(fd);
        /* taken; anything else (IPv6 disabled): ask IPv4 */
        if (got || e == EADDRINUSE || e == EACCES) return got;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    close(fd);
    return got;
}

/* MASTER_PORT when the user gave none: a random port in 20000-65535 outside this host's
 * ephemeral range (ip_local_port_range, 32768-60999 by default), which the kernel never hands
 * to an outgoing connection, so it stays free between this check and rank 0's bind. With
 * check (rank 0 runs here) the port must be free to bind, else another is drawn (64 tries,
 * then one the kernel picks). Without (rank 0 is remote) it is not checked. */
static int pick_master_port(int check)
{
    long lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        long a, b;
        if (fscanf(f, "%ld %ld", &a, &b) == 2 && a >= 1 && a <= b && b <= 65535) {
            lo = a;
            hi = b;
        }
        fclose(f);
    }
    const long first = 20000, last = 65535;
    long below = lo > first ? (lo - first < last - first + 1 ? lo - first : last - first + 1) : 0;
    long above = hi < last ? last - (hi > first - 1 ? hi : first - 1) : 0;
    if (below + above == 0) {   /* the ephemeral range covers them all */
        below = last - first + 1;
        above = 0;
    }
    for (int tries = 0; tries < 64; tries++) {
        uint32_t x;
        random_bytes((unsigned char *)&x, sizeof x);
        long k = (long)(x % (uint32_t)(below + above));
        int port = (int)(k < below ? first + k : last - above + 1 + (k - below));
        if (!check || bind_wildcard(port)) return port;
    }
    return bind_wildcard(0);
}

/* MASTER_ADDR and MASTER_PORT, for PyTorch's env:// (its TCPStore is hosted by rank 0 at that
 * address and port). The user's values win (user_value). Else MASTER_ADDR is where the other
 * ranks reach rank 0's host: 127.0.0.1 when every rank runs here; the rendezvous address
 * (addr, the one remote ranks are given in COHORT_RENDEZVOUS) when rank 0 runs here and others
 * do not; rank 0's host as the host list names it (without a user@) when rank 0 is remote. */
static void torch_master(job_t *job, const char *addr)
{
    const char *from;
    const char *v = user_value(job->o, "MASTER_ADDR", &from);
    const rank_proc_t *r0 = &job->ranks[0];
    job->master_addr_from = v ? from : r0->local ? "rank 0 runs here" : "rank 0's host";
    if (v) {
        job->master_addr = cr_xstrdup(v);
    } else if (r0->local) {
        job->master_addr = cr_xstrdup(addr);
    } else {
        const char *at = strrchr(r0->host, '@');
        job->master_addr = cr_xstrdup(at ? at + 1 : r0->host);
    }
    v = user_value(job->o, "MASTER_PORT", &from);
    job->master_port_from = v ? from : r0->local ? "free here" : "random, rank 0 is remote";
    if (v) {
        long port;
        char what[64];
        snprintf(what, sizeof what, "MASTER_PORT from %s", from);
        cr_quiet_begin();
        cohort_status_t st = cohort_parse_long(what, v, 1, 65535, &port);
        cr_quiet_end();
        if (st) cr_usage_error("%s", cohort_last_error());
        job->master_port = (int)port;
        return;
    }
    job->master_port = pick_master_port(r0->local);
    if (!job->master_port) {
        cr_msg("cannot find a free TCP port for MASTER_PORT (torch's env://): no port could be "
               "bound on this host; choose one with -x MASTER_PORT=PORT");
        exit(1);
    }
}

void cr_setup_job(job_t *job)
{
    unsigned char id[8], sec[32];
    random_bytes(id, sizeof id);
    random_bytes(sec, sizeof sec);
    char idhex[17];
    to_hex(id, sizeof id, idhex);
    snprintf(job->job_id, sizeof job->job_id, "cr-%s", idhex);
    to_hex(sec, sizeof sec, job->secret);

    if (job->o->netif) {
        setenv("COHORT_SOCKET_IFNAME", job->o->netif, 1);
        cohort_netifs_reset();
    }
    int all_local = 1;
    for (int r = 0; r < job->n; r++) all_local &= job->ranks[r].local;
    char addr[INET6_ADDRSTRLEN + 2] = "127.0.0.1";   /* for the URL: IPv6 in brackets */
    char bare[INET6_ADDRSTRLEN] = "127.0.0.1";
    if (!all_local) {
        const cohort_netif_t *ifs = NULL;
        int nifs = 0;
        cr_quiet_begin();
        cohort_status_t st = cohort_netifs(&ifs, &nifs);
        cr_quiet_end();
        if (st) {
            cr_msg("cannot choose the rendezvous address: %s", cohort_last_error());
            exit(job->o->netif ? EXIT_USAGE : 1);
        }
        if (nifs <= 0) {
            cr_msg("cannot choose the rendezvous address: this host has no usable network "
                   "interface");
            exit(1);
        }
        char a[INET6_ADDRSTRLEN] = "?";
        inet_ntop(ifs[0].family, ifs[0].addr, a, sizeof a);
        if (ifs[0].family == AF_INET6) snprintf(addr, sizeof addr, "[%s]", a);
        else snprintf(addr, sizeof addr, "%s", a);
        snprintf(bare, sizeof bare, "%s", a);
        if (ifs[0].is_loopback)
            cr_msg("warning: the rendezvous address %s is on the loopback interface %s, which "
                   "remote ranks cannot reach; choose an interface with --network-interface", a,
                   ifs[0].name);
    }
    cr_quiet_begin();
    cohort_status_t st = cohort_rdv_server_create(NULL, 0, job->n, job->job_id, job->secret,
                                                  strlen(job->secret), &job->srv);
    cr_quiet_end();
    if (st) {
        cr_msg("cannot start the rendezvous server: %s", cohort_last_error());
        exit(1);
    }
    job->srv_active = 1;
    snprintf(job->url, sizeof job->url, "tcp://%s:%d", addr, cohort_rdv_server_port(job->srv));
    torch_master(job, bare);
}
