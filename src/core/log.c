/*
 * log: see log.h.  The sink (fd and level) is the one piece of
 * process-wide state in the core: a log is by nature shared by every
 * thread, and passing it through every call would buy nothing.  It is
 * written only by log_open()/log_close() at start and exit, and read with
 * relaxed atomics everywhere else.
 */
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"

static struct {
    atomic_int fd;
    atomic_int level;
} log_sink = { 2, LOG_INFO };

static _Thread_local char log_thread[16] = "main";

static const char *const level_names[] = { "DEBUG", "INFO", "WARN", "ERROR" };

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

void
log_close(void)
{
    int fd = atomic_exchange(&log_sink.fd, 2);
    if (fd > 2)
        close(fd);
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
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02d %02d:%02d:%02d.%03d %-5s [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     level_names[level], log_thread);
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
    int fd = atomic_load_explicit(&log_sink.fd, memory_order_relaxed);
    /* A failed log write has nowhere to be reported; drop it. */
    ssize_t w = write(fd, line, len);
    (void)w;
}
