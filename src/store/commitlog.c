/*
 * commitlog: the record format, its validation, and the append path.
 *
 * COMMIT LOG FORMAT (RocketMQ 4.x; protocol.md §5.1-5.3)
 *
 * STORE/commitlog/ holds files of mappedFileSizeCommitLog bytes named by
 * their first offset (20 digits).  Records are packed from offset 0 of a
 * file; all integers are big-endian; a record never straddles two files.
 * With IPv4 born and store hosts (each IPv6 host, flagged by SYSFLAG bit
 * 4 for the born host and bit 5 for the store host, adds 12 bytes at its
 * field and shifts everything after it):
 *
 *     0  int32  TOTALSIZE        whole record, this field included
 *     4  int32  MAGICCODE        0xDAA320A7
 *     8  int32  BODYCRC          crc32(body) & 0x7FFFFFFF
 *    12  int32  QUEUEID
 *    16  int32  FLAG             the producer's flag
 *    20  int64  QUEUEOFFSET      logical offset in (topic, queue); 0 for
 *                                prepared/rollback transaction records
 *    28  int64  PHYSICALOFFSET   this record's own offset in the log
 *    36  int32  SYSFLAG
 *    40  int64  BORNTIMESTAMP    producer clock, ms
 *    48  4+4    BORNHOST         address, int32 port   (16+4 if IPv6)
 *    56  int64  STORETIMESTAMP   broker clock, taken under the append lock
 *    64  4+4    STOREHOST        address, int32 port   (16+4 if IPv6)
 *    72  int32  RECONSUMETIMES
 *    76  int64  PREPARED TRANSACTION OFFSET
 *    84  int32  BODY length B, then B bytes (stored as received)
 * 88+B  int8   TOPIC length T (<= 127), then T bytes
 * 89+B+T int16 PROPERTIES length P (<= 32767), then P bytes
 *                                key 0x01 value 0x02 ... (§5.4)
 *
 *   TOTALSIZE = 91 + B + T + P (+12 per IPv6 host).
 *
 * END OF FILE.  When a record (or batch) plus 8 bytes does not fit in the
 * rest of the file, the writer puts a BLANK there: int32 size = every
 * remaining byte of the file, int32 magic 0xCBD43194, rest unspecified;
 * the record goes to offset 0 of the next file.  Readers skip to the
 * next file when they meet it.
 *
 * A RECORD IS VALID (the recovery scan's rule; RocketMQ's
 * checkMessageAndReturnSize plus one check) if and only if:
 *   1. MAGICCODE is 0xDAA320A7 and TOTALSIZE fits in the rest of the file;
 *   2. the body, topic and properties lengths fit and add up to TOTALSIZE;
 *   3. BODYCRC equals crc32(body) & 0x7FFFFFFF (checkCRCOnRecover);
 *   4. PHYSICALOFFSET equals the record's position (ours: it rejects a
 *      stale record of an earlier generation after a truncation).
 * A BLANK is valid if its size is exactly the rest of the file.  Zeros
 * mean "nothing written here".  The scan stops at the first record that
 * is neither: that is the end of the log, and anything after it is
 * truncated.
 *
 * APPEND.  One lock (the append lock) serialises writers.  Everything
 * that can be done before it is (lengths, body CRC, tag hash, host
 * parsing, finding the consume queue).  Under it: roll to the next file
 * if needed (prepared ahead by the allocator thread), take the store
 * timestamp, assign queue offsets, encode each record (the body's one
 * copy) into the staging buffer -- or, without staging, straight into
 * the mapping -- write the consume queue entries, then publish the queue
 * maxima and the log's end.  Readers see a record only after all of it
 * is there.
 *
 * COMMIT (staging, commitlog.h).  The staging buffer always holds
 * exactly the bytes [wrote, staged) of the current file, so a commit is
 * one pwrite of the whole buffer at `wrote`, then the publish; the
 * buffer is empty afterwards.  An append commits first when it would not
 * fit in the buffer, and a roll-over commits the old file's bytes and
 * its BLANK before the new file is touched, so the buffer never spans
 * two files.  The file's page cache is then filled by the kernel through
 * its own mapping: whole pages need no read or zeroing, and the writer's
 * address space never maps them (the flush never has to write-protect a
 * page the writer holds).
 */
#include "store/commitlog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/clock.h"
#include "core/crc32.h"
#include "core/err.h"
#include "core/errinj.h"
#include "core/log.h"
#include "store/consumequeue.h"

/* {{{ Small helpers */

int
host_addr_parse(const char *s, size_t n, struct host_addr *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf))
        goto bad;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *colon = strrchr(buf, ':');
    if (colon == NULL || colon == buf)
        goto bad;
    *colon = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535)
        goto bad;
    char *host = buf;
    size_t hl = strlen(host);
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        host++;
    }
    memset(out, 0, sizeof(*out));
    out->port = (int32_t)port;
    if (inet_pton(AF_INET, host, out->ip) == 1) {
        out->len = 4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, out->ip) == 1) {
        out->len = 16;
        return 0;
    }
bad:
    err_set("bad host address '%.*s' (want ip:port)", (int)(n > 60 ? 60 : n),
            s);
    return -EINVAL;
}

