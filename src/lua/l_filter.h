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

#include "filter/record_match.h"
#include "filter/sql92.h"

/** The compiled filter at idx, or NULL when it is not one. */
struct sql92 *lfilter_test(lua_State *L, int idx);

/**
 * Fills m (record_match's, filter/record_match.h) for the value at idx:
 * a compiled filter or a function (body: whether a function gets the
 * body; for a function, one value is pushed and must stay on the stack
 * while m is used).  Returns false when idx is neither.
 */
bool lfilter_matcher(lua_State *L, int idx, bool body, struct record_match *m);

#endif
