/*
 * log: see log.h.  The sink (fd and level) and the ring are the one piece
 * of process-wide state in the core: a log is by nature shared by every
 * thread, and passing it through every call would buy nothing.  The sink
 * is written only by log_open()/log_close() at start and exit, and read
 * with relaxed atomics everywhere else; the ring is under its mutex.
 */
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"

#define LINE_MAX_BYTES 2048

static struct {
    atomic_int fd;
    atomic_int level;
} log_sink = { 2, LOG_INFO };

/*
 * The ring: bytes [head, head + len) (mod cap) are whole lines not yet
 * written; the writer thread writes [head, head + inflight) without the
 * lock.  head/len/inflight are atomics only so that the fatal-signal
 * handler, which cannot take the lock, reads them without a data race;
 * everyone else changes them under mu.
 */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* the writer waits here for lines or stop */
    char *buf;
    size_t cap;
    atomic_size_t head, len, inflight;
    uint64_t dropped;           /* lines dropped since the last note */
    /* The counts (struct log_counts): ring.own, or the shared file
     * RMQ_LOG_COUNTS names.  queued and dropped change under mu; written
     * by the writer after each write(2). */
    struct log_counts *counts;
    struct log_counts own;
    size_t mapped;              /* bytes mapped for counts; 0: own */
    bool running;               /* lines of other threads go here */
    bool stop;                  /* log_close: write what is left, end */
    bool started;               /* the writer thread exists (join it) */
    /* log_close gave the writer up (stuck in write(2)): its thread and
     * buffer live on; a later log_start_async joins it first, or refuses
     * (a second writer would write the new ring beside it). */
    bool abandoned;
    char *abandoned_buf;
    int abandoned_fd;           /* its sink, left open for it (-1: none) */
    pthread_t thread;
    /* Held by the writer over a batch's writes and by a synchronous line
     * while the writer runs: on a pipe, neither is cut into the other
     * (a batch is larger than PIPE_BUF). */
    pthread_mutex_t wmu;
    atomic_bool writer_on;      /* a synchronous line takes wmu */
} ring = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
           .wmu = PTHREAD_MUTEX_INITIALIZER, .counts = &ring.own, .abandoned_fd = -1 };

/* The threads that write their own lines: the one that started the ring
 * until log_route_self() (log.h). */
static _Thread_local bool log_sync_thread;
static _Thread_local char log_thread[16] = "main";

static const char *const level_names[] = { "DEBUG", "INFO", "WARN", "ERROR" };

static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
#define NFATAL (sizeof(fatal_signals) / sizeof(fatal_signals[0]))
static struct sigaction fatal_old[NFATAL];
static bool fatal_installed;

int
log_open(const char *path, enum log_level level)
{
    atomic_store(&log_sink.level, (int)level);
    if (path == NULL)
        return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        err_set("cannot open log file %s: %s", path, strerror(e));
        return -e;
    }
    atomic_store(&log_sink.fd, fd);
    return 0;
}

/* Writes all of p; a failed write has nowhere to be reported, so what
 * is left of it is dropped. */
static void
write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* "YYYY-MM-DD HH:MM:SS.mmm LEVEL [thread] " into line; its length or -1. */
static int
line_head(char *line, size_t cap, const char *level, const char *thread)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    return snprintf(line, cap, "%04d-%02d-%02d %02d:%02d:%02d.%03d %-5s [%s] ",
                    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                    tm.tm_sec, (int)(tv.tv_usec / 1000), level, thread);
}

/* {{{ The ring (under ring.mu) */

static void
ring_copy_in(const char *p, size_t n)
{
    size_t head = atomic_load_explicit(&ring.head, memory_order_relaxed);
    size_t len = atomic_load_explicit(&ring.len, memory_order_relaxed);
    size_t at = (head + len) % ring.cap;
    size_t first = ring.cap - at < n ? ring.cap - at : n;
    memcpy(ring.buf + at, p, first);
    memcpy(ring.buf, p + first, n - first);
    /* Release: the signal handler reads the bytes after seeing len. */
    atomic_store_explicit(&ring.len, len + n, memory_order_release);
    atomic_fetch_add_explicit(&ring.counts->queued, n, memory_order_relaxed);
}

static size_t
ring_room(void)
{
    return ring.cap - atomic_load_explicit(&ring.len, memory_order_relaxed);
}

