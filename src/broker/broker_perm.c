/*
 * broker_perm: see broker_perm.h.
 */
#include "broker/broker_perm.h"

#include <string.h>

int
broker_perm_init(struct broker_perm *bp, int32_t initial)
{
    memset(bp, 0, sizeof(*bp));
    bp->perm = initial;
    bp->perm_now = initial;
    return 0;
}

static void
refresh(struct broker_perm *bp)
{
    if (!bsettings_refresh(&bp->view))
        return;
    const struct bsettings_values *v = &bp->view.v;
    bp->perm_now = (int32_t)bsettings_get(v, BSET_BROKER_PERMISSION, bp->perm);
    bp->property_filter_now = bsettings_get(v, BSET_PROPERTY_FILTER, bp->property_filter) != 0;
}

int32_t
broker_perm_get(struct broker_perm *bp)
{
    refresh(bp);
    return bp->perm_now;
}

bool
broker_perm_property_filter(struct broker_perm *bp)
{
    refresh(bp);
    return bp->property_filter_now;
}
