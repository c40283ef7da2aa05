/*
 * queue: an intrusive doubly linked list and container_of.  The list head
 * is a node whose next/prev point to itself when empty.
 */
#ifndef RMQ_QUEUE_H
#define RMQ_QUEUE_H

#include <stddef.h>

#define container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

struct qnode {
    struct qnode *next;
    struct qnode *prev;
};

static inline void
q_init(struct qnode *h)
{
    h->next = h->prev = h;
}

static inline int
q_empty(const struct qnode *h)
{
    return h->next == h;
}

static inline void
q_insert_tail(struct qnode *h, struct qnode *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

static inline void
q_remove(struct qnode *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

/* A removed or initialised node points to itself. */
static inline int
q_linked(const struct qnode *n)
{
    return n->next != n;
}

#define q_foreach_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
