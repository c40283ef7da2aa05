/*
 * filter/record_match: a Lua pull filter (conf.pullFilters) judging commit
 * log records, as the store's get calls it (store/access.h
 * store_match_fn): the one place a record is shown to a Lua function.
 * The pull processor (broker/pull_processor.c) runs it inside its read;
 * st:get (lua/l_store.c) takes such a function too.
 *
 * The function is called as fn(properties, tags, bodySize [, body]) ->
 * keep, properties a {key = value} table of the record's properties, tags
 * its TAGS (or nil).  It runs under lua_pcall, so an error in it leaves no
 * pin behind; the record is then kept (nothing a consumer asked for is
 * lost to a broken filter) and the first error is kept for the caller to
 * log.  A compiled SQL92 filter may stand in for the function (sql).
 *
 * MT: the state's thread.
 */
#ifndef RMQ_RECORD_MATCH_H
#define RMQ_RECORD_MATCH_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "filter/sql92.h"

struct record_match {
    const struct sql92 *sql;    /* a compiled filter, or */
    lua_State *L;               /* a Lua function at stack index fn */
    int fn;
    bool body;                  /* pass the body to the function */
    int64_t calls, dropped, errors;
    int64_t nanos;              /* spent in the Lua function */
    char err[256];              /* the function's first error */
};

/**
 * Sets m up for the Lua function at idx (body: whether it gets the
 * body).  Pushes one value that must stay on the stack while m is used
 * (made now, so a call per record allocates nothing outside lua_pcall).
 * [-0, +1, m]
 */
void record_match_lua(struct record_match *m, lua_State *L, int idx, bool body);

/** Sets m up for a compiled SQL92 filter. */
void record_match_sql(struct record_match *m, const struct sql92 *sql);

/** store_match_fn over a struct record_match: keep the record? */
bool record_match(void *ud, const uint8_t *rec, size_t len);

#endif
