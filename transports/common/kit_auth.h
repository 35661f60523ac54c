/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): authentication helpers. The MACs
 * themselves come from the core (host->auth, HMAC-SHA256 keyed with the job's secret); comparing
 * one must not tell an attacker, by its timing, how many leading bytes were right.
 *
 * One form for every handshake of the in-tree transports: a frame is its fields, starting with a
 * magic number or label that names the frame's kind, then host->auth's MAC over them
 * (kit_frame_seal, kit_frame_valid: ucx's hello, ack and closing notice, verbs' hello, tcp's
 * hello). A reply is sealed to the frame it answers (kit_frame_seal_to, kit_frame_valid_to: its
 * MAC covers its own fields followed by the bytes of that frame, so it proves it answers that
 * frame's fresh nonce: tcp's ack, shm's hello). A MAC over values that no frame carries as bytes
 * (shm's segment header, which lives in shared memory in host order) goes over a list of parts
 * (kit_mac_parts, kit_mac_parts_valid), again led by a magic or label.
 *
 * All of them share one key, so the rule that keeps one kind's MAC from passing for another's:
 * every kind's MAC input starts with its own magic or label (no two kinds of the whole library
 * share leading bytes), and a kind's magic fixes the length of its fields and of the frame it is
 * bound to, so the concatenations are never ambiguous. (The identity hashes that are no
 * handshake, tcp's job hash and network namespace id and ucx's job and host ids, lead with labels
 * of their own too.) core/rendezvous.c (with core/rdv_wire.h: magic "CHRV", and "ack")
 * authenticates its own hello and ack with the core's HMAC directly: it is the core, not a
 * plugin, and does not use the kit. */
#ifndef COHORT_KIT_AUTH_H
#define COHORT_KIT_AUTH_H

#include <cohort/plugin.h>

#include <stddef.h>
#include <string.h>

/* 1 when the n bytes at a and b are equal; the time taken does not depend on where they
 * differ. */
static inline int kit_ct_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

#define KIT_MAC_LEN 32
/* The longest MAC input kit_mac_parts (and so kit_frame_seal_to) puts together: host->auth
 * takes one buffer, so the parts are copied into one on the stack. */
#define KIT_MAC_INPUT_MAX 1024

/* One piece of a MAC input: n bytes at p. */
typedef struct kit_part {
    const void *p;
    size_t n;
} kit_part_t;

/* host->auth's MAC over the parts one after the other: 0, or -1 (and out all zero, which no
 * comparison with kit_mac_parts_valid accepts) when together they are longer than
 * KIT_MAC_INPUT_MAX. The first part should be the magic or label of the MAC's kind. */
static inline int kit_mac_parts(const cohort_host_v1_t *host, const kit_part_t *parts,
                                size_t nparts, unsigned char out[KIT_MAC_LEN])
{
    unsigned char in[KIT_MAC_INPUT_MAX];
    size_t len = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].n > sizeof in - len) {
            memset(out, 0, KIT_MAC_LEN);
            return -1;
        }
        if (parts[i].n) memcpy(in + len, parts[i].p, parts[i].n);
        len += parts[i].n;
    }
    host->auth(in, len, out);
    return 0;
}

/* 1 when mac is host->auth's MAC over the parts (compared in constant time); 0 otherwise, also
 * when the parts are too long for kit_mac_parts. */
static inline int kit_mac_parts_valid(const cohort_host_v1_t *host, const kit_part_t *parts,
                                      size_t nparts, const unsigned char mac[KIT_MAC_LEN])
{
    unsigned char want[KIT_MAC_LEN];
    if (kit_mac_parts(host, parts, nparts, want) != 0) return 0;
    return kit_ct_equal(want, mac, KIT_MAC_LEN);
}

/* An authenticated frame: its fields, then host->auth's MAC over them (the last KIT_MAC_LEN of
 * its len bytes). The fields should start with a magic number naming the frame's kind, and hold
 * whatever makes a replay elsewhere useless (job, communicator, both ranks). */
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

/* A reply sealed to the frame it answers (the challenge, blen bytes at bound, which holds the
 * challenger's fresh nonce): the reply's last KIT_MAC_LEN bytes become host->auth's MAC over its
 * fields followed by the bound bytes, so the reply cannot be replayed to another challenge. The
 * fields and the bound frame together must fit KIT_MAC_INPUT_MAX: a reply that does not gets a
 * MAC of all zeros, which kit_frame_valid_to never accepts; returns 0, or -1 then. */
static inline int kit_frame_seal_to(const cohort_host_v1_t *host, unsigned char *frame,
                                    size_t len, const unsigned char *bound, size_t blen)
{
    const kit_part_t parts[2] = { { frame, len - KIT_MAC_LEN }, { bound, blen } };
    return kit_mac_parts(host, parts, 2, frame + len - KIT_MAC_LEN);
}

/* 1 when the reply's MAC is the one kit_frame_seal_to gives it for the bound frame (compared in
 * constant time); 0 otherwise, also for a reply too short to hold a MAC. */
static inline int kit_frame_valid_to(const cohort_host_v1_t *host, const unsigned char *frame,
                                     size_t len, const unsigned char *bound, size_t blen)
{
    if (len < KIT_MAC_LEN) return 0;
    const kit_part_t parts[2] = { { frame, len - KIT_MAC_LEN }, { bound, blen } };
    return kit_mac_parts_valid(host, parts, 2, frame + len - KIT_MAC_LEN);
}

#endif /* COHORT_KIT_AUTH_H */
