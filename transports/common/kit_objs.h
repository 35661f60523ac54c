/* SPDX-License-Identifier: BSD-3-Clause */
/* The plugin kit (transports/common/, see kit_bytes.h): a plugin's endpoints and connections.
 * By the kit's convention (kit_fail.h relies on it too) an endpoint struct has ctx, host, rank,
 * nranks and comm_id, a connection struct ep, peer, connector and state, and both keep the
 * doubly-linked lists they are on (a context's endpoints, an endpoint's connections) in their
 * own `next` and `prev` fields, with a head pointer and no tail. Macros, since the structs are
 * the plugin's own types; their arguments are evaluated more than once, so pass plain lvalues
 * (ep->conns, c). Locking is the caller's (a context's list of endpoints is under its lock). */
#ifndef COHORT_KIT_OBJS_H
#define COHORT_KIT_OBJS_H

#include <stddef.h>

/* A new endpoint's fields from ep_open's arguments: its context and host table, and the
 * communicator's rank, nranks and comm_id (info, a cohort_ep_info_t *). */
#define KIT_EP_INIT(ep, ctx_, host_, info)  \
    do {                                    \
        (ep)->ctx = (ctx_);                 \
        (ep)->host = (host_);               \
        (ep)->rank = (info)->rank;          \
        (ep)->nranks = (info)->nranks;      \
        (ep)->comm_id = (info)->comm_id;    \
    } while (0)

/* A new connection's fields: its endpoint, the peer's rank, connector (1: this side called
 * connect, 0: accept) and its first state (the plugin's own "connecting"). It is on no list yet:
 * KIT_LIST_PUSH(ep->conns, c) puts it on the endpoint's. */
#define KIT_CONN_INIT(c, ep_, peer_, connector_, state_) \
    do {                                                 \
        (c)->ep = (ep_);                                 \
        (c)->peer = (peer_);                             \
        (c)->connector = (connector_);                   \
        (c)->state = (state_);                           \
    } while (0)

/* Puts node at the front of the list that head (an lvalue: the first node or NULL) starts,
 * linked through node's members nx and pv. */
#define KIT_LIST_PUSH_VIA(head, node, nx, pv)   \
    do {                                        \
        (node)->pv = NULL;                      \
        (node)->nx = (head);                    \
        if ((head) != NULL) (head)->pv = (node); \
        (head) = (node);                        \
    } while (0)

/* Takes node out of the list that head starts (node's own links are left as they were). */
#define KIT_LIST_UNLINK_VIA(head, node, nx, pv)                   \
    do {                                                          \
        if ((node)->pv != NULL) (node)->pv->nx = (node)->nx;      \
        else (head) = (node)->nx;                                 \
        if ((node)->nx != NULL) (node)->nx->pv = (node)->pv;      \
    } while (0)

/* The same through the convention's next and prev. */
#define KIT_LIST_PUSH(head, node) KIT_LIST_PUSH_VIA(head, node, next, prev)
#define KIT_LIST_UNLINK(head, node) KIT_LIST_UNLINK_VIA(head, node, next, prev)

#endif
