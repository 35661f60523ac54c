/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/): what every in-tree transport shares and an out-of-tree
 * one may copy. It is not part of the plugin ABI (include/cohort/plugin.h is): a plugin built
 * against one version of the kit keeps working with any core. Header-only, static inline: it
 * adds no exported symbol to a plugin.
 *
 * Byte order of the wire formats that cross machines (hellos, address blobs, headers). Every
 * format has one order, written explicitly, whatever the host: tcp, ucx and shm write
 * little-endian, verbs big-endian (network order, as InfiniBand's own headers). */
#ifndef COHORT_KIT_BYTES_H
#define COHORT_KIT_BYTES_H

#include <stdint.h>

static inline void kit_put_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void kit_put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void kit_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t kit_get_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t kit_get_le32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t kit_get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline void kit_put_be32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static inline void kit_put_be64(unsigned char *p, uint64_t v)
{
    kit_put_be32(p, (uint32_t)(v >> 32));
    kit_put_be32(p + 4, (uint32_t)v);
}
static inline uint32_t kit_get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t kit_get_be64(const unsigned char *p)
{
    return ((uint64_t)kit_get_be32(p) << 32) | kit_get_be32(p + 4);
}

#endif
