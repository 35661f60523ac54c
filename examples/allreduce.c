/* SPDX-License-Identifier: BSD-3-Clause */
/* The README's example: average a small "gradient" over all ranks.
 *   cohortrun -np 4 ./allreduce
 * Build against an installed cohort: cc allreduce.c $(pkg-config --cflags --libs cohort) */
#include <cohort/cohort.h>
#include <stdio.h>

int main(void)
{
    cohort_comm_t *comm;
    if (cohort_comm_init(&comm) != COHORT_SUCCESS) {     /* rank/size from the launcher */
        fprintf(stderr, "init: %s\n", cohort_last_error());
        return 1;
    }
    float grad[4] = { 1, 2, 3, (float)cohort_comm_rank(comm) };
    cohort_status_t st = cohort_allreduce(comm, grad, grad, 4, COHORT_FLOAT32, COHORT_AVG);
    if (st != COHORT_SUCCESS)
        fprintf(stderr, "allreduce: %s: %s\n", cohort_strerror(st), cohort_last_error());
    else if (cohort_comm_rank(comm) == 0)
        printf("mean of ranks = %g\n", grad[3]);
    cohort_comm_destroy(comm);
    return st == COHORT_SUCCESS ? 0 : 1;
}
