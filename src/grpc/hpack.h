/*
 * hpack: the decoding side of HPACK (RFC 7541) for the server's HTTP/2
 * (h2.c): the static table, one connection's dynamic table, Huffman.
 * Our encoder needs no state (h2.c writes literals without indexing).
 *
 * What it holds is bounded: the dynamic table at HPACK_TABLE_MAX bytes
 * (entries counted as RFC 7541 4.1 says: name + value + 32), which is
 * SETTINGS_HEADER_TABLE_SIZE's default, never raised by us; a Huffman
 * string's decoding at 8/5 of its encoded length (the shortest code is
 * 5 bits), and the encoded string is inside a header block h2.c bounds.
 *
 * MT: one connection's, on its reactor's thread.
 */
#ifndef RMQ_GRPC_HPACK_H
#define RMQ_GRPC_HPACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define HPACK_TABLE_MAX 4096
/* At most this many entries fit (each is at least 32 bytes). */
#define HPACK_ENTRIES (HPACK_TABLE_MAX / 32)
/* Huffman strings remembered decoded (hpack.c: a client's :path). */
#define HPACK_CACHE 4
#define HPACK_CACHE_ENC 64

struct hpack_entry {
    uint8_t *p;                  /* name then value (not NUL-terminated) */
    uint32_t nlen, vlen;
    uint8_t mark;                /* what hpack_field_fn returned for it */
};

struct hpack_dec {
    struct hpack_entry ring[HPACK_ENTRIES];
    uint32_t newest;             /* ring index of dynamic index 62 */
    uint32_t count;
    size_t size;                 /* RFC 7541 4.1 sizes, summed */
    size_t max;                  /* the table's size (size updates) */
    struct buf sname, svalue;    /* Huffman-decoded name and value */
    struct {
        uint8_t enc[HPACK_CACHE_ENC];
        uint8_t dec[HPACK_CACHE_ENC * 8 / 5 + 1];
        uint8_t elen, dlen;      /* elen 0: empty */
    } cache[HPACK_CACHE];
    unsigned cache_next;
};

/* A field's mark: HPACK_MARK_NEW for one not seen before (a literal),
 * HPACK_MARK_STATIC for a whole field of the static table, or what fn
 * returned when the dynamic table entry it comes from was added.  The
 * user keeps its verdict on a field there (h2.c: the field's syntax
 * check), so a field sent again by index is not checked again. */
#define HPACK_MARK_NEW 0
#define HPACK_MARK_STATIC 255

/* One decoded field; name and value are valid during the call.  Returns
 * the mark to keep with the field when it was just added to the table
 * (ignored otherwise). */
typedef uint8_t (*hpack_field_fn)(void *ud, const uint8_t *name, size_t nlen, const uint8_t *value,
                                  size_t vlen, uint8_t mark);

void hpack_dec_init(struct hpack_dec *d);
void hpack_dec_free(struct hpack_dec *d);

/**
 * Decodes one whole header block p[0..n), calling fn for each field in
 * order.  Returns 0, or -1 with err_set() for a block that does not
 * decode (the connection's COMPRESSION_ERROR: its table can no longer be
 * trusted) or when out of memory.
 */
int hpack_decode(struct hpack_dec *d, const uint8_t *p, size_t n, hpack_field_fn fn, void *ud);

/** Huffman-decodes p[0..n) into out (room for n * 8 / 5 + 1 bytes);
 * the decoded length, or -1 (bad padding, EOS). */
long hpack_huff_decode(const uint8_t *p, size_t n, uint8_t *out);

#endif
