/*
 * tls_keyupdate: a TLS 1.3 peer that makes the server write without
 * asking for a reply, for spec/integration/tls_spec.lua.  It completes
 * the handshake, sends the first 8 bytes of a frame (so no request is
 * ever complete), then loops SSL_key_update(REQUESTED) -- each one makes
 * the server send a KeyUpdate back -- with one more byte of the frame
 * every 16 updates, and never reads.  A server that keeps reading piles
 * its answers up in memory; one that stops reading once its output is
 * over the high-water mark makes this peer's writes block.
 *
 *   tls_keyupdate HOST PORT SECONDS HOLD
 *
 * Stops after SECONDS or once a write has blocked for a second, prints
 * "updates=N blocked=0|1 seconds=S", then keeps the connection open HOLD seconds
 * more (so the spec can look at the server meanwhile).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
fail(const char *what)
{
    fprintf(stderr, "tls_keyupdate: %s\n", what);
    ERR_print_errors_fp(stderr);
    return 2;
}

int
main(int argc, char **argv)
{
    if (argc != 5)
        return fail("usage: tls_keyupdate HOST PORT SECONDS HOLD");
    double seconds = atof(argv[3]);
    unsigned hold = (unsigned)atoi(argv[4]);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
        return fail("bad address");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    /* Small buffers, set before connecting (so the window is small from
     * the start): what the server sends backs up after a few KiB, and
     * what this peer sends blocks soon after the server stops reading,
     * however fast either side runs. */
    int small = 4096, mss = 536;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) != 0)
        return fail("socket");
    /* A small MSS also keeps the server's send buffer small (the kernel
     * sizes it by segments). */
    if (setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)) != 0)
        return fail("TCP_MAXSEG");
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return fail("connect failed");
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1)
        return fail("SSL_CTX_new");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1)
        return fail("handshake failed");
    /* Blocking writes that give up after a second: "blocked" means the
     * server stopped reading. */
    struct timeval tv = {1, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
        return fail("SO_SNDTIMEO");
    /* a frame of 1 MiB announced, header length 64: never completed */
    static const unsigned char prefix[8] = {0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40};
    if (SSL_write(ssl, prefix, sizeof(prefix)) != (int)sizeof(prefix))
        return fail("write failed");
    long updates = 0;
    int blocked = 0;
    double end = now_s() + seconds;
    while (!blocked && now_s() < end) {
        for (int i = 0; i < 16; i++) {
            if (SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) != 1)
                return fail("SSL_key_update");
            /* sends the KeyUpdate now */
            if (SSL_do_handshake(ssl) != 1) {
                blocked = 1;
                break;
            }
            updates++;
        }
        if (!blocked && SSL_write(ssl, "x", 1) != 1)
            blocked = 1;
    }
    printf("updates=%ld blocked=%d seconds=%.1f\n", updates, blocked, now_s() - (end - seconds));
    fflush(stdout);
    sleep(hold);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return 0;
}
