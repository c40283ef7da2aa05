/* readers: the commit log positions consumers and slaves read at (see readers.h). */
#include "store/readers.h"

void
readers_init(struct readers *r, struct cqtable *cqs, int64_t keep_ms)
{
    r->cqs = cqs;
    r->keep_ms = keep_ms > 0 ? keep_ms : 0;
    atomic_init(&r->epoch, 0);
    atomic_init(&r->ha[0], INT64_MAX);
    atomic_init(&r->ha[1], INT64_MAX);
    atomic_init(&r->floor, INT64_MAX);
    atomic_init(&r->below, false);
    r->epoch_ms = 0;
    r->floor_ms = 0;
}

struct walk {
    unsigned reset;             /* the slot a new epoch clears; 2: none */
    int64_t low;
};

static int
walk_one(struct cq *c, void *arg)
{
    struct walk *w = arg;
    if (w->reset < 2)
        atomic_store_explicit(&c->rd[w->reset], INT64_MAX, memory_order_relaxed);
    int64_t a = atomic_load_explicit(&c->rd[0], memory_order_relaxed);
    int64_t b = atomic_load_explicit(&c->rd[1], memory_order_relaxed);
    if (a < w->low)
        w->low = a;
    if (b < w->low)
        w->low = b;
    return 0;
}

int64_t
readers_floor(struct readers *r, int64_t now_ms)
{
    if (r->keep_ms <= 0)
        return INT64_MAX;
    if (r->floor_ms != 0 && now_ms - r->floor_ms < READERS_EVERY_MS &&
        !atomic_exchange_explicit(&r->below, false, memory_order_relaxed))
        return atomic_load_explicit(&r->floor, memory_order_relaxed);
    atomic_store_explicit(&r->below, false, memory_order_relaxed);
    if (r->epoch_ms == 0)
        r->epoch_ms = now_ms;
    struct walk w = { 2, INT64_MAX };
    uint32_t e = atomic_load_explicit(&r->epoch, memory_order_relaxed);
    if (now_ms - r->epoch_ms >= r->keep_ms) {
        /* The slot of the epoch before the current one is cleared first,
         * then the readers move to it: a read that raced the switch
         * lands in a slot still counted (the one just left). */
        w.reset = (e + 1) & 1;
        atomic_store_explicit(&r->ha[w.reset], INT64_MAX, memory_order_relaxed);
    }
    (void)cqt_foreach(r->cqs, walk_one, &w);
    if (w.reset < 2) {
        atomic_store_explicit(&r->epoch, e + 1, memory_order_release);
        r->epoch_ms = now_ms;
    }
    for (int i = 0; i < 2; i++) {
        int64_t h = atomic_load_explicit(&r->ha[i], memory_order_relaxed);
        if (h < w.low)
            w.low = h;
    }
    atomic_store_explicit(&r->floor, w.low, memory_order_relaxed);
    r->floor_ms = now_ms;
    return w.low;
}
