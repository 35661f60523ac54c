/* SPDX-License-Identifier: BSD-3-Clause */
/* The rendezvous protocol's wire: the messages, the hello and its answer that its server
 * (core/rendezvous_server.c) and its client (core/rendezvous.c) both read and write. Internal
 * to those two files. */
#ifndef COHORT_CORE_RDV_WIRE_H
#define COHORT_CORE_RDV_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "core/hmac.h"
#include "core/rendezvous.h"

#define RDV_MAGIC 0x56524843u   /* "CHRV" */
#define RDV_VERSION 2u

enum { MSG_GATHER = 1, MSG_RESULT = 2, MSG_FAIL = 3, MSG_BYE = 4, MSG_QUERY = 5, MSG_MISSING = 6,
       MSG_NOTE = 7, MSG_STALL = 8, MSG_SHUTDOWN = 9, MSG_NOTICE = 10 };
#define NOTICE_HEAD 16   /* comm id (8), about (4), status (4), then the text */
#define NOTICE_MAX 65536u   /* and what a rank reads of a notice or a text from the server */

/* After the bootstrap, a FAIL's round field says what failed: bits 0-15 the rank it is about
 * plus one (0: none), bits 16-23 minus the status (rendezvous.h). */
static inline uint32_t fail_code(int about, cohort_status_t st)
{
    uint32_t a = about >= 0 && about < 65535 ? (uint32_t)about + 1 : 0;
    uint32_t s = st < 0 && st > -256 ? (uint32_t)-st : 0;
    return a | s << 16;
}

typedef struct rdv_hello {
    uint32_t magic, version;
    char job_id[COHORT_JOBID_MAX];
    int32_t rank, nranks;
    int32_t pid;
    char host[64];            /* for messages about this rank */
    unsigned char nonce[16];
    unsigned char mac[32];
} rdv_hello_t;

typedef struct rdv_ack {
    uint32_t magic;
    int32_t status;      /* ACK_OK, else why the hello was refused (ACK_*) */
    unsigned char mac[32];
} rdv_ack_t;

/* Why a hello was refused, for the client's message only: a refusal carries no MAC (the server
 * may not share the secret), so it is never trusted for anything but the wording. */
enum { ACK_OK = 0, ACK_REFUSED = -1, ACK_BAD_JOB = -2, ACK_BAD_MAC = -3, ACK_BAD_RANK = -4,
       ACK_DUPLICATE = -5 };

typedef struct rdv_hdr {
    uint32_t type, round;
    uint64_t nbytes;
} rdv_hdr_t;

static inline void hello_mac(const void *secret, size_t slen, const rdv_hello_t *h, unsigned char *out)
{
    cohort_hmac_sha256(secret, slen, h, offsetof(rdv_hello_t, mac), out);
}

static inline void ack_mac(const void *secret, size_t slen, const rdv_hello_t *h, unsigned char *out)
{
    unsigned char buf[3 + sizeof h->nonce + sizeof h->rank];
    memcpy(buf, "ack", 3);
    memcpy(buf + 3, h->nonce, sizeof h->nonce);
    memcpy(buf + 3 + sizeof h->nonce, &h->rank, sizeof h->rank);
    cohort_hmac_sha256(secret, slen, buf, sizeof buf, out);
}

/* A text payload of n bytes (its sender's NUL at the end) as a C string in out. */
static inline void text_of(const unsigned char *payload, uint64_t n, char *out, size_t len)
{
    snprintf(out, len, "%.*s", (int)(n ? (n - 1 < len ? n - 1 : len - 1) : 0),
             (const char *)payload);
}

#endif
