/*
 * ceiling_server: a do-nothing RocketMQ remoting server, for measurement
 * only (scripts/bench/ceiling.sh).  Not part of rmq, not installed.
 *
 *   rmq-ceiling-server [THREADS]
 *
 * Listens on 127.0.0.1, an ephemeral port, prints "READY broker=ADDR"
 * on stdout, and answers every request frame with one fixed SEND_OK
 * reply (JSON header, the request's opaque, no body), the shape of a
 * broker's SEND_MESSAGE_V2 reply.  It decodes nothing but the frame
 * length and the opaque, stores nothing, and batches as the load lets
 * it: every frame that one read() brings gets its reply in one write().
 * So it costs what moving the bytes through the kernel costs: the ceiling
 * a broker's CPU per message is compared with, driven by the same load
 * generator (`rmq bench produce --broker ADDR`).
 *
 * THREADS (default 1) epoll loops, each with its own SO_REUSEPORT
 * listening socket on the same port (the kernel spreads connections).
 * Runs until killed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FRAME (64u << 20)
#define IN_CAP (1u << 20)

struct peer {
    int fd;
    uint8_t *in;          /* IN_CAP bytes; a frame larger is skipped */
    size_t have;          /* bytes in `in` */
    size_t skip;          /* body bytes of a large frame still to drop */
    uint8_t *out;
    size_t out_len, out_cap;
};

static const char REPLY_A[] = "{\"code\":0,\"extFields\":{\"msgId\":\"7F00000100002A9F0000000000000000\","
                              "\"queueId\":\"0\",\"queueOffset\":\"0\",\"MSG_REGION\":\"DefaultRegion\","
                              "\"TRACE_ON\":\"true\"},\"flag\":1,\"language\":\"C\",\"opaque\":";
static const char REPLY_B[] = ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":395}";

static void
die(const char *what)
{
    perror(what);
    exit(1);
}

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The request's opaque: binary header (serialize type 1) at header
 * offset 5; JSON: the number after "opaque":. */
static int32_t
opaque_of(const uint8_t *frame, size_t len)
{
    if (len < 8)
        return 0;
    uint32_t hl = be32(frame + 4);
    size_t hlen = hl & 0xFFFFFF;
    const uint8_t *h = frame + 8;
    if (hlen > len - 8)
        hlen = len - 8;
    if ((hl >> 24) == 1)
        return hlen >= 9 ? (int32_t)be32(h + 5) : 0;
    const char *key = "\"opaque\":";
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl < hlen; i++) {
        if (memcmp(h + i, key, kl) == 0) {
            long v = 0;
            int neg = 0;
            size_t j = i + kl;
            if (j < hlen && h[j] == '-') {
                neg = 1;
                j++;
            }
            while (j < hlen && h[j] >= '0' && h[j] <= '9' && v < 1000000000000L)
                v = v * 10 + (h[j++] - '0');
            return (int32_t)(neg ? -v : v);
        }
    }
    return 0;
}

static void
out_reserve(struct peer *p, size_t more)
{
    if (p->out_len + more <= p->out_cap)
        return;
    size_t cap = p->out_cap ? p->out_cap : 4096;
    while (cap < p->out_len + more)
        cap *= 2;
    uint8_t *n = realloc(p->out, cap);
    if (!n)
        die("realloc");
    p->out = n;
    p->out_cap = cap;
}

static void
add_reply(struct peer *p, int32_t opaque)
{
    char num[16];
    int nl = snprintf(num, sizeof(num), "%d", opaque);
    size_t hlen = sizeof(REPLY_A) - 1 + (size_t)nl + sizeof(REPLY_B) - 1;
    out_reserve(p, 8 + hlen);
    uint8_t *o = p->out + p->out_len;
    put_be32(o, (uint32_t)(4 + hlen));
    put_be32(o + 4, (uint32_t)hlen);   /* serialize type 0: JSON */
    o += 8;
    memcpy(o, REPLY_A, sizeof(REPLY_A) - 1);
    o += sizeof(REPLY_A) - 1;
    memcpy(o, num, (size_t)nl);
    o += nl;
    memcpy(o, REPLY_B, sizeof(REPLY_B) - 1);
    p->out_len += 8 + hlen;
}

