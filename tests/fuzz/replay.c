/* SPDX-License-Identifier: BSD-3-Clause */
/* The main() a fuzz target gets when it is built without libFuzzer (make check, valgrind):
 * replay FILE|DIR... runs every file given, and every file of every directory given (sorted by
 * name, not recursing), through LLVMFuzzerTestOneInput once, in a buffer of exactly the file's
 * size. It prints one line per file with -v, and a count at the end; a target's check that fails
 * aborts, naming the file on the line before. Exit status: 0, or 1 when nothing could be read
 * (no corpus is a failure, not a pass). */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

static int verbose;

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0, got;
    unsigned char *buf = malloc(cap);
    if (!buf) abort();
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap && !(buf = realloc(buf, cap *= 2))) abort();
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so that a read one past the input is caught */
    unsigned char *in = malloc(len ? len : 1);
    if (!in) abort();
    memcpy(in, buf, len);
    free(buf);
    if (verbose) fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    fflush(stderr);
    LLVMFuzzerTestOneInput(in, len);
    free(in);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap && !(names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names)))
            abort();
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) abort();
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]) != 0) rc = -1;
            else (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, rc = 0, first = 1;
    if (argc > 1 && !strcmp(argv[1], "-v")) {
        verbose = 1;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-v] FILE|DIR...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = first; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count) != 0) rc = 1;
        } else if (run_file(argv[i]) != 0) {
            rc = 1;
        } else {
            count++;
        }
    }
    printf("%s: %d input(s) replayed\n", argv[0], count);
    if (count == 0) {
        fprintf(stderr, "replay: no input found\n");
        rc = 1;
    }
    return rc;
}
