/*
 * log: leveled, timestamped lines to stderr or a file.  One line per call,
 * written with a single write(2) so lines from different threads never
 * interleave.  The sink is process-wide state set once at start-up by
 * main (before threads exist); every other call only reads it.
 *
 * Asynchronous lines (log_start_async): a server's threads other than
 * the one that started it (workers, store threads, HTTP) never write to
 * the sink themselves.  A line is formatted on the caller's stack and
 * copied into a bounded ring (logBufferBytes) under a mutex held only for
 * that copy; one thread ("log") writes the ring out.  A slow or blocked
 * sink (a busy disk, a pipe nobody reads) then costs a worker nothing: when
 * the ring is full the line is dropped and counted, and once there is
 * room again the count goes in first, as its own line ("N messages
 * suppressed", syslog's wording), so what follows a gap is never written
 * before the note of it.  Each thread's lines keep their order.  The
 * starting thread (main) writes its own lines synchronously until it
 * calls log_route_self() (the server does once it is READY: start-up
 * errors reach the sink at once, and a blocked sink stops no admin
 * request, handler or console after), as every thread does before the
 * start and after log_close.  A synchronous line is never written inside
 * one of the writer's batches (on a pipe, a batch is larger than
 * PIPE_BUF).  A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT)
 * writes what the ring still holds and a line naming the signal,
 * synchronously, before the signal's previous handler (the default, or a
 * sanitizer's) runs with the signal as it came: a fault with its address.
 *
 * The counts (log_stats) are in memory, or, when the environment names a
 * file in RMQ_LOG_COUNTS at log_start_async, in that file (struct
 * log_counts, mapped shared): a process watching the log reads there
 * when every line queued so far is written (written >= queued).
 *
 * MT: log_write() and friends from any thread; log_open(),
 * log_start_async(), log_route_self() and log_close() only from main,
 * before the other threads start / after they are joined.
 */
#ifndef RMQ_LOG_H
#define RMQ_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR,
};

/** Smallest ring log_start_async() takes: a longest line and its note. */
#define LOG_RING_MIN 4096

/** The writer's largest write(2): its progress, as log_close sees it. */
#define LOG_WRITE_CHUNK ((size_t)16384)

/** log_close's wait for a sink that takes nothing, ms. */
#define LOG_STALL_MS 5000u

/** The counts, as RMQ_LOG_COUNTS's file holds them (native byte order). */
struct log_counts {
    _Atomic uint64_t queued;    /* bytes queued in the ring (lines and notes) */
    _Atomic uint64_t written;   /* bytes of those written (or given up: a failed write) */
    _Atomic uint64_t dropped;   /* lines dropped: the ring was full */
};

struct log_stats {
    uint64_t queued_bytes, written_bytes, dropped_lines;
    size_t ring_bytes;          /* logBufferBytes; 0: no ring */
};

/**
 * Sends log lines to `path` (appending) or to stderr when path is NULL,
 * and drops lines below `level`.  Returns 0, or -errno with err_set().
 */
int log_open(const char *path, enum log_level level);

/**
 * From here on, lines of every thread but the caller go through a ring
 * of `bytes` (at least LOG_RING_MIN) written by a thread of its own;
 * 0 keeps every line synchronous.  Also installs the fatal-signal
 * handlers above.  Returns 0, or -1 with err_set() (lines stay
 * synchronous then; also while a writer log_close gave up is still in
 * write(2): it is joined first, never raced by a second one).
 */
int log_start_async(size_t bytes);

/** From here on the caller's lines go through the ring too (none: it
 * keeps writing them).  The server calls it once READY. */
void log_route_self(void);

/**
 * Writes out what the ring holds (the writer thread ends; a sink that
 * takes nothing for LOG_STALL_MS is given up, with a line on stderr
 * saying how much was not written: its writer ends after the write it
 * is in, and the sink stays open for that write), then closes a log
 * file opened by log_open(); lines go to stderr, synchronously, again.
 */
void log_close(void);

/** log_close, giving a sink up after stall_ms without progress. */
void log_close_stall(unsigned stall_ms);

/** Lines dropped because the ring was full, since the process started. */
uint64_t log_dropped_total(void);

/** The counts since the process started, and the ring's size. */
void log_stats(struct log_stats *out);

/** Parses "debug" / "info" / "warn" / "error"; -1 when unknown. */
int log_level_parse(const char *name);

/** Names this thread in its log lines ("main", "w0", ...). */
void log_set_thread_name(const char *name);

/** True when a line at `level` would be written. */
int log_enabled(enum log_level level);

void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