size_t
host_addr_format(char *out, const uint8_t *addr, size_t len, int32_t port)
{
    int n;
    if (len == 16) {
        n = snprintf(out, HOST_ADDR_TEXT_MAX, "[%x:%x:%x:%x:%x:%x:%x:%x]:%d",
                     be16_get(addr), be16_get(addr + 2), be16_get(addr + 4),
                     be16_get(addr + 6), be16_get(addr + 8), be16_get(addr + 10),
                     be16_get(addr + 12), be16_get(addr + 14), (int)port);
    } else {
        n = snprintf(out, HOST_ADDR_TEXT_MAX, "%u.%u.%u.%u:%d", addr[0], addr[1],
                     addr[2], addr[3], (int)port);
    }
    return n > 0 ? (size_t)n : 0;
}

size_t
clog_msgid(char *out, const struct host_addr *store, int64_t phy)
{
    /* A byte's two hex digits from one table entry: a reply's msgId
     * (and a batch's, per message) without a shift and mask per digit. */
    static const char hex2[513] =
        "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"
        "202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F"
        "404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F"
        "606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F"
        "808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9F"
        "A0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBF"
        "C0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDF"
        "E0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF";
    uint8_t raw[28];
    size_t n = store->len;
    if (n == 4)
        memcpy(raw, store->ip, 4);  /* one store, not a memcpy call */
    else
        memcpy(raw, store->ip, n);
    be32_put(raw + n, (uint32_t)store->port);
    be64_put(raw + n + 4, (uint64_t)phy);
    n += 12;
    size_t i = 0;
#if defined(__SSE2__)
    /* The first 16 bytes (all of an IPv4 store's msgId) in one step:
     * each byte's two nibbles side by side, then '0' + x, +7 past 9. */
    {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)raw);
        __m128i m = _mm_set1_epi8(0x0F);
        __m128i lo = _mm_and_si128(v, m);
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
        __m128i a = _mm_unpacklo_epi8(hi, lo), b = _mm_unpackhi_epi8(hi, lo);
        __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9), seven = _mm_set1_epi8(7);
        a = _mm_add_epi8(_mm_add_epi8(a, zero), _mm_and_si128(_mm_cmpgt_epi8(a, nine), seven));
        b = _mm_add_epi8(_mm_add_epi8(b, zero), _mm_and_si128(_mm_cmpgt_epi8(b, nine), seven));
        _mm_storeu_si128((__m128i *)(void *)out, a);
        _mm_storeu_si128((__m128i *)(void *)(out + 16), b);
        i = 16;
    }
#endif
    for (; i < n; i++)
        memcpy(out + 2 * i, hex2 + 2 * raw[i], 2);
    out[2 * n] = '\0';
    return 2 * n;
}

/* }}} */

/* {{{ Format */

uint32_t
clog_msg_len(const struct clog_msg *m)
{
    uint32_t p = m->props_len + m->props2_len + (m->props_sep ? 1 : 0);
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (m->born.len + 4u) + 8 +
           (m->store.len + 4u) + 4 + 8 + 4 + m->body_len + 1 + m->topic_len +
           2 + p;
}

static uint8_t *
put_host(uint8_t *p, const struct host_addr *h)
{
    /* IPv4's fixed-size copy is one store, not a memcpy call. */
    if (h->len == 4)
        memcpy(p, h->ip, 4);
    else
        memcpy(p, h->ip, h->len);
    be32_put(p + h->len, (uint32_t)h->port);
    return p + h->len + 4;
}

/* Writes m's record at dst.  Every byte of the record is written: the
 * destination may hold garbage from a rolled-back append. */
static void
clog_encode(uint8_t *dst, const struct clog_msg *m, int64_t store_ts)
{
    int32_t sysflag = m->sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    if (m->born.len == 16)
        sysflag |= SYSFLAG_BORNHOST_V6;
    if (m->store.len == 16)
        sysflag |= SYSFLAG_STOREHOST_V6;
    uint8_t *p = dst;
    be32_put(p, m->len);
    be32_put(p + 4, CLOG_MAGIC);
    be32_put(p + 8, m->body_crc);
    be32_put(p + 12, (uint32_t)m->qid);
    be32_put(p + 16, (uint32_t)m->flag);
    be64_put(p + 20, (uint64_t)m->qoff);
    be64_put(p + 28, (uint64_t)m->phy);
    be32_put(p + 36, (uint32_t)sysflag);
    be64_put(p + 40, (uint64_t)m->born_ts);
    p = put_host(p + 48, &m->born);
    be64_put(p, (uint64_t)store_ts);
    p = put_host(p + 8, &m->store);
    be32_put(p, (uint32_t)m->reconsume);
    be64_put(p + 4, (uint64_t)m->prep_tx_off);
    be32_put(p + 12, m->body_len);
    p += 16;
    if (m->body_len > 0)
        memcpy(p, m->body, m->body_len);
    p += m->body_len;
    *p++ = (uint8_t)m->topic_len;
    memcpy(p, m->topic, m->topic_len);
    p += m->topic_len;
    uint32_t plen = m->props_len + m->props2_len + (m->props_sep ? 1 : 0);
    be16_put(p, (uint16_t)plen);
    p += 2;
    if (m->props_len > 0)
        memcpy(p, m->props, m->props_len);
    p += m->props_len;
    if (m->props_sep)
        *p++ = 2;
    if (m->props2_len > 0)
        memcpy(p, m->props2, m->props2_len);
}

