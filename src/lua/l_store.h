/*
 * l_store: the rmq.store module (see l_store.c for the Lua API).  This
 * header is for C code that receives a get's records from Lua, such as a
 * pull handler that sends them to a socket without copying: the records
 * userdata holds iovecs into the mapped commit log files, which stay
 * mapped while the userdata lives (or until :release()).
 */
#ifndef RMQ_L_STORE_H
#define RMQ_L_STORE_H

#include <lua.h>

#include "store/store.h"

#define LSTORE_RECORDS_TYPE "rmq.store.records"

struct lrecords {
    struct store_slices sl;     /* iov and pins point into this block */
};

/** The records userdata at idx, or raises. [-0, +0, v] */
struct lrecords *lstore_check_records(lua_State *L, int idx);

#endif
