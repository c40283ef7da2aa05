/* wcache: the bounded cache with waiters that the proxy's route cache
 * and group-config cache are (core/wcache.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/wcache.h"

struct ent {
    struct wcache_ent ent;
    bool fetching;
    char *held;                /* freed by clear */
};

struct wt {
    struct wcache_waiter w;
    int id;
};

static int cleared;

static bool
ent_busy(const struct wcache_ent *e)
{
    return ((const struct ent *)e)->fetching;
}

static void
ent_clear(struct wcache_ent *e)
{
    free(((struct ent *)e)->held);
    cleared++;
}

static const struct wcache_ops ops = { ent_busy, ent_clear };

static struct ent *
add(struct wcache *c, const char *key)
{
    struct ent *e = (struct ent *)wcache_find_or_add(c, key);
    if (e != NULL && e->held == NULL)
        e->held = strdup(key);
    return e;
}

/* Keys in the idle list's order (least recently used first). */
static void
idle_order(const struct wcache *c, char *out, size_t cap)
{
    out[0] = '\0';
    const struct qnode *pos;
    for (pos = c->idle.next; pos != &c->idle; pos = pos->next) {
        const struct wcache_ent *e = container_of(pos, struct wcache_ent, link);
        strncat(out, wcache_key(e), cap - strlen(out) - 1);
    }
}

/* Full, the least recently used goes: using one (touch) makes it the
 * most recently used; one being filled is passed over. */
static void
evicts_least_recently_used(void **state)
{
    (void)state;
    struct wcache c;
    char order[64];
    cleared = 0;
    wcache_init(&c, sizeof(struct ent), 3, 4, &ops);
    struct ent *a = add(&c, "a"), *b = add(&c, "b");
    assert_non_null(add(&c, "c"));
    assert_ptr_equal(add(&c, "a"), a);   /* found, not made again */
    assert_int_equal(wcache_size(&c), 3);
    wcache_touch(&c, &a->ent, 10);
    assert_int_equal(a->ent.used_ms, 10);
    idle_order(&c, order, sizeof(order));
    assert_string_equal(order, "bca");
    b->fetching = true;
    assert_non_null(add(&c, "d"));       /* c goes: b is busy */
    assert_null(wcache_get(&c, "c"));
    assert_ptr_equal(wcache_get(&c, "b"), &b->ent);
    assert_int_equal(cleared, 1);
    idle_order(&c, order, sizeof(order));
    assert_string_equal(order, "bad");
    wcache_free(&c);
    assert_int_equal(cleared, 4);
}

/* An entry with waiters is neither evicted nor expired; the cache full
 * of such (or busy) entries refuses a new key; the waiters come back in
 * their order and count until popped. */
static void
waiters_hold_an_entry(void **state)
{
    (void)state;
    struct wcache c;
    struct wt w[3];
    cleared = 0;
    wcache_init(&c, sizeof(struct ent), 2, 4, &ops);
    struct ent *a = add(&c, "a"), *b = add(&c, "b");
    for (int i = 0; i < 3; i++) {
        w[i].id = i;
        wcache_wait(&c, &a->ent, &w[i].w);
    }
    assert_int_equal(c.nwaiting, 3);
    b->fetching = true;
    assert_null(add(&c, "c"));           /* a waited on, b busy: full */
    assert_int_equal(wcache_size(&c), 2);
    /* Expiry passes them over too. */
    assert_int_equal(wcache_expire(&c, 1000000, 1), 0);
    b->fetching = false;
    assert_int_equal(wcache_expire(&c, 1000000, 1), 1);   /* b */
    assert_null(wcache_get(&c, "b"));

    struct wcache_waiter *list = wcache_take_waiters(&c, &a->ent);
    assert_null(a->ent.waiters);
    assert_null(wcache_take_waiters(&c, &a->ent));
    assert_int_equal(c.nwaiting, 3);     /* until popped */
    for (int i = 0; i < 3; i++) {
        struct wcache_waiter *p = wcache_pop(&c, &list);
        assert_ptr_equal(p, &w[i].w);
        assert_int_equal(c.nwaiting, 2 - i);
    }
    assert_null(wcache_pop(&c, &list));
    /* Taken, a is idle again: it may go. */
    assert_non_null(add(&c, "c"));
    assert_non_null(add(&c, "d"));
    assert_null(wcache_get(&c, "a"));
    /* A waiter added while a list is out lands on the entry, not the list. */
    struct ent *d = (struct ent *)wcache_get(&c, "d");
    wcache_wait(&c, &d->ent, &w[0].w);
    list = wcache_take_waiters(&c, &d->ent);
    wcache_wait(&c, &d->ent, &w[1].w);
    assert_ptr_equal(wcache_pop(&c, &list), &w[0].w);
    assert_null(list);
    assert_ptr_equal(d->ent.waiters, &w[1].w);
    assert_int_equal(c.nwaiting, 1);
    list = wcache_take_waiters(&c, &d->ent);
    (void)wcache_pop(&c, &list);
    wcache_free(&c);
}

/* Expiry removes the unused, oldest first, and stops at the first one
 * used since; wcache_remove takes one out at once. */
static void
expires_oldest_first(void **state)
{
    (void)state;
    struct wcache c;
    char key[16], order[64];
    cleared = 0;
    wcache_init(&c, sizeof(struct ent), 100, 4, &ops);
    for (int i = 0; i < 10; i++) {
        (void)snprintf(key, sizeof(key), "%d", i);
        wcache_touch(&c, &add(&c, key)->ent, (uint64_t)(100 * i));
    }
    /* At 1000, unused for 500 ms or more: 0..5. */
    assert_int_equal(wcache_expire(&c, 1000, 500), 6);
    idle_order(&c, order, sizeof(order));
    assert_string_equal(order, "6789");
    wcache_touch(&c, wcache_get(&c, "6"), 2000);
    wcache_remove(&c, wcache_get(&c, "8"));
    idle_order(&c, order, sizeof(order));
    assert_string_equal(order, "796");
    assert_int_equal(cleared, 7);
    assert_int_equal(wcache_expire(&c, 2100, 500), 2);
    assert_int_equal(wcache_size(&c), 1);
    wcache_free(&c);
    assert_int_equal(cleared, 10);
}

/* Many keys through a small cache: it never holds more than its bound,
 * and what it holds are the most recently used. */
static void
bounded_under_many_keys(void **state)
{
    (void)state;
    struct wcache c;
    char key[32];
    cleared = 0;
    wcache_init(&c, sizeof(struct ent), 50, 4, &ops);
    for (int i = 0; i < 20000; i++) {
        (void)snprintf(key, sizeof(key), "topic-%d", i);
        struct ent *e = add(&c, key);
        assert_non_null(e);
        wcache_touch(&c, &e->ent, (uint64_t)i);
        assert_true(wcache_size(&c) <= 50);
    }
    for (int i = 20000 - 50; i < 20000; i++) {
        (void)snprintf(key, sizeof(key), "topic-%d", i);
        assert_non_null(wcache_get(&c, key));
    }
    assert_int_equal(cleared, 20000 - 50);
    wcache_free(&c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(evicts_least_recently_used),
        cmocka_unit_test(waiters_hold_an_entry),
        cmocka_unit_test(expires_oldest_first),
        cmocka_unit_test(bounded_under_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
