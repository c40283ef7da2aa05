/* hpack: the server's HPACK decoder (src/grpc/hpack.c) against RFC 7541
 * Appendix C's examples (a connection's three requests, with and without
 * Huffman: the dynamic table carried across blocks), and against
 * nghttp2's encoder (the one Node's and nghttp2's clients use) on random
 * header lists: every block it makes, with its dynamic table, table size
 * updates and Huffman, decodes to the fields it was given.  Bad blocks
 * (an index past the table, bad Huffman padding, EOS, a size update after
 * a field, truncation) are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <nghttp2/nghttp2.h>

#include "grpc/hpack.h"

struct got {
    char text[65536];
    size_t len;
};

static uint8_t
collect(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl, uint8_t mark)
{
    (void)mark;
    struct got *g = ud;
    assert_true(g->len + nl + vl + 3 < sizeof(g->text));
    memcpy(g->text + g->len, n, nl);
    g->len += nl;
    g->text[g->len++] = ':';
    memcpy(g->text + g->len, v, vl);
    g->len += vl;
    g->text[g->len++] = '\n';
    g->text[g->len] = '\0';
    return 1;
}

static size_t
unhex(const char *h, uint8_t *out)
{
    size_t o = 0;
    for (; *h; h++) {
        if (*h == ' ')
            continue;
        unsigned v;
        sscanf(h, "%2x", &v);
        out[o++] = (uint8_t)v;
        h++;
    }
    return o;
}

static void
expect_block(struct hpack_dec *d, const char *hex, const char *want)
{
    uint8_t b[512];
    size_t n = unhex(hex, b);
    struct got g = { .len = 0 };
    g.text[0] = '\0';
    assert_int_equal(0, hpack_decode(d, b, n, collect, &g));
    assert_string_equal(want, g.text);
}

/* RFC 7541 C.3: requests without Huffman. */
static void
rfc_c3(void **state)
{
    (void)state;
    struct hpack_dec d;
    hpack_dec_init(&d);
    expect_block(&d, "828684410f7777772e6578616d706c652e636f6d",
                 ":method:GET\n:scheme:http\n:path:/\n:authority:www.example.com\n");
    expect_block(&d, "828684be58086e6f2d6361636865",
                 ":method:GET\n:scheme:http\n:path:/\n:authority:www.example.com\ncache-control:no-cache\n");
    expect_block(&d, "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
                 ":method:GET\n:scheme:https\n:path:/index.html\n:authority:www.example.com\n"
                 "custom-key:custom-value\n");
    assert_int_equal(3, d.count);
    assert_int_equal(164, d.size);
    hpack_dec_free(&d);
}

/* RFC 7541 C.4: the same with Huffman. */
static void
rfc_c4(void **state)
{
    (void)state;
    struct hpack_dec d;
    hpack_dec_init(&d);
    expect_block(&d, "828684418cf1e3c2e5f23a6ba0ab90f4ff",
                 ":method:GET\n:scheme:http\n:path:/\n:authority:www.example.com\n");
    expect_block(&d, "828684be5886a8eb10649cbf",
                 ":method:GET\n:scheme:http\n:path:/\n:authority:www.example.com\ncache-control:no-cache\n");
    expect_block(&d, "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
                 ":method:GET\n:scheme:https\n:path:/index.html\n:authority:www.example.com\n"
                 "custom-key:custom-value\n");
    assert_int_equal(164, d.size);
    hpack_dec_free(&d);
}

static uint8_t marks[16];
static size_t nmarks;

static uint8_t
keep_mark(void *ud, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl, uint8_t mark)
{
    (void)ud;
    (void)n;
    (void)nl;
    (void)v;
    (void)vl;
    marks[nmarks++] = mark;
    return (uint8_t)(40 + nmarks);
}

/* A field's mark: new for a literal, static for the static table's, and
 * for one sent by dynamic index what was returned when it was added. */
static void
keeps_marks(void **state)
{
    (void)state;
    struct hpack_dec d;
    hpack_dec_init(&d);
    uint8_t b[64];
    size_t n = unhex("828684410f7777772e6578616d706c652e636f6d", b);
    nmarks = 0;
    assert_int_equal(0, hpack_decode(&d, b, n, keep_mark, NULL));
    assert_int_equal(4, nmarks);
    assert_int_equal(HPACK_MARK_STATIC, marks[0]);
    assert_int_equal(HPACK_MARK_NEW, marks[3]);     /* :authority, added: mark 44 */
    n = unhex("828684be", b);
    nmarks = 0;
    assert_int_equal(0, hpack_decode(&d, b, n, keep_mark, NULL));
    assert_int_equal(44, marks[3]);
    hpack_dec_free(&d);
}

