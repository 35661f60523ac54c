/* SPDX-License-Identifier: BSD-3-Clause */
/* Parsers for text that comes from users: numbers, sizes, interface specs, hostfiles. Pure
 * functions; on bad text they return COHORT_ERR_INVALID_ARG after cohort_error() naming `what`
 * (the variable or file:line) and the bad text. */
#ifndef COHORT_CORE_PARSE_H
#define COHORT_CORE_PARSE_H

#include <stddef.h>
#include "cohort/cohort.h"

/* Whole-string decimal integer in [min,max]; leading/trailing spaces allowed, nothing else. */
cohort_status_t cohort_parse_long(const char *what, const char *text, long min, long max,
                                  long *out);
/* Decimal real ([+-]digits[.digits][e[+-]digits]) in [min,max]: no hex, inf or nan. */
cohort_status_t cohort_parse_double(const char *what, const char *text, double min, double max,
                                    double *out);
/* Size with optional K/M/G suffix (powers of 1024): "64M" -> 67108864. */
cohort_status_t cohort_parse_size(const char *what, const char *text, size_t *out);

/* COHORT_SOCKET_IFNAME grammar (NCCL's, plus CIDR):
 *   "eth,ib"          names starting with eth or ib
 *   "=eth0,=ens1f0"   exactly these names
 *   "^docker,lo"      anything except names starting with docker or lo
 *   "^=eth1"          anything except exactly eth1
 *   "10.0.0.0/8,192.168.1.0/24"  interfaces with an address in these networks (IPv4 or IPv6)
 * Prefix, exact and CIDR entries may be mixed in one list; the leading ^ applies to the list. */
#define COHORT_IFSPEC_MAX 16
typedef struct cohort_ifspec_entry {
    char name[32];               /* prefix or exact name; empty for a CIDR entry */
    int exact;
    int family;                  /* AF_INET / AF_INET6 for CIDR entries, 0 otherwise */
    unsigned char net[16];
    unsigned int prefix_len;
} cohort_ifspec_entry_t;
typedef struct cohort_ifspec {
    int exclude;                 /* list began with ^ */
    int count;
    cohort_ifspec_entry_t entries[COHORT_IFSPEC_MAX];
} cohort_ifspec_t;

cohort_status_t cohort_ifspec_parse(const char *what, const char *text, cohort_ifspec_t *spec);
/* addr: network byte order (4 or 16 bytes per family); may be NULL when family == 0. */
int cohort_ifspec_match(const cohort_ifspec_t *spec, const char *ifname, int family,
                        const void *addr);

/* Hostfiles (`host slots=N`, `host` alone means 1 slot, # comments, blank lines) and -H lists
 * (`host:slots,host,...`). */
typedef struct cohort_host_slots {
    char host[256];
    int slots;
    int max_slots;   /* hostfile `max_slots=N`: no more ranks even when oversubscribing; 0: none */
} cohort_host_slots_t;
/* *hosts is malloc'd (free it); *count entries. */
cohort_status_t cohort_hostfile_parse(const char *path, cohort_host_slots_t **hosts, int *count);
cohort_status_t cohort_hostfile_parse_text(const char *what, const char *text,
                                           cohort_host_slots_t **hosts, int *count);
cohort_status_t cohort_hostlist_parse(const char *text, cohort_host_slots_t **hosts, int *count);

/* COHORT_ALGO: "allreduce:ring;broadcast:tree" -> lookup per collective. Names in any case,
 * stored in lower case. */
#define COHORT_ALGO_MAX 16
typedef struct cohort_algo_spec {
    int count;
    struct { char coll[32]; char algo[32]; } entries[COHORT_ALGO_MAX];
} cohort_algo_spec_t;
cohort_status_t cohort_algo_spec_parse(const char *what, const char *text,
                                       cohort_algo_spec_t *spec);
/* The algorithm named for coll, or NULL. */
const char *cohort_algo_spec_get(const cohort_algo_spec_t *spec, const char *coll);

/* A text file that cohort reads whole: a regular file (or /dev/null, which reads as empty) of at
 * most max bytes without NUL bytes, so that /dev/zero, a FIFO or a huge file is refused rather
 * than read forever. 0 with *text (malloc'd, NUL-terminated: free it) and *len; otherwise an
 * errno value (ENOENT and the like from open; EINVAL: not a regular file; EFBIG: over max;
 * EILSEQ: a NUL byte; ENOMEM) and `why` says what is wrong in words that follow the file's name
 * ("is a directory, not a regular file"). Calls neither cohort_error nor the log: the settings
 * file is read with this under the lock the logger's own settings need. */
int cohort_file_read(const char *path, size_t max, char **text, size_t *len, char *why,
                     size_t whylen);
/* The same checks for a file another library reads (hwloc's XML): 0 or an errno value and why. */
int cohort_file_check(const char *path, size_t max, char *why, size_t whylen);

/* COHORT_TRANSPORTS: "shm,tcp" (allow list, order = preference) or "^verbs,ucx" (exclude).
 * Names in any case, stored in lower case. */
#define COHORT_TRANSPORT_LIST_MAX 16
typedef struct cohort_transport_list {
    int exclude;
    int count;
    char names[COHORT_TRANSPORT_LIST_MAX][32];
} cohort_transport_list_t;
cohort_status_t cohort_transport_list_parse(const char *what, const char *text,
                                            cohort_transport_list_t *list);

#endif
