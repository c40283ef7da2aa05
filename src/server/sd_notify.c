/* sd_notify: see sd_notify.h. */
#include "server/sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/err.h"

int
sd_notify_send(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path)) {
        err_set("NOTIFY_SOCKET is not a unix socket path: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, n);
    /* "@name": the abstract namespace, whose names start with a NUL and
     * are exactly n bytes long (no terminator counted). */
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                                (path[0] == '@' ? 0 : 1));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err_set("NOTIFY_SOCKET: socket: %s", strerror(errno));
        return -1;
    }
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    int saved = errno;
    (void)close(fd);
    if (w < 0) {
        err_set("NOTIFY_SOCKET %s: %s", path, strerror(saved));
        return -1;
    }
    return 1;
}
