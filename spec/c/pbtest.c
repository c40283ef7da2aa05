/* pbtest: protobuf-c as the reference for rmq's hand-written protobuf
 * code (pbtest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grpc/pbcheck.h"
#include "pbtest.h"

/* {{{ An arena allocator: everything freed at once (as the service's). */
struct block {
    struct block *next;
    max_align_t data[];
};

struct arena {
    ProtobufCAllocator a;   /* allocator_data: this arena */
    struct block *blocks;
};

static void *
arena_alloc(void *data, size_t n)
{
    struct arena *ar = data;
    struct block *b = malloc(sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    b->next = ar->blocks;
    ar->blocks = b;
    return b->data;
}

static void
arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

static void
arena_init(struct arena *ar)
{
    ar->a.alloc = arena_alloc;
    ar->a.free = arena_free;
    ar->a.allocator_data = ar;
    ar->blocks = NULL;
}

static void
arena_reset(struct arena *ar)
{
    while (ar->blocks != NULL) {
        struct block *b = ar->blocks;
        ar->blocks = b->next;
        free(b);
    }
}
/* }}} */

/* {{{ Bytes built by hand */
void
pbt_put_varint(struct pbt_bytes *b, uint64_t v)
{
    while (v >= 0x80) {
        b->p[b->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->p[b->n++] = (uint8_t)v;
}

void
pbt_put_raw(struct pbt_bytes *b, const void *p, size_t n)
{
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

void
pbt_put_len(struct pbt_bytes *b, uint32_t num, const void *p, size_t n)
{
    pbt_put_varint(b, (uint64_t)num << 3 | 2);
    pbt_put_varint(b, n);
    pbt_put_raw(b, p, n);
}

void
pbt_put_packed(struct pbt_bytes *b, const ProtobufCMessage *m)
{
    b->n += protobuf_c_message_pack(m, b->p + b->n);
}

void
pbt_put_unknown(struct pbt_bytes *b)
{
    pbt_put_varint(b, (uint64_t)99 << 3 | 0);
    pbt_put_varint(b, 123456789012345ULL);
    pbt_put_len(b, 100, "future", 6);
    pbt_put_varint(b, (uint64_t)101 << 3 | 5);
    pbt_put_raw(b, "abcd", 4);
    pbt_put_varint(b, (uint64_t)102 << 3 | 1);
    pbt_put_raw(b, "abcdefgh", 8);
    pbt_put_varint(b, (uint64_t)1000000 << 3 | 0);   /* a four-byte tag */
    pbt_put_varint(b, 1);
}
/* }}} */

/* {{{ A hand decoder against protobuf-c */
/* Drops the unknown fields protobuf-c kept, at every level, so that
 * packing again compares the known ones only. */
static void
strip_unknown(ProtobufCMessage *m)
{
    m->n_unknown_fields = 0;
    m->unknown_fields = NULL;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        /* A oneof's members share one place: only the member set (its
         * case field holds that member's number) is a message here; a
         * scalar member set there would be read as a pointer. */
        if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
            *(const uint32_t *)((const char *)m + fd->quantifier_offset) != fd->id)
            continue;
        char *at = (char *)m + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)((char *)m + fd->quantifier_offset);
            ProtobufCMessage **v = *(ProtobufCMessage ***)at;
            for (size_t j = 0; j < n; j++)
                strip_unknown(v[j]);
        } else if (*(ProtobufCMessage **)at != NULL) {
            strip_unknown(*(ProtobufCMessage **)at);
        }
    }
}

enum pbt_outcome
pbt_compare(const struct pbt_decoder *d, const uint8_t *p, size_t n)
{
    struct arena ar;
    arena_init(&ar);
    ProtobufCMessage *want = protobuf_c_message_unpack(d->desc, &ar.a, n, p);
    ProtobufCMessage *got = d->decode(&ar.a, p, n);
    enum pbt_outcome o;
    if (want == NULL) {
        assert_null(got);   /* never accepts what protobuf-c refuses */
        o = PBT_BOTH_REFUSE;
    } else if (got == NULL) {
        o = PBT_LEFT_TO_PROTOBUF_C;
    } else {
        char why[128];
        assert_true(pbcheck_utf8(got, why, sizeof(why)));
        strip_unknown(want);
        strip_unknown(got);   /* the fields protobuf-c read for it */
        size_t wn = protobuf_c_message_get_packed_size(want);
        size_t gn = protobuf_c_message_get_packed_size(got);
        uint8_t *wb = malloc(wn + 1), *gb = malloc(gn + 1);
        assert_non_null(wb);
        assert_non_null(gb);
        protobuf_c_message_pack(want, wb);
        protobuf_c_message_pack(got, gb);
        assert_int_equal(wn, gn);
        assert_memory_equal(wb, gb, wn);
        free(wb);
        free(gb);
        o = PBT_SAME;
    }
    arena_reset(&ar);
    return o;
}

/* xorshift64: a fixed sequence from a fixed seed. */
static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void
pbt_mutations(const struct pbt_decoder *d, const struct pbt_bytes *orig, int rounds, size_t counts[3])
{
    static struct pbt_bytes b;   /* 64 KiB: not on the stack */
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < rounds; i++) {
        memcpy(b.p, orig->p, orig->n);
        b.n = orig->n;
        int k = 1 + (int)(rnd(&rng) % 3);
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)(rnd(&rng) % b.n);
            switch (rnd(&rng) % 4) {
            case 0: b.p[at] = (uint8_t)rnd(&rng); break;
            case 1: b.p[at] ^= (uint8_t)(1u << (rnd(&rng) % 8)); break;
            case 2: b.n = at + 1; break;
            default:
                memmove(b.p + at + 1, b.p + at, b.n - at);
                b.p[at] = (uint8_t)rnd(&rng);
                b.n++;
            }
        }
        counts[pbt_compare(d, b.p, b.n)]++;
    }
    print_message("same %zu, left to protobuf-c %zu, both refuse %zu\n", counts[PBT_SAME],
                  counts[PBT_LEFT_TO_PROTOBUF_C], counts[PBT_BOTH_REFUSE]);
}
/* }}} */

/* {{{ A hand packer against protobuf-c */
void
pbt_assert_packs_as(const ProtobufCMessage *want, pbt_pack_fn pack, void *arg)
{
    size_t want_n = protobuf_c_message_get_packed_size(want);
    /* Room past the end: a packer that writes more than it sized is
     * caught by the comparison of the count (or ASan), not by a crash. */
    uint8_t *wb = malloc(want_n + 1), *got = malloc(want_n + 64);
    assert_non_null(wb);
    assert_non_null(got);
    protobuf_c_message_pack(want, wb);
    assert_int_equal(want_n, pack(NULL, arg));
    assert_int_equal(want_n, pack(got, arg));
    assert_memory_equal(wb, got, want_n);
    free(wb);
    free(got);
}
/* }}} */
