/* SPDX-License-Identifier: BSD-3-Clause */
/* reinit alive|after: a second cohort_comm_init in one process, run as every rank of a job by
 * tests/mp/test_bootstrap.sh.
 *
 *   alive  the second call comes while the first world communicator lives;
 *   after  the first world communicator is destroyed before the second call.
 *
 * Either way a process joins its job once, so the second call must fail. Prints
 * "second init: <cohort_strerror>: <cohort_last_error()>" and exits 0 when it failed, 1 when it
 * succeeded (the script checks the message), 2 when the first call failed. */
#include <cohort/cohort.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "alive") && strcmp(argv[1], "after"))) {
        fprintf(stderr, "usage: reinit alive|after\n");
        return 2;
    }
    cohort_comm_t *first = NULL, *second = NULL;
    if (cohort_comm_init(&first)) {
        fprintf(stderr, "reinit: first cohort_comm_init: %s\n", cohort_last_error());
        return 2;
    }
    if (!strcmp(argv[1], "after")) {
        cohort_comm_destroy(first);
        first = NULL;
    }
    cohort_status_t st = cohort_comm_init(&second);
    printf("second init: %s: %s\n", st ? cohort_strerror(st) : "success",
           st ? cohort_last_error() : "");
    fflush(stdout);
    if (second) cohort_comm_destroy(second);
    if (first) cohort_comm_destroy(first);
    return st ? 0 : 1;
}