/* The note of the lines dropped since the last one, if it fits with
 * `after` more bytes behind it.  True when there is none to write now. */
static bool
ring_note(size_t after)
{
    if (ring.dropped == 0)
        return true;
    char note[256];
    int n = line_head(note, sizeof(note), "WARN", "log");
    if (n < 0)
        return false;
    int m = snprintf(note + n, sizeof(note) - (size_t)n,
                     "%llu messages suppressed (the log file took lines slower than they came; "
                     "logBufferBytes is full)\n", (unsigned long long)ring.dropped);
    if (m < 0 || (size_t)(n + m) >= sizeof(note))
        return false;
    if ((size_t)(n + m) + after > ring_room())
        return false;
    ring_copy_in(note, (size_t)(n + m));
    ring.dropped = 0;
    pthread_cond_signal(&ring.cv);
    return true;
}

/* Queues one line; false when there is no ring (write it yourself). */
static bool
ring_put(const char *line, size_t n)
{
    pthread_mutex_lock(&ring.mu);
    if (!ring.running || ring.stop) {
        pthread_mutex_unlock(&ring.mu);
        return false;
    }
    /* After a gap its note goes first; until it fits, nothing does. */
    if (!ring_note(n) || n > ring_room()) {
        ring.dropped++;
        atomic_fetch_add_explicit(&ring.counts->dropped, 1, memory_order_relaxed);
    } else {
        ring_copy_in(line, n);
        pthread_cond_signal(&ring.cv);
    }
    pthread_mutex_unlock(&ring.mu);
    return true;
}

/* Writes all of a[0..n) and b[0..m) (the ring's part before its end and
 * after), in writes of at most LOG_WRITE_CHUNK bytes each counted in
 * written as it returns: log_close sees a slow sink make progress (a
 * blocking write to a pipe returns only once all of it is in, so one
 * write of a whole batch would show none until the end).  What fails is
 * dropped, as in write_all. */
static void
write_batch(int fd, const char *a, size_t n, const char *b, size_t m)
{
    struct iovec v[2] = { { (void *)a, n }, { (void *)b, m } };
    int cnt = m > 0 ? 2 : 1;
    struct iovec *p = v;
    while (cnt > 0) {
        /* This call's part: at most LOG_WRITE_CHUNK bytes, across the wrap. */
        struct iovec c[2];
        int nc = 0;
        size_t want = 0;
        for (int i = 0; i < cnt && want < LOG_WRITE_CHUNK; i++) {
            size_t take = p[i].iov_len < LOG_WRITE_CHUNK - want ? p[i].iov_len
                                                               : LOG_WRITE_CHUNK - want;
            c[nc++] = (struct iovec){ p[i].iov_base, take };
            want += take;
        }
        /* More follows this part: end it after its last newline, so a
         * write holds whole lines (another process appending to the same
         * file or pipe lands between lines, never inside one).  A line is
         * at most LINE_MAX_BYTES, far under a part: one is always found. */
        size_t left = 0;
        for (int i = 0; i < cnt; i++)
            left += p[i].iov_len;
        if (left > want) {
            for (int i = nc - 1; i >= 0; i--) {
                const char *base = c[i].iov_base;
                const char *nl = memrchr(base, '\n', c[i].iov_len);
                if (nl != NULL) {
                    c[i].iov_len = (size_t)(nl - base) + 1;
                    nc = i + 1;
                    break;
                }
            }
        }
        ssize_t w = writev(fd, c, nc);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        atomic_fetch_add_explicit(&ring.counts->written, (uint64_t)w, memory_order_relaxed);
        size_t done = (size_t)w;
        while (cnt > 0 && done >= p->iov_len) {
            done -= p->iov_len;
            p++;
            cnt--;
        }
        if (cnt > 0) {
            p->iov_base = (char *)p->iov_base + done;
            p->iov_len -= done;
        }
    }
}

