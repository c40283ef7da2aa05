/* tmpdir: see tmpdir.h. */
#include "tmpdir.h"

#include <stdio.h>
#include <stdlib.h>

char tdir[256];

int
tdir_setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(tdir, sizeof(tdir), "%s/rmq-ctest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof(tdir))
        return -1;
    return mkdtemp(tdir) == NULL ? -1 : 0;
}

int
tdir_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
    return system(cmd) == 0 ? 0 : -1;
}
