/* SPDX-License-Identifier: BSD-3-Clause */
/* secretcheck TRANSPORT same|other: two ranks (this process forks them) create a communicator
 * through cohort_comm_init_oob over a socketpair, with COHORT_TRANSPORTS=TRANSPORT, and do one
 * allreduce. With "same" both hold one COHORT_SECRET and must succeed; with "other" rank 1 holds
 * another secret, which the out-of-band exchange does not check (the caller's channel): both
 * ranks must fail (the creation's cards carry a tag keyed by the secret, so the failure says
 * the secrets differ; the transports' handshakes would refuse the stranger too). Each rank prints one line,
 * "rank R: ok" or "rank R: failed: <message>"; the exit status is 0 when the outcome is the
 * expected one. (Under cohortrun or any launcher a wrong secret is refused by the rendezvous
 * first, before a transport sees it.) */
#include <cohort/cohort.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct oob {
    int fd, rank;
} oob_t;

static int full(ssize_t (*io)(int, void *, size_t), int fd, void *b, size_t n)
{
    unsigned char *p = b;
    while (n) {
        ssize_t r = io(fd, p, n);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static ssize_t wr(int fd, void *b, size_t n) { return write(fd, b, n); }
static ssize_t rd(int fd, void *b, size_t n) { return read(fd, b, n); }

/* Two ranks: send ours, read theirs. */
static int allgather(const void *s, void *r, size_t n, void *ctx)
{
    oob_t *o = ctx;
    unsigned char *out = r;
    memcpy(out + (size_t)o->rank * n, s, n);
    if (full(wr, o->fd, (void *)s, n) != 0) return -1;
    return full(rd, o->fd, out + (size_t)(1 - o->rank) * n, n);
}

static int rank_main(int rank, int fd, const char *tp, int other)
{
    setenv("COHORT_TRANSPORTS", tp, 1);
    setenv("COHORT_JOB_ID", "secretcheck", 1);
    setenv("COHORT_SECRET", other && rank == 1 ? "not-the-job-secret" : "the-job-secret", 1);
    oob_t o = { fd, rank };
    cohort_comm_t *comm = NULL;
    cohort_status_t st = cohort_comm_init_oob_timeout(rank, 2, allgather, &o, 10.0, &comm);
    if (st == COHORT_SUCCESS) {
        double x = rank + 1, y = 0;
        st = cohort_allreduce(comm, &x, &y, 1, COHORT_FLOAT64, COHORT_SUM);
        if (st == COHORT_SUCCESS && y != 3) {
            printf("rank %d: failed: allreduce gave %g, not 3\n", rank, y);
            return 1;
        }
    }
    if (st == COHORT_SUCCESS) printf("rank %d: ok\n", rank);
    else printf("rank %d: failed: %s\n", rank, cohort_last_error());
    fflush(stdout);
    if (comm) cohort_comm_destroy(comm);
    return st == COHORT_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "same") && strcmp(argv[2], "other"))) {
        fprintf(stderr, "usage: secretcheck TRANSPORT same|other\n");
        return 2;
    }
    int other = !strcmp(argv[2], "other");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return 2;
        if (pid[r] == 0) {
            close(sv[1 - r]);
            _exit(rank_main(r, sv[r], argv[1], other));
        }
    }
    close(sv[0]);
    close(sv[1]);
    int ok = 0;
    for (int r = 0; r < 2; r++) {
        int ws = 0;
        waitpid(pid[r], &ws, 0);
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) ok++;
        else if (!WIFEXITED(ws)) printf("rank %d: killed by signal %d\n", r, WTERMSIG(ws));
    }
    int pass = other ? ok == 0 : ok == 2;
    printf("secretcheck %s %s: %d of 2 ranks connected: %s\n", argv[1], argv[2], ok,
           pass ? "as expected" : "NOT as expected");
    return pass ? 0 : 1;
}
