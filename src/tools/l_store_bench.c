/*
 * l_store_bench: the store's benchmark loops (the rmq.store_bench module:
 * put, get, ceiling, disk; also reachable as rmq.store's bench_put,
 * bench_get, bench_ceiling, bench_disk where the tools are linked), in C
 * so that the numbers are the store's and the machine's, not Lua's.
 * scripts/bench/store.lua drives them; each returns elapsed nanoseconds
 * and counts.
 */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/crc32.h"
#include "core/jstr.h"
#include "lua/l_err.h"
#include "lua/l_store.h"
#include "tools/l_tools.h"


struct bench_thread {
    struct store *s;
    struct store_msg m;
    int64_t count;
    int nqueues;
    int first_queue;
    int64_t failed;
    pthread_t th;
};

static void *
bench_put_main(void *arg)
{
    struct bench_thread *t = arg;
    struct store_put_result r;
    for (int64_t i = 0; i < t->count; i++) {
        t->m.qid = t->first_queue + (int32_t)(i % t->nqueues);
        if (store_put(t->s, &t->m, &r) != PUT_OK)
            t->failed++;
    }
    return NULL;
}

/* Message bytes shared by the benchmark loops. */
static uint8_t *
bench_body(size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (b != NULL)
        for (size_t i = 0; i < size; i++)
            b[i] = (uint8_t)('a' + (i * 7 + i / 13) % 26);
    return b;
}

static int
lstore_bench_put(lua_State *L)
{
    struct host_addr host;
    struct store *s = lstore_check(L, 1, &host);
    luaL_checktype(L, 2, LUA_TTABLE);
    int threads = (int)lstore_opt_int(L, 2, "threads", 1);
    int64_t count = lstore_opt_int(L, 2, "count", 100000);
    int64_t size = lstore_opt_int(L, 2, "size", 1024);
    int nq = (int)lstore_opt_int(L, 2, "queues", 4);
    char topic[128] = "BenchTopic";
    lstore_opt_str(L, 2, "topic", topic, sizeof(topic));
    luaL_argcheck(L, threads >= 1 && threads <= 64 && nq >= 1 && size >= 0 &&
                  count >= 1, 2, "bad bench options");
    static const char props[] =
        "KEYS\001bench-key\002UNIQ_KEY\0017F000001000078D2A1B2C3D4E5F60001"
        "\002WAIT\001true\002TAGS\001TagA\002CLUSTER\001DefaultCluster";
    uint8_t *body = bench_body((size_t)size);
    struct bench_thread *t = calloc((size_t)threads, sizeof(*t));
    if (body == NULL || t == NULL) {
        free(body);
        free(t);
        return luaL_error(L, "out of memory");
    }
    int64_t t0 = clock_mono_ns();
    int started = 0;
    for (int i = 0; i < threads; i++) {
        t[i].s = s;
        t[i].count = count / threads;
        t[i].nqueues = nq;
        t[i].first_queue = i * nq;
        struct store_msg *m = &t[i].m;
        m->topic = topic;
        m->topic_len = strlen(topic);
        m->body = body;
        m->body_len = (size_t)size;
        m->props = props;
        m->props_len = sizeof(props) - 1;
        m->born_ts = clock_wall_ms();
        /* As the broker's send path does: TAGS comes parsed, hashed by
         * the binding (a few ns), not found again in the properties. */
        m->has_tags_code = true;
        m->tags_code = java_hash("TagA", 4);
        m->born = host;
        m->store = host;
        if (pthread_create(&t[i].th, NULL, bench_put_main, &t[i]) == 0)
            started++;
        else
            break;
    }
    int64_t failed = 0, done = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i].th, NULL);
        failed += t[i].failed;
        done += t[i].count;
    }
    int64_t t1 = clock_mono_ns();
    free(body);
    free(t);
    if (started < threads)
        return luaL_error(L, "cannot start benchmark threads");
    lua_pushinteger(L, t1 - t0);
    lua_pushinteger(L, done - failed);
    lua_pushinteger(L, failed);
    return 3;
}

