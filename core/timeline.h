/* SPDX-License-Identifier: BSD-3-Clause */
/* COHORT_TIMELINE: a Chrome trace (JSON, chrome://tracing and Perfetto) per process.
 *
 * One file per process ("%r" in the path becomes the rank of the first communicator that opens
 * it, the world rank under every launcher), shared by its communicators. Every event is one
 * write(2) of one line to a file opened O_APPEND: nothing is buffered, so a job that crashes
 * leaves every event it made, in an array whose closing "]" is missing (as the trace viewers
 * accept); at exit (atexit) the "]" is written, and the file is then strict JSON.
 *
 * Tracks (Chrome's threads) per communicator: "operations" (each collective or message as it
 * runs: algorithm, transport, sizes, fused requests, status), "requests" (each non-blocking
 * request from issue to completion) and "phases" (an algorithm's parts: a ring allreduce's
 * reduce-scatter and allgather, a hierarchical collective's node and cross-node steps).
 * Off (unset): one branch per event site, nothing else. */
#ifndef COHORT_CORE_TIMELINE_H
#define COHORT_CORE_TIMELINE_H

#include <stdint.h>
#include "cohort/cohort.h"

enum { COHORT_TL_OPS = 0, COHORT_TL_REQUESTS = 1, COHORT_TL_PHASES = 2 };

/* Opens (or joins) the process's timeline for comm when COHORT_TIMELINE is set; an error if the
 * file cannot be opened. */
cohort_status_t cohort_timeline_attach(cohort_comm_t *comm);
void cohort_timeline_detach(cohort_comm_t *comm);
/* 1 when comm writes a timeline (the one branch a disabled timeline costs). */
int cohort_timeline_on(const cohort_comm_t *comm);
uint64_t cohort_timeline_now(void);
/* A complete event ("ph":"X") on comm's track from t0 to t1 (cohort_timeline_now() values);
 * args: the inside of a JSON object (may be empty), already escaped. */
void cohort_timeline_event(cohort_comm_t *comm, int track, const char *name, uint64_t t0,
                           uint64_t t1, const char *args);
/* text made safe inside a JSON string (quotes, backslashes, control characters). */
void cohort_timeline_escape(char *out, size_t len, const char *text);

#endif
