/*
 * log: leveled, timestamped lines to stderr or a file.  One line per call,
 * written with a single write(2) so lines from different threads never
 * interleave.  The sink is process-wide state set once at start-up by
 * main (before threads exist); every other call only reads it.
 *
 * MT: log_write() and friends from any thread; log_open() only at start.
 */
#ifndef RMQ_LOG_H
#define RMQ_LOG_H

enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR,
};

/**
 * Sends log lines to `path` (appending) or to stderr when path is NULL,
 * and drops lines below `level`.  Returns 0, or -errno with err_set().
 */
int log_open(const char *path, enum log_level level);

/** Closes a log file opened by log_open(); lines go to stderr again. */
void log_close(void);

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
