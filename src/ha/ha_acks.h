/*
 * ha_acks: which offset every named SyncStateSet member acknowledged
 * (allAckInSyncStateSet by name, ha_set_ack_peers).  Pure: no I/O, no
 * locks; the master's HA loop owns one and feeds it its connections.
 *
 * The list names members, not connections: ";"-separated members, each
 * the ","-separated "ip:port" names of its HA connections as the master
 * sees them ("absent:ID", or any name no connection has, for a member
 * without one).  A member counts once however many of its connections
 * are live: its acknowledgement is its newest connection's (see
 * ha_acks_low for why not the best one), and a member with no live
 * connection, or whose newest has not reported yet, holds every offset.
 *
 * Cost: parsing sorts the names once per list (O(n log n)); a
 * connection's member is a binary search (O(log n) in the names, however
 * the peers chose them), cached by the caller until the list changes;
 * a count is O(connections + members).
 *
 * MT: one thread per struct (the caller's lock or loop).
 */
#ifndef RMQ_HA_ACKS_H
#define RMQ_HA_ACKS_H

#include <stdbool.h>
#include <stdint.h>

#define HA_ACKS_TEXT_MAX 4096           /* the list, bytes (with its NUL) */
#define HA_ACKS_NAMES_MAX 512           /* connection names in one list */
#define HA_ACKS_MEMBERS_MAX 256         /* members in one list */

struct ha_acks_name {
    uint16_t off;                       /* into text, NUL-terminated */
    uint16_t member;
};

struct ha_acks {
    char text[HA_ACKS_TEXT_MAX];        /* the list, separators made NULs */
    struct ha_acks_name names[HA_ACKS_NAMES_MAX];   /* sorted by name */
    int nnames;
    int nmembers;                       /* 0: no list (nothing named) */
    bool refused;                       /* a list that cannot be honoured:
                                           nothing counts (ha_acks_low -1) */
    /* the count (ha_acks_reset / ha_acks_add), per member */
    uint64_t seq[HA_ACKS_MEMBERS_MAX];
    int64_t ack[HA_ACKS_MEMBERS_MAX];
};

/**
 * Parses list (";"/","-separated as above, spaces and empty items
 * ignored).  "" = no members.  A list with more than the maxima, or
 * naming one connection for two members (one connection would stand in
 * for both), is kept as refused: nothing counts until the next list.
 * Returns 0, or -1 with err_set() saying why (refused).
 */
int ha_acks_parse(struct ha_acks *a, const char *list);

/** The member a connection named peer belongs to, or -1. */
int ha_acks_member(const struct ha_acks *a, const char *peer);

/** Starts a count: no member has a connection. */
void ha_acks_reset(struct ha_acks *a);

/**
 * One live connection of member (ha_acks_member's; -1 is ignored): seq
 * larger = accepted later (> 0), ack its last acknowledged offset (-1
 * none yet).
 */
void ha_acks_add(struct ha_acks *a, int member, uint64_t seq, int64_t ack);

/**
 * The offset every member acknowledged since ha_acks_reset: for each
 * member the ack of its connection with the largest seq; the smallest of
 * those.  -1 when a member had no connection added, its newest has not
 * acknowledged anything, the list is refused, or it names no member.
 */
int64_t ha_acks_low(const struct ha_acks *a);

#endif
