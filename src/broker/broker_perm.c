/*
 * broker_perm: see broker_perm.h.
 */
#include "broker/broker_perm.h"

#include <stdbool.h>
#include <string.h>

#include "core/err.h"
#include "core/smap.h"

#define SETTINGS_MAP "broker.settings"
#define PERM_KEY "brokerPermission"
#define PROPERTY_FILTER_KEY "enablePropertyFilter"

/* {"v":N} or {"v":"N"}, as tables.set_setting writes it. */
static bool
setting_int(const char *text, size_t n, int32_t *out)
{
    const char *v = memmem(text, n, "\"v\":", 4);
    if (v == NULL)
        return false;
    v += 4;
    if (*v == '"')
        v++;
    int64_t x = 0;
    int digits = 0;
    while (*v >= '0' && *v <= '9' && digits < 10) {
        x = x * 10 + (*v++ - '0');
        digits++;
    }
    if (digits == 0 || x > INT32_MAX)
        return false;
    *out = (int32_t)x;
    return true;
}

int
broker_perm_init(struct broker_perm *bp, int32_t initial)
{
    bp->settings = smap_named(SETTINGS_MAP);
    if (bp->settings == NULL) {
        err_set("out of memory");
        return -1;
    }
    bp->perm = initial;
    bp->property_filter = false;
    /* Read the map on the first request. */
    bp->seen = smap_version(bp->settings) - 1;
    return 0;
}

int32_t
broker_perm_get(struct broker_perm *bp)
{
    uint64_t v = smap_version(bp->settings);
    if (v != bp->seen) {
        char text[64];
        long n = smap_get(bp->settings, PERM_KEY, sizeof(PERM_KEY) - 1, text,
                          sizeof(text) - 1);
        if (n >= 0 && n < (long)sizeof(text)) {
            text[n] = '\0';
            int32_t perm;
            if (setting_int(text, (size_t)n, &perm))
                bp->perm = perm;
        }
        n = smap_get(bp->settings, PROPERTY_FILTER_KEY, sizeof(PROPERTY_FILTER_KEY) - 1, text,
                     sizeof(text) - 1);
        if (n >= 0 && n < (long)sizeof(text)) {
            text[n] = '\0';
            if (strstr(text, "\"v\":true") != NULL)
                bp->property_filter = true;
            else if (strstr(text, "\"v\":false") != NULL)
                bp->property_filter = false;
        }
        bp->seen = v;
    }
    return bp->perm;
}

bool
broker_perm_property_filter(struct broker_perm *bp)
{
    (void)broker_perm_get(bp);
    return bp->property_filter;
}