static void *
writer_main(void *arg)
{
    (void)arg;
    log_set_thread_name("log");
    /* For top -H and perf. */
    pthread_setname_np(pthread_self(), "rmq-log");
    pthread_mutex_lock(&ring.mu);
    for (;;) {
        size_t len = atomic_load_explicit(&ring.len, memory_order_relaxed);
        if (len == 0) {
            if (ring.dropped > 0 && ring_note(0))
                continue;
            if (ring.stop)
                break;
            pthread_cond_wait(&ring.cv, &ring.mu);
            continue;
        }
        /* Everything queued, in one writev(2) of whole lines (the part
         * before the buffer's end and the part after), written without
         * the lock: producers only add behind it meanwhile. */
        size_t head = atomic_load_explicit(&ring.head, memory_order_relaxed);
        size_t first = ring.cap - head < len ? ring.cap - head : len;
        atomic_store_explicit(&ring.inflight, len, memory_order_relaxed);
        pthread_mutex_unlock(&ring.mu);
        pthread_mutex_lock(&ring.wmu);
        size_t before = (size_t)atomic_load_explicit(&ring.counts->written, memory_order_relaxed);
        write_batch(atomic_load_explicit(&log_sink.fd, memory_order_relaxed), ring.buf + head,
                    first, ring.buf, len - first);
        /* What the sink refused is given up: counted as written, so the
         * counts still say "nothing queued is left". */
        size_t did = (size_t)atomic_load_explicit(&ring.counts->written, memory_order_relaxed) - before;
        if (did < len)
            atomic_fetch_add_explicit(&ring.counts->written, len - did, memory_order_relaxed);
        pthread_mutex_unlock(&ring.wmu);
        pthread_mutex_lock(&ring.mu);
        atomic_store_explicit(&ring.head, (head + len) % ring.cap, memory_order_relaxed);
        atomic_store_explicit(&ring.inflight, 0, memory_order_relaxed);
        atomic_store_explicit(&ring.len, atomic_load_explicit(&ring.len, memory_order_relaxed) - len,
                              memory_order_relaxed);
        /* Given up by log_close: the rest is not written (log_close said
         * how much), counted as written like a refused write; and no
         * later batch goes to whatever the sink is by now. */
        if (ring.abandoned) {
            atomic_fetch_add_explicit(&ring.counts->written,
                                      atomic_load_explicit(&ring.len, memory_order_relaxed),
                                      memory_order_relaxed);
            break;
        }
        /* Room again: the note of a gap goes in before any later line. */
        if (ring.dropped > 0)
            (void)ring_note(0);
    }
    pthread_mutex_unlock(&ring.mu);
    return NULL;
}

/* }}} */

/* {{{ Fatal signals */

/* Async-signal-safe: write(2) only.  The ring's state is read without
 * the lock (a thread may have died holding it). */
static void
on_fatal_signal(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    int fd = atomic_load_explicit(&log_sink.fd, memory_order_relaxed);
    if (ring.buf != NULL) {
        size_t head = atomic_load_explicit(&ring.head, memory_order_relaxed);
        size_t len = atomic_load_explicit(&ring.len, memory_order_acquire);
        size_t skip = atomic_load_explicit(&ring.inflight, memory_order_relaxed);
        if (skip < len && len <= ring.cap) {
            size_t at = (head + skip) % ring.cap, n = len - skip;
            size_t first = ring.cap - at < n ? ring.cap - at : n;
            write_all(fd, ring.buf + at, first);
            write_all(fd, ring.buf, n - first);
        }
    }
    char msg[128] = "---- fatal signal ";
    size_t n = strlen(msg);
    char digits[8];
    int nd = 0;
    for (int v = sig; v > 0 && nd < 7; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    while (nd > 0)
        msg[n++] = digits[--nd];
    const char *in = " in thread ";
    for (size_t i = 0; in[i] != '\0'; i++)
        msg[n++] = in[i];
    for (size_t i = 0; log_thread[i] != '\0' && i < sizeof(log_thread); i++)
        msg[n++] = log_thread[i];
    msg[n++] = '\n';
    write_all(fd, msg, n);
    /* The handler before ours (the default: a core; a sanitizer's
     * report) gets the signal as it came.  A fault the kernel raised
     * (si_code > 0) of SIGSEGV, SIGBUS, SIGILL or SIGFPE comes again when
     * this returns, with its own address and code: the instruction runs
     * again.  (raise() would hand that handler a kill, SI_TKILL, with no
     * fault address: a core or an ASan report of a kill.)  Anything else
     * (a kill, abort()'s raise) is raised again. */
    for (size_t i = 0; i < NFATAL; i++)
        if (fatal_signals[i] == sig)
            sigaction(sig, &fatal_old[i], NULL);
    if (si != NULL && si->si_code > 0 && sig != SIGABRT)
        return;
    raise(sig);
}

static void
fatal_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;   /* a sanitizer's alternate stack, if any */
    for (size_t i = 0; i < NFATAL; i++)
        if (sigaction(fatal_signals[i], &sa, &fatal_old[i]) != 0)
            fatal_old[i].sa_handler = SIG_DFL;
    fatal_installed = true;
}

