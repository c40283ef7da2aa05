/* errinj: the injection point table (see errinj.h). */
#include "core/errinj.h"

#include <stdatomic.h>
#include <string.h>

/* Process-wide on purpose (see errinj.h); zero-initialised = all off. */
static _Atomic int64_t errinj_values[ERRINJ_COUNT];

static const char *const errinj_names[ERRINJ_COUNT] = {
#define ERRINJ_NAME(id, name, doc) name,
    ERRINJ_LIST(ERRINJ_NAME)
#undef ERRINJ_NAME
};

int64_t
errinj_get(enum errinj_id id)
{
    return atomic_load_explicit(&errinj_values[id], memory_order_relaxed);
}

void
errinj_set(enum errinj_id id, int64_t value)
{
    atomic_store_explicit(&errinj_values[id], value, memory_order_relaxed);
}

int
errinj_find(const char *name)
{
    for (int i = 0; i < ERRINJ_COUNT; i++)
        if (strcmp(errinj_names[i], name) == 0)
            return i;
    return -1;
}

const char *
errinj_name(int id)
{
    return id >= 0 && id < ERRINJ_COUNT ? errinj_names[id] : "";
}
