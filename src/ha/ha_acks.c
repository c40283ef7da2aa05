/* ha_acks: see ha_acks.h. */
#include "ha/ha_acks.h"

#include <stdlib.h>
#include <string.h>

#include "core/err.h"

/* qsort's and bsearch's comparison need the text: the names are sorted
 * by a pass of insertion sort instead (at most HA_ACKS_NAMES_MAX, once
 * per list) and searched by hand. */
static int
name_cmp(const struct ha_acks *a, const struct ha_acks_name *x, const struct ha_acks_name *y)
{
    return strcmp(a->text + x->off, a->text + y->off);
}

static void
refuse(struct ha_acks *a)
{
    a->refused = true;
    a->nnames = 0;
}

int
ha_acks_parse(struct ha_acks *a, const char *list)
{
    a->nnames = a->nmembers = 0;
    a->refused = false;
    size_t len = strlen(list);
    if (len >= sizeof(a->text)) {
        refuse(a);
        err_set("the list of acknowledging members is %zu bytes, past %d", len, HA_ACKS_TEXT_MAX - 1);
        return -1;
    }
    /* Copy without spaces, every separator a NUL; names recorded as they
     * start, members counted at their first name. */
    size_t n = 0;
    bool in_name = false, member_open = false;
    for (size_t i = 0; i <= len; i++) {
        char ch = list[i];
        if (ch == ' ')
            continue;
        if (ch == ';' || ch == ',' || ch == '\0') {
            if (in_name) {
                a->text[n++] = '\0';
                in_name = false;
            }
            if (ch != ',')
                member_open = false;
            continue;
        }
        if (!in_name) {
            if (a->nnames >= HA_ACKS_NAMES_MAX) {
                refuse(a);
                err_set("the list of acknowledging members names more than %d connections",
                        HA_ACKS_NAMES_MAX);
                return -1;
            }
            if (!member_open) {
                if (a->nmembers >= HA_ACKS_MEMBERS_MAX) {
                    refuse(a);
                    err_set("the list of acknowledging members has more than %d members",
                            HA_ACKS_MEMBERS_MAX);
                    return -1;
                }
                a->nmembers++;
                member_open = true;
            }
            a->names[a->nnames].off = (uint16_t)n;
            a->names[a->nnames].member = (uint16_t)(a->nmembers - 1);
            a->nnames++;
            in_name = true;
        }
        a->text[n++] = ch;
    }
    /* Insertion sort by name (a list changes when a member joins or
     * leaves: a few a second at most). */
    for (int i = 1; i < a->nnames; i++) {
        struct ha_acks_name x = a->names[i];
        int j = i - 1;
        while (j >= 0 && name_cmp(a, &a->names[j], &x) > 0) {
            a->names[j + 1] = a->names[j];
            j--;
        }
        a->names[j + 1] = x;
    }
    /* One connection named for two members would count for both: the
     * list contradicts itself (the broker's map of connections to
     * members is stale), so nothing counts until the next one. */
    for (int i = 1; i < a->nnames; i++) {
        if (name_cmp(a, &a->names[i - 1], &a->names[i]) == 0 &&
            a->names[i - 1].member != a->names[i].member) {
            refuse(a);
            err_set("connection %s is named for two members", a->text + a->names[i].off);
            return -1;
        }
    }
    return 0;
}

int
ha_acks_member(const struct ha_acks *a, const char *peer)
{
    int lo = 0, hi = a->nnames - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(a->text + a->names[mid].off, peer);
        if (c == 0)
            return a->names[mid].member;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

void
ha_acks_reset(struct ha_acks *a)
{
    for (int m = 0; m < a->nmembers && m < HA_ACKS_MEMBERS_MAX; m++) {
        a->seq[m] = 0;
        a->ack[m] = -1;
    }
}

/* Each member's newest connection, not its best one.  Two live
 * connections of one member are a reconnect whose old connection the
 * master has not seen close yet (a half-open TCP connection: the slave's
 * host rebooted, a partition).  The old one's ack was sent by a process,
 * or of a log, that may be gone: a slave acknowledges what it appended,
 * not what it flushed, and a restarted slave recovers, and reports on its
 * new connection, only what reached its disk (or what is left after an
 * epoch truncation).  Counting the best of the two could acknowledge
 * bytes the member no longer holds, which a clean election of that
 * member would then lose.  The newest connection's first report is where
 * the member's log ends now; it only ever goes up from there.  (The
 * cost: until the new connection reports, about one round trip, the
 * member holds every send.) */
void
ha_acks_add(struct ha_acks *a, int member, uint64_t seq, int64_t ack)
{
    if (a->refused || member < 0 || member >= a->nmembers)
        return;
    if (seq > a->seq[member]) {
        a->seq[member] = seq;
        a->ack[member] = ack;
    }
}

int64_t
ha_acks_low(const struct ha_acks *a)
{
    if (a->refused || a->nmembers == 0)
        return -1;
    int64_t low = -1;
    for (int m = 0; m < a->nmembers; m++) {
        if (a->seq[m] == 0 || a->ack[m] < 0)
            return -1;   /* a member without a live connection, or silent */
        low = low < 0 || a->ack[m] < low ? a->ack[m] : low;
    }
    return low;
}