int64_t
clog_peek_store_ts(const uint8_t *p, size_t avail)
{
    if (avail < 72 || be32_get(p + 4) != CLOG_MAGIC)
        return -1;
    uint32_t sysflag = be32_get(p + 36);
    size_t at = 48 + ((sysflag & SYSFLAG_BORNHOST_V6) ? 20 : 8);
    if (at + 8 > avail)
        return -1;
    return (int64_t)be64_get(p + at);
}

/* clog_body_span once p is known to start with the magic and `size`
 * (the metas' walk over the staging buffer: inlined, no second check). */
static inline int
body_span(const uint8_t *p, size_t avail, uint32_t size, size_t *off, uint32_t *len)
{
    if (avail < 40)
        return -1;
    uint32_t sysflag = be32_get(p + 36);
    /* born host, store timestamp, store host, reconsume, prepared. */
    size_t at = 48 + ((sysflag & SYSFLAG_BORNHOST_V6) ? 20 : 8) + 8 +
                ((sysflag & SYSFLAG_STOREHOST_V6) ? 20 : 8) + 12;
    if (at + 4 > avail || at + 4 > size)
        return -1;
    uint32_t b = be32_get(p + at);
    at += 4;
    /* Then the topic's length byte and the properties' two. */
    if (b > size - at || size - at - b < 3)
        return -1;
    *off = at;
    *len = b;
    return 0;
}

int
clog_body_span(const uint8_t *p, size_t avail, uint32_t size, size_t *off,
               uint32_t *len)
{
    if (avail < 40 || be32_get(p + 4) != CLOG_MAGIC || be32_get(p) != size)
        return -1;
    return body_span(p, avail, size, off, len);
}

int
clog_decode(const uint8_t *p, size_t avail, int64_t expect_phy,
            bool check_crc, struct clog_view *v)
{
    if (avail < 8) {
        /* Only a file's last bytes: zeros there mean "not written". */
        for (size_t i = 0; i < avail; i++)
            if (p[i] != 0)
                return CLOG_BAD;
        return CLOG_END;
    }
    uint32_t size = be32_get(p);
    uint32_t magic = be32_get(p + 4);
    if (magic == CLOG_BLANK_MAGIC) {
        v->size = size;
        return size == avail ? CLOG_BLANK : CLOG_BAD;
    }
    if (magic != CLOG_MAGIC)
        return size == 0 && magic == 0 ? CLOG_END : CLOG_BAD;
    if (size < 91 || size > avail)
        return CLOG_BAD;
    v->size = size;
    v->body_crc = be32_get(p + 8);
    v->qid = (int32_t)be32_get(p + 12);
    v->flag = (int32_t)be32_get(p + 16);
    v->qoff = (int64_t)be64_get(p + 20);
    v->phy = (int64_t)be64_get(p + 28);
    v->sysflag = (int32_t)be32_get(p + 36);
    v->born_ts = (int64_t)be64_get(p + 40);
    v->born_len = (v->sysflag & SYSFLAG_BORNHOST_V6) ? 16 : 4;
    v->store_len = (v->sysflag & SYSFLAG_STOREHOST_V6) ? 16 : 4;
    size_t at = 48;
    v->born = p + at;
    at += v->born_len + 4u;
    v->store_ts = (int64_t)be64_get(p + at);
    at += 8;
    v->storeh = p + at;
    at += v->store_len + 4u;
    /* Fixed part so far + reconsume 4 + prepared 8 + body length 4. */
    if (at + 16 > size)
        return CLOG_BAD;
    v->reconsume = (int32_t)be32_get(p + at);
    v->prep_tx_off = (int64_t)be64_get(p + at + 4);
    v->body_len = be32_get(p + at + 12);
    at += 16;
    if (v->body_len > size - at || size - at - v->body_len < 3)
        return CLOG_BAD;
    v->body = p + at;
    at += v->body_len;
    v->topic_len = p[at];
    if (v->topic_len > CLOG_TOPIC_MAX || at + 1 + v->topic_len + 2 > size)
        return CLOG_BAD;
    v->topic = p + at + 1;
    at += 1 + v->topic_len;
    v->props_len = be16_get(p + at);
    at += 2;
    if (v->props_len > CLOG_PROPS_MAX || at + v->props_len != size)
        return CLOG_BAD;
    v->props = p + at;
    if (expect_phy >= 0 && v->phy != expect_phy)
        return CLOG_BAD;
    if (check_crc && rmq_body_crc(v->body, v->body_len) != v->body_crc)
        return CLOG_BAD;
    return CLOG_REC;
}

/* }}} */

/* {{{ Life cycle */

int
clog_open(struct commitlog *cl, const char *dir, size_t file_size)
{
    memset(cl, 0, sizeof(*cl));
    cl->file_size = file_size;
    int rc = mfq_init(&cl->q, dir, file_size);
    if (rc != 0)
        return rc;
    /* Short critical sections taken per send and per commit: slock.h. */
    slock_init(&cl->lock);
    slock_init(&cl->meta_mu);
    atomic_init(&cl->meta_len, 0);
    rc = mfq_load(&cl->q);
    int64_t min = mfq_min(&cl->q);
    atomic_init(&cl->min, min < 0 ? 0 : min);
    atomic_init(&cl->wrote, min < 0 ? 0 : min);
    atomic_init(&cl->staged, min < 0 ? 0 : min);
    cl->wfd = -1;
    atomic_init(&cl->last_ts, 0);
    atomic_init(&cl->begin_in_lock, 0);
    return rc;
}

