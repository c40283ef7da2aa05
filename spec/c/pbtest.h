/* pbtest: what the C tests of rmq's hand-written protobuf code share.
 * protobuf-c is the reference: a hand decoder (src/grpc/codec.h:
 * spec/c/test_codec_*.c) must read what protobuf-c unpacks from the same
 * bytes, or leave them to it, never taking what it refuses; a hand packer
 * (src/grpc/recvpack.h, sendpack.h: spec/c/test_recvpack.c,
 * test_sendpack.c) must write byte for byte what protobuf-c packs.
 * Failures are cmocka assertions, so these are called from cmocka tests
 * only.  Built into every spec/c test program (CMakeLists.txt). */
#ifndef RMQ_SPEC_C_PBTEST_H
#define RMQ_SPEC_C_PBTEST_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* {{{ Bytes built by hand */
struct pbt_bytes {
    uint8_t p[65536];
    size_t n;
};

void pbt_put_varint(struct pbt_bytes *b, uint64_t v);
void pbt_put_raw(struct pbt_bytes *b, const void *p, size_t n);
/* A length-delimited field num (wire type 2) holding p[0..n). */
void pbt_put_len(struct pbt_bytes *b, uint32_t num, const void *p, size_t n);
/* m packed by protobuf-c, appended. */
void pbt_put_packed(struct pbt_bytes *b, const ProtobufCMessage *m);
/* Unknown fields of every wire type protobuf-c keeps (varint, length,
 * 32- and 64-bit, one with a four-byte tag). */
void pbt_put_unknown(struct pbt_bytes *b);
/* }}} */

/* {{{ A hand decoder against protobuf-c */
struct pbt_decoder {
    /* protobuf-c's descriptor of the message: the reference */
    const ProtobufCMessageDescriptor *desc;
    /* the hand decoder: the message allocated from a, or NULL when it
     * leaves the bytes to protobuf-c */
    ProtobufCMessage *(*decode)(ProtobufCAllocator *a, const uint8_t *p, size_t n);
};

enum pbt_outcome { PBT_SAME, PBT_LEFT_TO_PROTOBUF_C, PBT_BOTH_REFUSE };

/* Decodes p[0..n) both ways and says how they compare.  Asserts that the
 * hand decoder never takes what protobuf-c refuses, that what it takes
 * has UTF-8 strings only (the service relies on it), and that it is what
 * protobuf-c read, compared by packing both again (unknown fields aside:
 * the hand decoder skips them). */
enum pbt_outcome pbt_compare(const struct pbt_decoder *d, const uint8_t *p, size_t n);

/* pbt_compare over `rounds` copies of orig with one to three random
 * mutations each (a byte replaced, a bit flipped, cut short, a byte
 * inserted), from one fixed seed: the same mutations every run.  Adds
 * each outcome's count to counts (indexed by enum pbt_outcome) and
 * prints them. */
void pbt_mutations(const struct pbt_decoder *d, const struct pbt_bytes *orig, int rounds, size_t counts[3]);
/* }}} */

/* {{{ A hand packer against protobuf-c */
/* The hand packer under test: with out NULL, the size of what it writes;
 * else writes that into out; either way returns the count. */
typedef size_t (*pbt_pack_fn)(uint8_t *out, void *arg);

/* Asserts that pack(NULL, arg) sizes and pack(out, arg) writes byte for
 * byte what protobuf-c packs from want (the same message in protobuf-c's
 * structures). */
void pbt_assert_packs_as(const ProtobufCMessage *want, pbt_pack_fn pack, void *arg);
/* }}} */

#endif
