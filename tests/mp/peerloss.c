/* SPDX-License-Identifier: BSD-3-Clause */
/* peerloss DIR COUNT: loops float32 allreduce of COUNT elements until an error. Writes its pid to
 * DIR/pid.<rank> once the first allreduce succeeded, and on the first error its message to
 * DIR/err.<rank>; exits 1 then. Driven by test_shm.sh, which kills one rank with SIGKILL. */
#include <cohort/cohort.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void write_file(const char *dir, const char *what, int rank, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%s\n", text);
    fclose(f);
    rename(tmp, path);   /* readers never see half a file */
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: peerloss DIR COUNT\n");
        return 2;
    }
    size_t n = strtoul(argv[2], NULL, 10);
    cohort_comm_t *c;
    if (cohort_comm_init(&c)) {
        fprintf(stderr, "init: %s\n", cohort_last_error());
        return 2;
    }
    int rank = cohort_comm_rank(c);
    float *b = calloc(n ? n : 1, sizeof *b);
    for (long it = 0;; it++) {
        cohort_status_t st = cohort_allreduce(c, b, b, n, COHORT_FLOAT32, COHORT_SUM);
        if (st) {
            char msg[2200];
            snprintf(msg, sizeof msg, "%s: %s", cohort_strerror(st), cohort_last_error());
            write_file(argv[1], "err", rank, msg);
            cohort_comm_destroy(c);
            free(b);
            return 1;
        }
        if (it == 0) {
            char pid[32];
            snprintf(pid, sizeof pid, "%d", (int)getpid());
            write_file(argv[1], "pid", rank, pid);
        }
    }
}
