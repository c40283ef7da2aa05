/* err: per-thread last-error message (see err.h). */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char err_buf[512];

void
err_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
}

const char *
err_msg(void)
{
    return err_buf;
}
