/* SPDX-License-Identifier: BSD-3-Clause */
/* Test helper for test_cohortrun.sh: a rank that meets the others at cohortrun's rendezvous
 * (COHORT_RENDEZVOUS, COHORT_JOB_ID, COHORT_SECRET, COHORT_RANK, COHORT_SIZE), allgathers its
 * rank, checks what came back and leaves cleanly. "--skip R": rank R never connects (it sleeps
 * until it is terminated), to test cohortrun's arrival tracking. "--quit R": rank R exits 0 at
 * once without connecting. "--vanish R": rank R connects, then ends with _exit(0) before the
 * allgather, without a goodbye. Its own waits are 60 s, so that cohortrun's checks are what end
 * a stalled job. A rank that fails exits 1 without a goodbye too (it never calls
 * cohort_rdv_close then). */
#include "core/rendezvous.h"
#include "core/log.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *need(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "cr_rdv_client: %s is not set (run me under cohortrun)\n", name);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int skip = -1, quit = -1, vanish = -1;
    if (argc == 3 && !strcmp(argv[1], "--skip")) skip = atoi(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--quit")) quit = atoi(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--vanish")) vanish = atoi(argv[2]);
    const char *url = need("COHORT_RENDEZVOUS"), *job = need("COHORT_JOB_ID");
    const char *secret = need("COHORT_SECRET");
    int rank = atoi(need("COHORT_RANK")), size = atoi(need("COHORT_SIZE"));
    if (rank == skip) {
        for (int i = 0; i < 600; i++) poll(NULL, 0, 100);
        return 0;
    }
    if (rank == quit) return 0;
    cohort_rdv_client_t *cl = NULL;
    cohort_status_t st = cohort_rdv_connect(url, job, secret, strlen(secret), rank, size, 60.0,
                                            &cl);
    if (st) {
        fprintf(stderr, "cr_rdv_client: rank %d: connect: %s\n", rank, cohort_last_error());
        return 1;
    }
    if (rank == vanish) _exit(0);
    int *all = calloc((size_t)size, sizeof *all);
    if (!all) return 1;
    st = cohort_rdv_allgather(cl, &rank, all, sizeof rank, 60.0);
    if (st) {
        fprintf(stderr, "cr_rdv_client: rank %d: allgather: %s\n", rank, cohort_last_error());
        return 1;
    }
    for (int r = 0; r < size; r++)
        if (all[r] != r) {
            fprintf(stderr, "cr_rdv_client: rank %d: slot %d holds %d\n", rank, r, all[r]);
            return 1;
        }
    cohort_rdv_close(cl);
    free(all);
    printf("rendezvous ok rank %d of %d\n", rank, size);
    return 0;
}