static void
refuses_bad_blocks(void **state)
{
    (void)state;
    static const char *bad[] = {
        "80",            /* index 0 */
        "be",            /* index 62: empty dynamic table */
        "41",            /* truncated: no value */
        "418cf1e3",      /* truncated string */
        "4181fe",        /* Huffman: padding not all ones... (0xfe: '0'-bits at the end) */
        "0081ff",        /* a name of 8 one-bits: longer than 7 bits of padding */
        "823f e11f",     /* a size update after a field */
        "3fe21f",        /* a size update past 4096 */
        "ff ff ff ff ff 0f", /* an integer too large */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct hpack_dec d;
        hpack_dec_init(&d);
        uint8_t b[64];
        size_t n = unhex(bad[i], b);
        struct got g = { .len = 0 };
        if (hpack_decode(&d, b, n, collect, &g) == 0)
            fail_msg("block %zu (%s) decoded", i, bad[i]);
        hpack_dec_free(&d);
    }
}

/* EOS (30 ones) inside a string. */
static void
refuses_eos(void **state)
{
    (void)state;
    uint8_t enc[] = { 0xff, 0xff, 0xff, 0xff };   /* EOS + 2 bits */
    uint8_t out[16];
    assert_true(hpack_huff_decode(enc, sizeof(enc), out) < 0);
}

static uint32_t seed = 12345;

static uint32_t
rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return (seed >> 8) & 0xffffff;
}

static void
fill(uint8_t *p, size_t n, int kind)
{
    static const char tok[] = "abcdefghijklmnopqrstuvwxyz0123456789-_.";
    for (size_t i = 0; i < n; i++)
        p[i] = kind == 0 ? (uint8_t)tok[rnd() % (sizeof(tok) - 1)] : (uint8_t)rnd();
}

/* nghttp2's encoder, random lists: what it encodes decodes back. */
static void
matches_nghttp2(void **state)
{
    (void)state;
    nghttp2_hd_deflater *def;
    assert_int_equal(0, nghttp2_hd_deflate_new(&def, 4096));
    struct hpack_dec d;
    hpack_dec_init(&d);
    /* A pool of fields so that some repeat (indexed, from the table). */
    uint8_t pool[32][2][300];
    size_t plen[32][2];
    for (int i = 0; i < 32; i++) {
        for (int k = 0; k < 2; k++) {
            plen[i][k] = 1 + rnd() % (i < 4 ? 280 : 40);
            fill(pool[i][k], plen[i][k], k == 1 && i % 3 == 0);
        }
    }
    for (int round = 0; round < 3000; round++) {
        if (round % 500 == 250)
            assert_int_equal(0, nghttp2_hd_deflate_change_table_size(def, rnd() % 4097));
        nghttp2_nv nv[12];
        size_t nn = 1 + rnd() % 12;
        char want[65536];
        size_t wl = 0;
        for (size_t j = 0; j < nn; j++) {
            int i = (int)(rnd() % 32);
            nv[j].name = pool[i][0];
            nv[j].namelen = plen[i][0];
            nv[j].value = pool[i][1];
            nv[j].valuelen = plen[i][1];
            nv[j].flags = rnd() % 7 == 0 ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
            memcpy(want + wl, nv[j].name, nv[j].namelen);
            wl += nv[j].namelen;
            want[wl++] = ':';
            memcpy(want + wl, nv[j].value, nv[j].valuelen);
            wl += nv[j].valuelen;
            want[wl++] = '\n';
        }
        uint8_t blk[16384];
        ssize_t n = nghttp2_hd_deflate_hd(def, blk, sizeof(blk), nv, nn);
        assert_true(n > 0);
        struct got g = { .len = 0 };
        assert_int_equal(0, hpack_decode(&d, blk, (size_t)n, collect, &g));
        assert_int_equal(wl, g.len);
        assert_memory_equal(want, g.text, wl);
    }
    hpack_dec_free(&d);
    nghttp2_hd_deflate_del(def);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rfc_c3),
        cmocka_unit_test(rfc_c4),
        cmocka_unit_test(keeps_marks),
        cmocka_unit_test(refuses_bad_blocks),
        cmocka_unit_test(refuses_eos),
        cmocka_unit_test(matches_nghttp2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
