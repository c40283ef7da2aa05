/*
 * l_codec: what rmq.codec (l_codec.c) shares with the other bindings.
 */
#ifndef RMQ_L_CODEC_H
#define RMQ_L_CODEC_H

#include <lua.h>

#include "net/codec.h"

/**
 * Points cmd->ext at the entries of the table at absolute index `ext`,
 * sorted by key, every key and value as its text (tostring), exactly as
 * rmq.codec.encode sends them.  The array and the converted strings stay
 * on the stack (two values pushed) until the caller pops them; raises
 * (argument 1) on a table that cannot be sent.
 */
void lcodec_read_ext(lua_State *L, int ext, struct rmq_cmd *cmd);

#endif
