/*
 * l_filter: the rmq.filter module (SQL92 filters, filter/sql92.h) and the
 * commit log matchers st:get uses for a compiled SQL92 filter or a Lua
 * pull filter function.
 */
#ifndef RMQ_L_FILTER_H
#define RMQ_L_FILTER_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "filter/sql92.h"

/** A matcher over commit log records: set up by lfilter_matcher(). */
struct lfilter_match {
    const struct sql92 *sql;    /* a compiled filter, or */
    lua_State *L;               /* a Lua function at stack index fn */
    int fn;
    bool body;                  /* pass the body to the function */
    int64_t calls, dropped, errors;
    int64_t nanos;              /* spent in the Lua function */
    char err[256];              /* the first error of the function */
};

/** The compiled filter at idx, or NULL when it is not one. */
struct sql92 *lfilter_test(lua_State *L, int idx);

/**
 * Fills m for the value at idx (a compiled filter or a function; body:
 * whether a function gets the body; for a function, one value is pushed
 * and must stay on the stack while m is used).  Returns false when idx
 * is neither.
 */
bool lfilter_matcher(lua_State *L, int idx, bool body, struct lfilter_match *m);

/** store_match_fn over an lfilter_match. */
bool lfilter_match(void *ud, const uint8_t *rec, size_t len);

#endif
