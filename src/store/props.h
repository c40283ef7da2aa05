/*
 * props: a message's properties string (protocol.md §5.4), the one home
 * of its rules for the store, the broker and (through rmq.message) the
 * Lua side.
 *
 * FORMAT.  Pairs `key 0x01 value` joined by 0x02, no trailing separator
 * (as Java's messageProperties2String writes them).  Reading follows
 * Java's string2messageProperties: the string is split at every 0x02; a
 * segment is a pair when it has a non-empty key before its first 0x01
 * and a non-empty value after it (the value may hold further 0x01
 * bytes); other segments are dropped; when a key repeats, the last pair
 * wins (a HashMap put).
 *
 * MT: pure functions, any thread.
 */
#ifndef RMQ_PROPS_H
#define RMQ_PROPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define PROPS_NAME_VALUE_SEP '\001'   /* MessageDecoder.NAME_VALUE_SEPARATOR */
#define PROPS_SEP '\002'              /* MessageDecoder.PROPERTY_SEPARATOR */
#define PROPS_DELAY_MAX 1000          /* a DELAY level is capped before this */
#define PROPS_EDITS_MAX 64            /* edits in one props_edit() */

/** One pair: pointers into the properties string. */
struct prop {
    const char *k;
    size_t klen;
    const char *v;             /* NULL in an edit: remove the key */
    size_t vlen;
};

/**
 * The next pair Java keeps at or after *pos (start with *pos = 0), in
 * stored order, duplicates included; *pos moves past it.  Returns false
 * at the end.
 */
bool props_next(const char *p, size_t n, size_t *pos, struct prop *kv);

/**
 * The value of `key` (Java's getProperty: the last pair with that key
 * wins) and its length, or NULL.
 */
const char *props_find(const char *p, size_t n, const char *key,
                       size_t *vlen);

/** props_find() with a key of klen bytes. */
const char *props_findn(const char *p, size_t n, const char *key,
                        size_t klen, size_t *vlen);

/**
 * The delay level of a DELAY value as the store reads it: its leading
 * digits (0 when there are none), growing no further once >= 1000.
 */
int props_delay_level(const char *v, size_t n);

/*
 * The writers below append pairs to the properties string being built in
 * `out` (empty to start): a 0x02 goes before a pair unless out is empty.
 */

/** Appends one pair.  Returns 0 or -ENOMEM. */
int props_put(struct buf *out, const char *k, size_t klen, const char *v,
              size_t vlen);

/**
 * Writes p with `n_edits` edits applied: each edit
 * sets its key to its value (v != NULL), the first pair with that key
 * taking the new value in place and later ones dropped, or appended
 * after the others (in edit order) when p has none; or removes every
 * pair with its key (v == NULL).  The pairs of p that no edit names are
 * kept as stored; segments Java would drop are dropped.  An edit with an
 * empty key, two edits of one key, or more than PROPS_EDITS_MAX edits
 * are refused.  Returns 0, -EINVAL
 * (err_set names the edit) or -ENOMEM.
 */
int props_edit(struct buf *out, const char *p, size_t n,
               const struct prop *edits, int n_edits);

/** What a send's properties tell the broker (props_for_store). */
struct props_send {
    const char *tags;          /* the TAGS value, or NULL */
    size_t tags_len;
    bool wait;                 /* WAIT is not "false": wait for the flush */
    int delay;                 /* props_delay_level(DELAY), 0 when absent */
    bool prepared;             /* TRAN_MSG is "true" (any case): a half message */
    bool timer;                /* a TIMER_* key is set: timer_classify() decides */
};

/**
 * The properties string a 4.9.8 broker stores for a send, in one pass
 * over the producer's: pairs Java drops are dropped, WAIT too unless
 * keep_wait, any CLUSTER replaced by CLUSTER = cluster at the end.  The
 * facts are read on the way into *facts.  Returns 0 or -ENOMEM.
 */
int props_for_store(struct buf *out, const char *p, size_t n,
                    const char *cluster, size_t cluster_len, bool keep_wait,
                    struct props_send *facts);

#endif