int
clog_start(struct commitlog *cl, bool reserve_whole, int64_t warm_window)
{
    int64_t w = clog_wrote(cl);
    int rc = mfq_start_allocator(&cl->q, reserve_whole, warm_window, w);
    if (rc == 0) {
        mfq_prepare_next(&cl->q);
        if (warm_window > 0)
            mfq_kick_warmer(&cl->q, w);
    }
    return rc;
}

int
clog_set_staging(struct commitlog *cl, size_t bytes)
{
    size_t pg = 4096;
    bytes = (bytes + pg - 1) / pg * pg;
    void *b = NULL;
    if (posix_memalign(&b, pg, bytes) != 0) {
        err_set("out of memory for a %zu-byte commit log staging buffer", bytes);
        return -ENOMEM;
    }
    cl->pubs = calloc(64, sizeof(*cl->pubs));
    if (cl->pubs == NULL) {
        free(b);
        err_set("out of memory");
        return -ENOMEM;
    }
    cl->pubs_cap = 64;
    cl->stage = b;
    cl->stage_cap = bytes;
    cl->staging = true;
    return 0;
}

static void
close_wfd(struct commitlog *cl)
{
    if (cl->wfd >= 0)
        close(cl->wfd);
    cl->wfd = -1;
}

void
clog_close(struct commitlog *cl)
{
    if (cl->q.dir == NULL)
        return;
    close_wfd(cl);
    free(cl->stage);
    free(cl->pubs);
    free(cl->meta);
    cl->stage = NULL;
    cl->pubs = NULL;
    cl->meta = NULL;
    mfq_destroy(&cl->q);
    cl->cur = NULL;
}

int
clog_set_end(struct commitlog *cl, int64_t end, bool zero_tail)
{
    /* Odd while the bytes past `end` change, even again after: a
     * reader's window (store_window) keeps only what it read between
     * two equal even counts. */
    atomic_fetch_add_explicit(&cl->generation, 1, memory_order_acq_rel);
    mfq_truncate(&cl->q, end);
    struct mfile *mf = mfq_find(&cl->q, end);
    int rc = 0;
    cl->res_hi = end;
    if (mf != NULL) {
        size_t pos = (size_t)(end - mf->start);
        if (zero_tail)
            rc = mfile_zero_tail(mf, pos, false);
        /* The write target: sparse copies (and RocketMQ's own files)
         * get their next blocks now, not at a page fault on a full disk;
         * appends reserve the rest a chunk at a time. */
        if (rc == 0)
            rc = mfile_reserve_range(mf, pos, CLOG_RESERVE_CHUNK);
        int64_t fend = mf->start + (int64_t)mf->size;
        cl->res_hi = rc == 0 && end + CLOG_RESERVE_CHUNK < fend ? end + CLOG_RESERVE_CHUNK
                   : rc == 0 ? fend : end;
        mfile_unpin(mf);
    }
    atomic_store_explicit(&cl->wrote, end, memory_order_release);
    atomic_store_explicit(&cl->staged, end, memory_order_release);
    cl->npubs = 0;
    slock_lock(&cl->meta_mu);
    cl->meta_len = 0;  /* their offsets may hold other records now */
    cl->meta_woken = false;
    slock_unlock(&cl->meta_mu);
    int64_t min = mfq_min(&cl->q);
    atomic_store_explicit(&cl->min, min < 0 ? end : min,
                          memory_order_release);
    cl->cur = NULL;
    close_wfd(cl);
    cl->raw_end = 0;
    atomic_fetch_add_explicit(&cl->generation, 1, memory_order_acq_rel);
    return rc;
}

/* }}} */

/* {{{ Append */

/* The file to write at w: the current one, else an existing file holding
 * w (after recovery), else a new one.  Append lock held. */
static __attribute__((noinline)) struct mfile *
file_for_slow(struct commitlog *cl, int64_t w)
{
    struct mfile *f = mfq_find(&cl->q, w);
    if (f != NULL) {
        mfile_unpin(f);  /* the queue's reference keeps it for the writer */
    } else {
        f = mfq_create(&cl->q, w, cl->q.reserve_whole);
        if (f == NULL)
            return NULL;
    }
    if (f != cl->cur && cl->res_hi < f->start)
        cl->res_hi = f->start;  /* nothing known reserved in it yet */
    if (f != cl->cur)
        close_wfd(cl);
    cl->cur = f;
    return f;
}

/* file_for_slow with the current file's case inlined into the append. */
static inline struct mfile *
file_for(struct commitlog *cl, int64_t w)
{
    struct mfile *f = cl->cur;
    if (f != NULL && w >= f->start && w < f->start + (int64_t)cl->file_size)
        return f;
    return file_for_slow(cl, w);
}

/* Blocks for [w, end) of f, reserved a chunk at a time (a no-op for a
 * file reserved whole, but one compare).  Append lock held. */
