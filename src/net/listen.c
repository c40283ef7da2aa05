/* listen: see listen.h. */
#include "net/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/err.h"

int
listen_socket(const char *host, int port, int backlog, int *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        len = sizeof(*a4);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        len = sizeof(*a6);
    } else {
        err_set("bindAddress '%s' is not an IPv4 or IPv6 address", host);
        return -EINVAL;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        err_set("socket: %s", strerror(e));
        return -e;
    }
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        int e = errno;
        err_set("setsockopt: %s", strerror(e));
        close(fd);
        return -e;
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        int e = errno;
        err_set("cannot listen on %s:%d: %s", host, port, strerror(e));
        close(fd);
        return -e;
    }
    if (listen(fd, backlog) != 0) {
        int e = errno;
        err_set("listen on %s:%d: %s", host, port, strerror(e));
        close(fd);
        return -e;
    }
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        int e = errno;
        err_set("getsockname: %s", strerror(e));
        close(fd);
        return -e;
    }
    *bound_port = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return fd;
}
