/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests for the plugin kit's request pieces (transports/common/kit_req.h): the free list
 * (reuse, zeroed as calloc, its cap, objects of another size around it, draining) and the FIFO
 * queues (order, an empty queue, cleared links) and lists (first in front, taken off from any
 * place). Under ASan a leak or a stale access fails. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "transports/common/kit_req.h"

typedef struct req {
    struct req *qnext;
    struct req *anext, *aprev;
    int id;
    char *msg;
    unsigned char body[40];
} req_t;

KIT_FIFO(q, req_t, qnext);
KIT_LIST(all, req_t, anext, aprev);

START_TEST(pool_reuses_zeroed)
{
    kit_pool_t p;
    kit_pool_init(&p, sizeof(req_t), 2);
    req_t *a = kit_pool_get(&p);
    ck_assert_ptr_nonnull(a);
    a->id = 7;
    a->qnext = a;
    memset(a->body, 0xab, sizeof a->body);
    kit_pool_put(&p, a);
    ck_assert_int_eq(p.n, 1);
    req_t *b = kit_pool_get(&p);
    ck_assert_ptr_eq(b, a);   /* the idle one, not a new one */
    ck_assert_int_eq(p.n, 0);
    req_t zero;
    memset(&zero, 0, sizeof zero);
    ck_assert_int_eq(memcmp(b, &zero, sizeof zero), 0);
    kit_pool_put(&p, b);
    kit_pool_drain(&p);
    ck_assert_int_eq(p.n, 0);
    ck_assert_ptr_null(p.head);
}
END_TEST

START_TEST(pool_cap_and_lifo)
{
    kit_pool_t p;
    kit_pool_init(&p, sizeof(req_t), 2);
    req_t *r[3];
    for (int i = 0; i < 3; i++) r[i] = kit_pool_get(&p);
    for (int i = 0; i < 3; i++) kit_pool_put(&p, r[i]);   /* the third is freed */
    ck_assert_int_eq(p.n, 2);
    ck_assert_ptr_eq(kit_pool_get(&p), r[1]);   /* last in, first out */
    ck_assert_ptr_eq(kit_pool_get(&p), r[0]);
    req_t *fresh = kit_pool_get(&p);           /* empty: calloc's */
    ck_assert_ptr_nonnull(fresh);
    free(r[0]);
    free(r[1]);
    kit_pool_put(&p, fresh);
    kit_pool_put(&p, NULL);   /* ignored */
    ck_assert_int_eq(p.n, 1);
    kit_pool_drain(&p);
}
END_TEST

START_TEST(pool_other_sizes_go_around)
{
    kit_pool_t p;
    kit_pool_init(&p, 64, 4);
    unsigned char *big = kit_pool_get_sized(&p, 256);
    ck_assert_ptr_nonnull(big);
    for (int i = 0; i < 256; i++) ck_assert_int_eq(big[i], 0);
    kit_pool_put_sized(&p, big, 256);   /* freed, not kept */
    ck_assert_int_eq(p.n, 0);
    unsigned char *s = kit_pool_get_sized(&p, 64);
    kit_pool_put_sized(&p, s, 64);
    ck_assert_int_eq(p.n, 1);
    unsigned char *b2 = kit_pool_get_sized(&p, 256);   /* not the idle 64-byte one */
    ck_assert_ptr_ne(b2, s);
    ck_assert_int_eq(p.n, 1);
    free(b2);
    kit_pool_drain(&p);
    kit_pool_init(&p, 1, 4);   /* smaller than the link: rounded up */
    ck_assert_uint_ge(p.size, sizeof(void *));
}
END_TEST

START_TEST(fifo_order)
{
    req_t r[3];
    memset(r, 0, sizeof r);
    req_t *h = NULL, *t = NULL;
    ck_assert_ptr_null(q_pop(&h, &t));
    for (int i = 0; i < 3; i++) {
        r[i].id = i;
        r[i].qnext = &r[2];   /* stale: push clears it */
        q_push(&h, &t, &r[i]);
    }
    ck_assert_ptr_eq(h, &r[0]);
    ck_assert_ptr_eq(t, &r[2]);
    ck_assert_ptr_null(r[2].qnext);
    for (int i = 0; i < 2; i++) {
        req_t *x = q_pop(&h, &t);
        ck_assert_int_eq(x->id, i);
        ck_assert_ptr_null(x->qnext);
    }
    q_push(&h, &t, &r[0]);   /* behind the one left */
    ck_assert_int_eq(q_pop(&h, &t)->id, 2);
    ck_assert_int_eq(q_pop(&h, &t)->id, 0);
    ck_assert_ptr_null(h);
    ck_assert_ptr_null(t);
    ck_assert_ptr_null(q_pop(&h, &t));
}
END_TEST

START_TEST(list_add_del)
{
    req_t r[3];
    memset(r, 0, sizeof r);
    req_t *h = NULL;
    for (int i = 0; i < 3; i++) {
        r[i].id = i;
        all_add(&h, &r[i]);
    }
    ck_assert_ptr_eq(h, &r[2]);   /* the last added, first */
    ck_assert_ptr_eq(r[2].anext, &r[1]);
    ck_assert_ptr_eq(r[1].aprev, &r[2]);
    all_del(&h, &r[1]);           /* the middle */
    ck_assert_ptr_eq(r[2].anext, &r[0]);
    ck_assert_ptr_eq(r[0].aprev, &r[2]);
    ck_assert_ptr_null(r[1].anext);
    ck_assert_ptr_null(r[1].aprev);
    all_del(&h, &r[2]);           /* the head */
    ck_assert_ptr_eq(h, &r[0]);
    ck_assert_ptr_null(r[0].aprev);
    all_del(&h, &r[0]);           /* the last one */
    ck_assert_ptr_null(h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kit_req");
    TCase *tc = tcase_create("kit_req");
    tcase_add_test(tc, pool_reuses_zeroed);
    tcase_add_test(tc, pool_cap_and_lifo);
    tcase_add_test(tc, pool_other_sizes_go_around);
    tcase_add_test(tc, fifo_order);
    tcase_add_test(tc, list_add_del);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
