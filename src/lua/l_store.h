/*
 * l_store: the rmq.store module (see l_store.c for the Lua API).  This
 * header is for C code that works with its values: a pull handler that
 * sends a get's records to a socket without copying (the records
 * userdata holds iovecs into the mapped commit log files, which stay
 * mapped while the userdata lives or until :release()), and C code that
 * needs a handle's store.
 */
#ifndef RMQ_L_STORE_H
#define RMQ_L_STORE_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/access.h"

#define LSTORE_RECORDS_TYPE "rmq.store.records"

struct lrecords {
    struct store_slices sl;     /* iov and pins point into this block */
};

/** The records userdata at idx, or raises. [-0, +0, v] */
struct lrecords *lstore_check_records(lua_State *L, int idx);

/**
 * The store of the open store handle at idx (raises if it is not one or
 * is closed); *store_host (if not NULL) gets its default STOREHOST.
 * [-0, +0, v]
 */
struct store *lstore_check(lua_State *L, int idx, struct host_addr *store_host);

/**
 * Option readers: table t's field k as an integer / boolean (def when
 * absent), or copied as a string into buf (false when absent).  A field
 * of the wrong type raises "opts.K must be ...".  [-0, +0, v]
 */
int64_t lstore_opt_int(lua_State *L, int t, const char *k, int64_t def);
bool lstore_opt_bool(lua_State *L, int t, const char *k, bool def);
bool lstore_opt_str(lua_State *L, int t, const char *k, char *buf, size_t n);

#endif