static int
reserve_for(struct commitlog *cl, struct mfile *f, int64_t w, int64_t end)
{
    if (end <= cl->res_hi)
        return 0;
    int64_t from = w > cl->res_hi ? w : cl->res_hi;
    int64_t to = end + CLOG_RESERVE_CHUNK;
    int64_t fend = f->start + (int64_t)f->size;
    if (to > fend)
        to = fend;
    int rc = mfile_reserve_range(f, (size_t)(from - f->start), (size_t)(to - from));
    if (rc != 0)
        return rc;
    cl->res_hi = to;
    return 0;
}

/* Makes [wrote, end) visible: queue maxima, then the log's end.
 * Append lock held. */
static void
publish_locked(struct commitlog *cl, int64_t end)
{
    for (int i = 0; i < cl->npubs; i++)
        cq_publish(cl->pubs[i].cq, cl->pubs[i].next);
    cl->npubs = 0;
    atomic_store_explicit(&cl->last_ts, cl->staged_ts, memory_order_relaxed);
    atomic_store_explicit(&cl->wrote, end, memory_order_release);
    atomic_store_explicit(&cl->staged, end, memory_order_release);
    mfq_writer_at(&cl->q, end);
    if (cl->on_publish != NULL)
        cl->on_publish(cl->pub_arg);
}

/* A commit failed: what was staged never becomes visible; its queue
 * entries are cleared and their offsets reused.  Append lock held. */
static void
discard_locked(struct commitlog *cl)
{
    for (int i = cl->npubs - 1; i >= 0; i--) {
        struct clog_pub *p = &cl->pubs[i];
        for (int64_t q = p->next - 1; q >= p->first; q--)
            cq_clear(p->cq, q);
        p->cq->next = p->first;
    }
    cl->npubs = 0;
    atomic_fetch_add_explicit(&cl->discards, 1, memory_order_release);
    atomic_store_explicit(&cl->staged,
                          atomic_load_explicit(&cl->wrote, memory_order_relaxed),
                          memory_order_release);
}

/* The metas of the records in b (len bytes of committed log at w:
 * records, maybe a BLANK last).  Append lock held.  A copy of ~200 bytes
 * a record just written (the staging buffer or the mapping), still in
 * the CPU's cache, costs the writer less than the index's copy of the
 * whole record out of the page cache (docs/performance.md, branch
 * idx1k). */
static void
metas_add(struct commitlog *cl, const uint8_t *b, size_t len, int64_t w)
{
    slock_lock(&cl->meta_mu);
    if (cl->meta == NULL)
        cl->meta = malloc(cl->meta_cap);  /* none: the index reads the log */
    size_t at = 0, ml = cl->meta_len;
    while (cl->meta != NULL && len - at >= CLOG_BLANK_MIN) {
        uint32_t size = be32_get(b + at);
        if (be32_get(b + at + 4) != CLOG_MAGIC || size < CLOG_BLANK_MIN || size > len - at)
            break;
        size_t off;
        uint32_t blen;
        if (body_span(b + at, size, size, &off, &blen) == 0) {
            size_t tl = size - off - blen, n = off + tl;
            size_t need = CLOG_META_HDR + ((n + 7) & ~(size_t)7);
            if (ml + need > cl->meta_cap)
                break;  /* full: the index is behind and reads the log */
            uint8_t *e = cl->meta + ml;
            int64_t phy = w + (int64_t)at;
            uint32_t u[2] = { size, (uint32_t)n };
            memcpy(e, &phy, 8);
            memcpy(e + 8, u, 8);
            /* Both hosts IPv4 (the body at 88): a fixed-size copy, no call. */
            if (off == 88)
                memcpy(e + CLOG_META_HDR, b + at, 88);
            else
                memcpy(e + CLOG_META_HDR, b + at, off);
            be32_put(e + CLOG_META_HDR, (uint32_t)n);
            be32_put(e + CLOG_META_HDR + off - 4, 0);
            memcpy(e + CLOG_META_HDR + off, b + at + off + blen, tl);
            ml += need;
        }
        at += size;
    }
    atomic_store_explicit(&cl->meta_len, ml, memory_order_relaxed);
    if (ml >= cl->meta_cap / 2 && !cl->meta_woken && cl->on_metas != NULL) {
        cl->meta_woken = true;
        cl->metas_wake = true;  /* called once the append lock is let go */
    }
    slock_unlock(&cl->meta_mu);
}

/* Lets the append lock go, then wakes the index dispatch if a commit
 * under it filled half of the metas' buffer: on_metas takes the service
 * thread's mutex, which that thread may hold while the scheduler has it
 * off the core, and no sender should wait for that behind the append
 * lock.  The wake-up is not lost: the flag is set and read under the
 * append lock, by the thread that commits. */
static inline void
unlock_append(struct commitlog *cl)
{
    bool wake = cl->metas_wake;
    cl->metas_wake = false;
    slock_unlock(&cl->lock);
    if (__builtin_expect(wake, 0))
        cl->on_metas(cl->metas_arg);
}

size_t
clog_metas_take(struct commitlog *cl, uint8_t **buf)
{
    /* Nothing to take (none committed lately): no lock per record. */
    if (atomic_load_explicit(&cl->meta_len, memory_order_relaxed) == 0)
        return 0;
    if (*buf == NULL && (*buf = malloc(cl->meta_cap)) == NULL)
        return 0;
    slock_lock(&cl->meta_mu);
    size_t n = cl->meta_len;
    if (n > 0) {
        uint8_t *t = cl->meta;
        cl->meta = *buf;
        *buf = t;
        cl->meta_len = 0;
        cl->meta_woken = false;
    }
    slock_unlock(&cl->meta_mu);
    return n;
}