static int
lstore_bench_get(lua_State *L)
{
    struct host_addr host;
    struct store *s = lstore_check(L, 1, &host);
    luaL_checktype(L, 2, LUA_TTABLE);
    char topic[128] = "BenchTopic";
    lstore_opt_str(L, 2, "topic", topic, sizeof(topic));
    int nq = (int)lstore_opt_int(L, 2, "queues", 4);
    int batch = (int)lstore_opt_int(L, 2, "batch", 32);
    size_t tlen = strlen(topic);
    struct iovec iov[256];
    struct mfile *pins[256];
    if (batch < 1 || batch > 256)
        return luaL_error(L, "batch must be 1..256");
    struct store_slices sl = { .cap = batch, .iov = iov, .pins = pins };
    int64_t msgs = 0, bytes = 0;
    uint32_t sink = 0;
    int64_t t0 = clock_mono_ns();
    for (int q = 0; q < nq; q++) {
        int64_t off = store_min_offset(s, topic, tlen, q);
        for (;;) {
            struct store_get_result r;
            store_get(s, topic, tlen, q, off, batch, NULL, 0, &sl, &r);
            if (r.status != GET_FOUND) {
                store_slices_release(&sl);
                break;
            }
            for (int i = 0; i < sl.n; i++)
                sink += ((const uint8_t *)iov[i].iov_base)[iov[i].iov_len - 1];
            msgs += sl.n;
            bytes += (int64_t)sl.bytes;
            store_slices_release(&sl);
            off = r.next;
        }
    }
    int64_t t1 = clock_mono_ns();
    lua_pushinteger(L, t1 - t0);
    lua_pushinteger(L, msgs);
    lua_pushinteger(L, bytes + (sink & 0));
    return 3;
}

/*
 * The machine's ceiling for a put: copy the same bytes into fresh,
 * pre-faulted memory (like a warmed mapped file) and crc32 them.
 */
static int
lstore_bench_ceiling(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    int64_t size = lstore_opt_int(L, 1, "size", 1024);
    int64_t count = lstore_opt_int(L, 1, "count", 1000000);
    int64_t region = lstore_opt_int(L, 1, "region", 256 << 20);
    luaL_argcheck(L, size >= 1 && count >= 1 && region >= size, 1, "bad options");
    uint8_t *body = bench_body((size_t)size);
    uint8_t *dst = mmap(NULL, (size_t)region, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (body == NULL || dst == MAP_FAILED) {
        free(body);
        if (dst != MAP_FAILED)
            munmap(dst, (size_t)region);
        return luaL_error(L, "out of memory");
    }
    /* Fault every page in writable first (MAP_POPULATE would map the
     * zero page, and the copies would measure copy-on-write faults). */
    memset(dst, 1, (size_t)region);
    int64_t per = region / size;
    uint32_t acc = 0;
    int64_t t0 = clock_mono_ns();
    for (int64_t i = 0; i < count; i++) {
        uint8_t *d = dst + (i % per) * size;
        memcpy(d, body, (size_t)size);
        acc ^= rmq_crc32(0, body, (size_t)size);
    }
    int64_t t1 = clock_mono_ns();
    munmap(dst, (size_t)region);
    free(body);
    lua_pushinteger(L, t1 - t0);
    lua_pushinteger(L, acc & 0);
    return 2;
}

/* Sequential write bandwidth: write() 1 MiB blocks, then fdatasync. */
static int
lstore_bench_disk(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int64_t total = (int64_t)luaL_checkinteger(L, 2);
    size_t blk = 1 << 20;
    uint8_t *buf = bench_body(blk);
    if (buf == NULL)
        return luaL_error(L, "out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(buf);
        return lerr_pushstr(L, strerror(errno));
    }
    int64_t t0 = clock_mono_ns(), done = 0;
    int err = 0;
    while (done < total) {
        ssize_t w = write(fd, buf, blk);
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        done += w;
    }
    if (err == 0 && fdatasync(fd) != 0)
        err = errno;
    int64_t t1 = clock_mono_ns();
    close(fd);
    (void)unlink(path);
    free(buf);
    if (err != 0)
        return lerr_pushstr(L, strerror(err));
    lua_pushinteger(L, t1 - t0);
    lua_pushinteger(L, done);
    return 2;
}

int
luaopen_rmq_store_bench(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "put", lstore_bench_put },
        { "get", lstore_bench_get },
        { "ceiling", lstore_bench_ceiling },
        { "disk", lstore_bench_disk },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}