static void
fatal_uninstall(void)
{
    if (!fatal_installed)
        return;
    for (size_t i = 0; i < NFATAL; i++)
        sigaction(fatal_signals[i], &fatal_old[i], NULL);
    fatal_installed = false;
}

/* }}} */

/* RMQ_LOG_COUNTS=PATH: the counts live in that file, mapped shared, so
 * that a process watching the log (the specs' harness) knows exactly
 * when every line queued so far is in the log file.  Any failure keeps
 * them in memory: the log itself does not depend on it. */
static void
counts_map(void)
{
    const char *path = getenv("RMQ_LOG_COUNTS");
    if (path == NULL || path[0] == '\0' || ring.mapped > 0)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_warn("RMQ_LOG_COUNTS %s: %s; the log's counts stay in memory", path, strerror(errno));
        return;
    }
    size_t n = sizeof(struct log_counts);
    void *p = ftruncate(fd, (off_t)n) == 0
                  ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        log_warn("RMQ_LOG_COUNTS %s: %s; the log's counts stay in memory", path, strerror(e));
        return;
    }
    struct log_counts *c = p;
    atomic_store(&c->queued, atomic_load(&ring.own.queued));
    atomic_store(&c->written, atomic_load(&ring.own.written));
    atomic_store(&c->dropped, atomic_load(&ring.own.dropped));
    ring.counts = c;
    ring.mapped = n;
}

/* Back to ring.own (the writer is gone). */
static void
counts_unmap(void)
{
    if (ring.mapped == 0)
        return;
    struct log_counts *c = ring.counts;
    atomic_store(&ring.own.queued, atomic_load(&c->queued));
    atomic_store(&ring.own.written, atomic_load(&c->written));
    atomic_store(&ring.own.dropped, atomic_load(&c->dropped));
    ring.counts = &ring.own;
    munmap(c, ring.mapped);
    ring.mapped = 0;
}

int
log_start_async(size_t bytes)
{
    log_sync_thread = true;
    if (bytes == 0 || ring.started)
        return 0;
    if (bytes < LOG_RING_MIN)
        bytes = LOG_RING_MIN;
    if (ring.abandoned) {
        if (pthread_tryjoin_np(ring.thread, NULL) != 0) {
            err_set("the log writer given up at the last close is still in write(2)");
            return -1;
        }
        ring.abandoned = false;
        free(ring.abandoned_buf);
        ring.abandoned_buf = NULL;
        if (ring.abandoned_fd > 2)
            close(ring.abandoned_fd);
        ring.abandoned_fd = -1;
        counts_unmap();
    }
    char *buf = malloc(bytes);
    if (buf == NULL) {
        err_set("out of memory for the log's ring (%zu bytes)", bytes);
        return -1;
    }
    counts_map();
    pthread_mutex_lock(&ring.mu);
    ring.buf = buf;
    ring.cap = bytes;
    atomic_store(&ring.head, 0);
    atomic_store(&ring.len, 0);
    atomic_store(&ring.inflight, 0);
    ring.dropped = 0;
    ring.stop = false;
    ring.running = true;
    pthread_mutex_unlock(&ring.mu);
    atomic_store(&ring.writer_on, true);
    int rc = pthread_create(&ring.thread, NULL, writer_main, NULL);
    if (rc != 0) {
        atomic_store(&ring.writer_on, false);
        pthread_mutex_lock(&ring.mu);
        ring.running = false;
        ring.buf = NULL;
        pthread_mutex_unlock(&ring.mu);
        free(buf);
        counts_unmap();
        err_set("cannot start the log writer: %s", strerror(rc));
        return -1;
    }
    ring.started = true;
    fatal_install();
    return 0;
}

void
log_route_self(void)
{
    log_sync_thread = false;
}