/* Writes the staging buffer ([wrote, staged) of cur) to the file and
 * publishes it; discards it when the write fails.  Append lock held. */
static int
commit_locked(struct commitlog *cl)
{
    int64_t w = atomic_load_explicit(&cl->wrote, memory_order_relaxed);
    int64_t end = atomic_load_explicit(&cl->staged, memory_order_relaxed);
    if (end == w)
        return 0;
    struct mfile *f = cl->cur;
    int rc = 0;
    if (cl->wfd < 0) {
        cl->wfd = mfile_open_fd(f);
        if (cl->wfd < 0)
            rc = cl->wfd;
    }
    size_t len = (size_t)(end - w), done = 0;
    off_t off = (off_t)(w - f->start);
    if (rc == 0 && ERRINJ(ERRINJ_COMMIT_FAIL)) {
        err_set("cannot write %s at %lld (injected)", f->path, (long long)off);
        rc = -EIO;
    }
    while (rc == 0 && done < len) {
        ssize_t k = pwrite(cl->wfd, cl->stage + done, len - done, off + (off_t)done);
        if (k > 0) {
            done += (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            rc = k < 0 ? -errno : -EIO;
            err_set("cannot write %s at %lld: %s", f->path,
                    (long long)(off + (off_t)done), strerror(-rc));
        }
    }
    if (rc != 0) {
        discard_locked(cl);
        return rc;
    }
    /* Before the publish: the index reads at most to `wrote`, and finds
     * the metas of what it reads there. */
    if (cl->meta_cap > 0)
        metas_add(cl, cl->stage, len, w);
    publish_locked(cl, end);
    return 0;
}

int
clog_commit(struct commitlog *cl)
{
    if (!cl->staging || clog_staged(cl) == clog_wrote(cl))
        return 0;
    slock_lock(&cl->lock);
    int rc = commit_locked(cl);
    unlock_append(cl);
    return rc;
}

/* Room in pubs[] for `more` entries.  Append lock held. */
static int
pubs_room(struct commitlog *cl, int more)
{
    if (cl->npubs + more <= cl->pubs_cap)
        return 0;
    int cap = cl->pubs_cap;
    while (cap < cl->npubs + more)
        cap *= 2;
    struct clog_pub *p = realloc(cl->pubs, (size_t)cap * sizeof(*p));
    if (p == NULL) {
        err_set("out of memory staging %d records", more);
        return -ENOMEM;
    }
    cl->pubs = p;
    cl->pubs_cap = cap;
    return 0;
}

int
clog_append(struct commitlog *cl, struct clog_msg *msgs, int n,
            int64_t *store_ts, bool defer, int64_t arrived_ms)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += msgs[i].len;
    if (total + CLOG_BLANK_MIN > cl->file_size) {
        err_set("%zu bytes cannot fit in a commit log file of %zu bytes",
                total, cl->file_size);
        return -E2BIG;
    }
    int rc = 0;
    slock_lock(&cl->lock);
    /* Taken after the lock, as 4.9.8 does: a put waiting for the lock is
     * not the one making the store slow.  The coarse clock: read for every
     * append, held against osPageCacheBusyTimeOutMills (1000 ms). */
    atomic_store_explicit(&cl->begin_in_lock, clock_mono_coarse_ns(), memory_order_relaxed);
    int64_t delay = errinj_get(ERRINJ_PUT_DELAY_MS);
    if (__builtin_expect(delay > 0, 0)) {
        struct timespec d = { .tv_sec = delay / 1000, .tv_nsec = (delay % 1000) * 1000000 };
        while (nanosleep(&d, &d) != 0 && errno == EINTR)
            ;
    }
    bool staging = cl->staging;
    /* Where this append goes: after what is staged (== wrote without). */
    int64_t w = atomic_load_explicit(&cl->staged, memory_order_relaxed);
    struct mfile *f = file_for(cl, w);
    if (f == NULL) {
        rc = -(errno ? errno : EIO);
        goto out;
    }
    size_t pos = (size_t)(w - f->start);
    if (cl->file_size - pos < total + CLOG_BLANK_MIN) {
        /* End of file: a BLANK fills the rest; the batch goes next. */
        int64_t fend = f->start + (int64_t)cl->file_size;
        if (staging) {
            /* Staged with the file's last records and committed with
             * them: the buffer never holds two files' bytes. */
            int64_t wr = atomic_load_explicit(&cl->wrote, memory_order_relaxed);
            if ((size_t)(w - wr) + CLOG_BLANK_MIN > cl->stage_cap) {
                if ((rc = commit_locked(cl)) != 0)
                    goto out;
                wr = w;
            }
            uint8_t *b = cl->stage + (w - wr);
            be32_put(b, (uint32_t)(cl->file_size - pos));
            be32_put(b + 4, CLOG_BLANK_MAGIC);
            atomic_store_explicit(&cl->staged, fend, memory_order_relaxed);
            if ((rc = commit_locked(cl)) != 0)
                goto out;
        } else {
            be32_put(f->base + pos, (uint32_t)(cl->file_size - pos));
            be32_put(f->base + pos + 4, CLOG_BLANK_MAGIC);
            atomic_store_explicit(&cl->wrote, fend, memory_order_release);
            atomic_store_explicit(&cl->staged, fend, memory_order_release);
        }
        w = fend;
        /* Retention ages a file by its last write. */
        (void)mfile_set_mtime(f, clock_wall_ms());
        f = file_for(cl, w);
        if (f == NULL) {
            rc = -(errno ? errno : EIO);
            goto out;
        }
        pos = 0;
    }
    /* + a BLANK: the end-of-file marker may be written next. */
    rc = reserve_for(cl, f, w, w + (int64_t)(total + CLOG_BLANK_MIN));
    if (rc != 0)
        goto out;
    uint8_t *base = f->base + pos;
    if (staging) {
        int64_t wr = atomic_load_explicit(&cl->wrote, memory_order_relaxed);
        if ((size_t)(w - wr) + total > cl->stage_cap) {
            /* Full: commit what is there; this append starts it again
             * (maxMessageSize <= stage_cap, so it fits then). */
            if ((rc = commit_locked(cl)) != 0)
                goto out;
            wr = w;
        }
        if ((rc = pubs_room(cl, n)) != 0)
            goto out;
        base = cl->stage + (w - wr);
    }
    /* The store timestamp (storeTimestamp): the wall clock read once per
     * append, under the lock, as 4.9.8 reads beginLockTimestamp once per
     * putMessage; the messages of one request (a batch) share it.  Read
     * after the request's frame arrived, it never precedes the message's
     * arrival.  A stamp shared with other requests' staged records
     * could: a frame read after it within the same coarse tick (up to
     * 1/HZ: 4-10 ms) was stamped earlier than it arrived, before its own
     * bornTimestamp when the producer's clock is ours.  The send path
     * reads the clock once for a read's frames instead (arrived_ms, after
     * they arrived: ~2.6 % of the worker's time on a PVM guest, where a
     * read costs ~50 ns); the last stamp when later keeps the log's in
     * order. */
    int64_t ts = arrived_ms <= 0 ? clock_wall_ms()
                                 : arrived_ms > cl->staged_ts ? arrived_ms : cl->staged_ts;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        struct clog_msg *m = &msgs[i];
        m->phy = w + (int64_t)off;
        m->qoff = m->cq != NULL ? m->cq->next++ : 0;
        clog_encode(base + off, m, ts);
        off += m->len;
    }
    int done = 0;
    if (ERRINJ(ERRINJ_WRITE_FAIL)) {
        err_set("commit log write failed at %lld (injected)", (long long)w);
        rc = -EIO;
        goto rollback;
    }
    for (; done < n; done++) {
        struct clog_msg *m = &msgs[done];
        if (m->cq == NULL)
            continue;
        int64_t tags = m->delay_ms > 0 ? ts + m->delay_ms : m->tags_code;
        rc = cq_write(m->cq, m->qoff, m->phy, (int32_t)m->len, tags);
        if (rc != 0)
            goto rollback;
    }
    *store_ts = ts;
    if (staging) {
        for (int i = 0; i < n; i++) {
            struct clog_msg *m = &msgs[i];
            if (m->cq == NULL)
                continue;
            struct clog_pub *last = cl->npubs > 0 ? &cl->pubs[cl->npubs - 1] : NULL;
            if (last != NULL && last->cq == m->cq) {
                last->next = m->qoff + 1;
            } else {
                cl->pubs[cl->npubs++] = (struct clog_pub){ m->cq, m->qoff, m->qoff + 1 };
            }
        }
        cl->staged_ts = ts;
        atomic_store_explicit(&cl->staged, w + (int64_t)total, memory_order_release);
        if (!defer)
            rc = commit_locked(cl);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (msgs[i].cq != NULL)
            cq_publish(msgs[i].cq, msgs[i].qoff + 1);
    /* The mapping's bytes are as hot as the buffer's: the index takes
     * their metas too (store-svc 0.21 -> 0.07 us a 1 KiB send). */
    if (cl->meta_cap > 0)
        metas_add(cl, base, total, w);
    cl->staged_ts = ts;
    publish_locked(cl, w + (int64_t)total);
    goto out;

rollback:
    /* Nothing was published: undo so the next append reuses the space
     * and the queue offsets, and no stale bytes survive for a recovery
     * scan to find. */
    for (int i = done - 1; i >= 0; i--)
        if (msgs[i].cq != NULL)
            cq_clear(msgs[i].cq, msgs[i].qoff);
    for (int i = n - 1; i >= 0; i--)
        if (msgs[i].cq != NULL)
            msgs[i].cq->next = msgs[i].qoff;
    memset(base, 0, total);  /* the buffer's or the mapping's */
out:
    atomic_store_explicit(&cl->begin_in_lock, 0, memory_order_relaxed);
    unlock_append(cl);
    return rc;
}

