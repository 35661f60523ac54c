/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): authentication helpers. The MACs
 * themselves come from the core (host->auth); comparing one must not tell an attacker, by its
 * timing, how many leading bytes were right. tcp and shm MAC a labelled input of their own
 * (the peer's nonce, which the frame does not carry); ucx and verbs seal frames with a trailing
 * MAC (kit_frame_seal, kit_frame_valid). */
#ifndef COHORT_KIT_AUTH_H
#define COHORT_KIT_AUTH_H

#include <cohort/plugin.h>

#include <stddef.h>

/* 1 when the n bytes at a and b are equal; the time taken does not depend on where they
 * differ. */
static inline int kit_ct_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* An authenticated frame: its fields, then host->auth's MAC over them (the last KIT_MAC_LEN of
 * its len bytes). The fields should start with a magic number naming the frame's kind, and hold
 * whatever makes a replay elsewhere useless (job, communicator, both ranks). */
#define KIT_MAC_LEN 32

static inline void kit_frame_seal(const cohort_host_v1_t *host, unsigned char *frame, size_t len)
{
    host->auth(frame, len - KIT_MAC_LEN, frame + len - KIT_MAC_LEN);
}

/* 1 when the frame's MAC is the one this job's secret gives its fields (compared in constant
 * time); 0 otherwise, also for a frame too short to hold a MAC. */
static inline int kit_frame_valid(const cohort_host_v1_t *host, const unsigned char *frame,
                                  size_t len)
{
    unsigned char mac[KIT_MAC_LEN];
    if (len < KIT_MAC_LEN) return 0;
    host->auth(frame, len - KIT_MAC_LEN, mac);
    return kit_ct_equal(mac, frame + len - KIT_MAC_LEN, KIT_MAC_LEN);
}

#endif /* COHORT_KIT_AUTH_H */