/* The writer writes what is left and ends; a sink that takes nothing
 * for stall_ms (a pipe nobody reads) is given up rather than hang the
 * exit.  Progress is each write(2) the writer finishes (at most
 * LOG_WRITE_CHUNK bytes), so a slow sink is waited for as long as it
 * takes lines. */
static void
ring_stop(unsigned stall_ms)
{
    if (!ring.started)
        return;
    pthread_mutex_lock(&ring.mu);
    ring.stop = true;
    pthread_cond_signal(&ring.cv);
    pthread_mutex_unlock(&ring.mu);
    for (;;) {
        uint64_t before = atomic_load(&ring.counts->written);
        /* Monotonic: a step of the wall clock (NTP at a fresh boot)
         * neither cuts the wait short nor stretches it. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += stall_ms / 1000;
        ts.tv_nsec += (long)(stall_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_clockjoin_np(ring.thread, NULL, CLOCK_MONOTONIC, &ts) == 0)
            break;
        if (atomic_load(&ring.counts->written) == before) {
            /* The writer is stuck in write(2): it, its buffer and the
             * counts it writes stay; wmu is its. */
            atomic_store(&ring.writer_on, false);
            pthread_mutex_lock(&ring.mu);
            size_t left = atomic_load(&ring.len);
            ring.running = false;
            ring.abandoned = true;
            ring.abandoned_buf = ring.buf;
            pthread_mutex_unlock(&ring.mu);
            fatal_uninstall();
            fprintf(stderr, "rmq-server: log: %zu bytes of log lines not written (the log file "
                            "took none for %u ms)\n", left, stall_ms);
            ring.started = false;
            return;
        }
    }
    atomic_store(&ring.writer_on, false);
    fatal_uninstall();
    pthread_mutex_lock(&ring.mu);
    ring.running = false;
    char *buf = ring.buf;
    ring.buf = NULL;
    pthread_mutex_unlock(&ring.mu);
    free(buf);
    counts_unmap();
    ring.started = false;
}

void
log_close_stall(unsigned stall_ms)
{
    ring_stop(stall_ms);
    log_sync_thread = true;
    int fd = atomic_exchange(&log_sink.fd, 2);
    /* A writer given up still writes its batch there: closed once it is
     * joined (a number reused by the next log_open would take the rest
     * of that batch). */
    if (ring.abandoned)
        ring.abandoned_fd = fd;
    else if (fd > 2)
        close(fd);
}

void
log_close(void)
{
    log_close_stall(LOG_STALL_MS);
}

uint64_t
log_dropped_total(void)
{
    return atomic_load_explicit(&ring.counts->dropped, memory_order_relaxed);
}

void
log_stats(struct log_stats *out)
{
    const struct log_counts *c = ring.counts;
    out->queued_bytes = atomic_load_explicit(&c->queued, memory_order_relaxed);
    out->written_bytes = atomic_load_explicit(&c->written, memory_order_relaxed);
    out->dropped_lines = atomic_load_explicit(&c->dropped, memory_order_relaxed);
    out->ring_bytes = ring.cap;
}

int
log_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    if (strcasecmp(name, "warning") == 0)
        return LOG_WARN;
    return -1;
}

void
log_set_thread_name(const char *name)
{
    snprintf(log_thread, sizeof(log_thread), "%s", name);
}

int
log_enabled(enum log_level level)
{
    return (int)level >= atomic_load_explicit(&log_sink.level,
                                              memory_order_relaxed);
}

void
log_write(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[LINE_MAX_BYTES];
    int n = line_head(line, sizeof(line), level_names[level], log_thread);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;  /* truncated: still end the line */
    line[len++] = '\n';
    if (!log_sync_thread && ring_put(line, len))
        return;
    /* Synchronous (main before READY; any thread without a ring): while
     * the writer runs, not inside one of its batches. */
    if (atomic_load_explicit(&ring.writer_on, memory_order_acquire)) {
        pthread_mutex_lock(&ring.wmu);
        write_all(atomic_load_explicit(&log_sink.fd, memory_order_relaxed), line, len);
        pthread_mutex_unlock(&ring.wmu);
        return;
    }
    write_all(atomic_load_explicit(&log_sink.fd, memory_order_relaxed), line, len);
}