/* Writes what is pending; 0 = all written, -1 = the peer is gone.  The
 * generator keeps a bounded number of requests in flight, so a reply
 * batch is small and a blocking-ish retry loop is enough here. */
static int
flush_out(struct peer *p)
{
    size_t off = 0;
    while (off < p->out_len) {
        ssize_t n = write(p->fd, p->out + off, p->out_len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            continue;
        } else {
            return -1;
        }
    }
    p->out_len = 0;
    return 0;
}

/* Reads what is there, answers every whole frame; -1 = close. */
static int
on_readable(struct peer *p)
{
    for (;;) {
        ssize_t n = read(p->fd, p->in + p->have, IN_CAP - p->have);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        p->have += (size_t)n;
        size_t at = 0;
        for (;;) {
            if (p->skip) {
                size_t d = p->have - at < p->skip ? p->have - at : p->skip;
                at += d;
                p->skip -= d;
                if (p->skip)
                    break;
            }
            if (p->have - at < 4)
                break;
            uint32_t flen = be32(p->in + at);
            if (flen < 4 || flen > MAX_FRAME)
                return -1;
            if (4 + (size_t)flen > IN_CAP) {
                /* Larger than the buffer: the header is at its front. */
                if (p->have - at < 8 + 64)
                    break;
                add_reply(p, opaque_of(p->in + at, p->have - at));
                p->skip = 4 + (size_t)flen;
                continue;
            }
            if (p->have - at < 4 + (size_t)flen)
                break;
            add_reply(p, opaque_of(p->in + at, 4 + (size_t)flen));
            at += 4 + (size_t)flen;
        }
        memmove(p->in, p->in + at, p->have - at);
        p->have -= at;
        if ((size_t)n < IN_CAP - p->have)
            break;   /* the socket is drained for now */
    }
    return p->out_len ? flush_out(p) : 0;
}

static int listen_port;
static pthread_mutex_t port_mu = PTHREAD_MUTEX_INITIALIZER;

static int
open_listener(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
        die("SO_REUSEPORT");
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pthread_mutex_lock(&port_mu);
    a.sin_port = htons((uint16_t)listen_port);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("bind");
    if (listen_port == 0) {
        socklen_t al = sizeof(a);
        if (getsockname(fd, (struct sockaddr *)&a, &al) != 0)
            die("getsockname");
        listen_port = ntohs(a.sin_port);
    }
    pthread_mutex_unlock(&port_mu);
    if (listen(fd, 128) != 0)
        die("listen");
    return fd;
}

static void *
loop(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    int ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0)
        die("epoll_ctl");
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct peer *p = evs[i].data.ptr;
            if (!p) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0)
                    continue;
                int one = 1;
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                p = calloc(1, sizeof(*p));
                if (!p || !(p->in = malloc(IN_CAP)))
                    die("malloc");
                p->fd = fd;
                struct epoll_event pe = { .events = EPOLLIN, .data.ptr = p };
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &pe) != 0)
                    die("epoll_ctl");
                continue;
            }
            if (on_readable(p) != 0) {
                (void)epoll_ctl(ep, EPOLL_CTL_DEL, p->fd, NULL);
                close(p->fd);
                free(p->in);
                free(p->out);
                free(p);
            }
        }
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "usage: rmq-ceiling-server [THREADS 1..64]\n");
        return 2;
    }
    int fds[64];
    for (int i = 0; i < threads; i++)
        fds[i] = open_listener();
    printf("READY broker=127.0.0.1:%d threads=%d\n", listen_port, threads);
    fflush(stdout);
    for (int i = 1; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, loop, (void *)(intptr_t)fds[i]) != 0)
            die("pthread_create");
    }
    loop((void *)(intptr_t)fds[0]);
    return 0;
}
