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
 * starting thread (main) still writes its own lines synchronously, as
 * every thread does before the start and after log_close.  A fatal signal
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes what the ring still
 * holds and a line naming the signal, synchronously, before the signal's
 * previous handler (the default, or a sanitizer's) runs.
 *
 * MT: log_write() and friends from any thread; log_open(),
 * log_start_async() and log_close() only from main, before the other
 * threads start / after they are joined.
 */
#ifndef RMQ_LOG_H
#define RMQ_LOG_H

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
 * synchronous then).
 */
int log_start_async(size_t bytes);

/**
 * Writes out what the ring holds (the writer thread ends; a sink that
 * takes nothing for 5 s is given up, with a line on stderr saying how
 * much was not written), then closes a log file opened by log_open();
 * lines go to stderr, synchronously, again.
 */
void log_close(void);

/** Lines dropped because the ring was full, since log_start_async(). */
uint64_t log_dropped_total(void);

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