int64_t
clog_in_lock_ns(struct commitlog *cl, int64_t now)
{
    int64_t begin = atomic_load_explicit(&cl->begin_in_lock, memory_order_relaxed);
    return begin != 0 && now > begin ? now - begin : 0;
}

/* }}} */

/* {{{ A slave's append (HA) */

int64_t
clog_raw_end(struct commitlog *cl)
{
    slock_lock(&cl->lock);
    int64_t w = atomic_load_explicit(&cl->wrote, memory_order_relaxed);
    int64_t raw = cl->raw_end > w ? cl->raw_end : w;
    slock_unlock(&cl->lock);
    return raw;
}

/* Publishes the complete records in [from, raw): returns the new visible
 * end, the end of the last record dispatched; *rc is set (with err_set())
 * when a record does not decode or cannot be dispatched. */
static int64_t
dispatch_raw(struct commitlog *cl, int64_t from, int64_t raw,
             clog_dispatch_fn dispatch, void *arg, int *rc)
{
    int64_t pos = from;
    int64_t fs = (int64_t)cl->file_size;
    *rc = 0;
    while (pos < raw) {
        struct mfile *f = mfq_find(&cl->q, pos);
        if (f == NULL)
            break;
        int64_t fend = f->start + fs;
        const uint8_t *p = f->base + (pos - f->start);
        int64_t have = (raw < fend ? raw : fend) - pos;
        if (have < 8) {
            mfile_unpin(f);
            break;
        }
        uint32_t size = be32_get(p);
        uint32_t magic = be32_get(p + 4);
        if (magic == CLOG_BLANK_MAGIC && (int64_t)size == fend - pos) {
            mfile_unpin(f);
            if (raw < fend)
                break;  /* the rest of the blank is still to come */
            (void)mfile_set_mtime(f, clock_wall_ms());
            pos = fend;
            continue;
        }
        if (magic != CLOG_MAGIC || size < 8 || (int64_t)size > fend - pos) {
            mfile_unpin(f);
            err_set("replicated bytes at %" PRId64 " are not a record "
                    "(size %u, magic 0x%08X)", pos, size, magic);
            *rc = -EINVAL;
            return pos;
        }
        if ((int64_t)size > have) {
            mfile_unpin(f);
            break;  /* the rest of the record is still to come */
        }
        struct clog_view v;
        int r = clog_decode(p, (size_t)(fend - pos), pos, false, &v);
        mfile_unpin(f);
        if (r != CLOG_REC) {
            err_set("replicated record at %" PRId64 " does not decode", pos);
            *rc = -EINVAL;
            return pos;
        }
        if ((*rc = dispatch(arg, &v, pos)) != 0)
            return pos;
        atomic_store_explicit(&cl->last_ts, v.store_ts, memory_order_relaxed);
        pos += size;
    }
    return pos;
}

