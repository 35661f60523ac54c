/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the fuzz targets (tests/fuzz/fuzz_*.c). Each target defines LLVMFuzzerInitialize
 * and LLVMFuzzerTestOneInput; it is linked either with libFuzzer (clang -fsanitize=fuzzer) or
 * with tests/fuzz/replay.c, which runs the committed corpus through it (make check, valgrind).
 *
 * FUZZ_CHECK is the harness's own oracle: a property the parser promises (a value in range, a
 * round trip, agreement with a reference reading). A broken one prints what and aborts, which
 * libFuzzer reports as a crash with the input that caused it. */
#ifndef COHORT_TESTS_FUZZ_H
#define COHORT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "%s:%d: harness check failed: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

/* Quiet logging (the parsers report every refusal at WARN) and no stray cohort.conf. */
static inline void fuzz_quiet(void)
{
    setenv("COHORT_DEBUG", "NONE", 1);
    setenv("COHORT_CONF", "/dev/null", 1);
}

/* data[1..size) as a NUL-terminated malloc'd string (embedded NULs stay: the parsers then see
 * the text up to the first one, as they would from an environment variable). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    size_t n = size > 0 ? size - 1 : 0;
    char *t = malloc(n + 1);
    if (!t) abort();
    if (n) memcpy(t, data + 1, n);
    t[n] = '\0';
    return t;
}

#endif