int
clog_append_raw(struct commitlog *cl, int64_t phy, const uint8_t *data,
                size_t len, clog_dispatch_fn dispatch, void *arg)
{
    int64_t fs = (int64_t)cl->file_size;
    int rc = 0;
    slock_lock(&cl->lock);
    /* A slave stages nothing; a master turned slave commits first. */
    if ((rc = commit_locked(cl)) != 0)
        goto out;
    int64_t w = atomic_load_explicit(&cl->wrote, memory_order_relaxed);
    int64_t raw = cl->raw_end > w ? cl->raw_end : w;
    if (phy != raw) {
        struct mfile *last = mfq_last(&cl->q);
        bool empty = last == NULL;
        if (last != NULL)
            mfile_unpin(last);
        if (!empty || phy % fs != 0) {
            err_set("replicated bytes at %" PRId64 ", but this log ends at %"
                    PRId64, phy, raw);
            rc = -EINVAL;
            goto out;
        }
        /* A slave on an empty store starts where its master's data does. */
        atomic_store_explicit(&cl->wrote, phy, memory_order_release);
        atomic_store_explicit(&cl->staged, phy, memory_order_release);
        atomic_store_explicit(&cl->min, phy, memory_order_release);
        w = raw = phy;
        cl->cur = NULL;
    }
    if (len == 0)
        goto out;
    if (phy % fs + (int64_t)len > fs) {
        err_set("replicated bytes at %" PRId64 " (%zu) cross a file boundary",
                phy, len);
        rc = -EINVAL;
        goto out;
    }
    struct mfile *f = file_for(cl, phy);
    if (f == NULL) {
        rc = -(errno ? errno : EIO);
        goto out;
    }
    memcpy(f->base + (phy - f->start), data, len);
    raw = phy + (int64_t)len;
    cl->raw_end = raw;
    int64_t end = dispatch_raw(cl, w, raw, dispatch, arg, &rc);
    if (end > w) {
        atomic_store_explicit(&cl->wrote, end, memory_order_release);
        atomic_store_explicit(&cl->staged, end, memory_order_release);
        mfq_writer_at(&cl->q, end);
    }
    if (rc != 0) {
        /* Bytes that could not be applied are not ours: the offset the
         * slave reports (and the master counts as acknowledged) stays at
         * the last record dispatched, and those bytes are taken again. */
        cl->raw_end = end;
    }
out:
    unlock_append(cl);
    return rc;
}

/* }}} */

struct mfile *
clog_pin(struct commitlog *cl, int64_t phy, size_t len, const uint8_t **p)
{
    if (phy < clog_min(cl) || phy + (int64_t)len > clog_wrote(cl))
        return NULL;
    struct mfile *mf = mfq_find(&cl->q, phy);
    if (mf == NULL)
        return NULL;
    size_t pos = (size_t)(phy - mf->start);
    if (pos + len > mf->size) {
        mfile_unpin(mf);
        return NULL;
    }
    *p = mf->base + pos;
    return mf;
}
