/*
 * notify_flood: what a send's wake-up of held pulls (net/notify.c's
 * notify_raise) costs while a consumer holds pulls on many topic@queue
 * keys that an unkeyed FNV-1a table of 1024 buckets (the one before
 * session 38) put in one bucket.  Prints the raise's cost for a topic
 * nobody waits on, with no waiters at all and with N such waiters: with
 * a keyed, growing table the two are alike (docs/hardening-tables.md).
 * Measurement only; built on request:
 *
 *   cmake --build build --target rmq-notify-flood && build/rmq-notify-flood [N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/notify.h"

#define RAISES 100000

static uint32_t
fnv1a_1024(const char *k, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 16777619u;
    return h % 1024;
}

static double
raise_us(const char *probe)
{
    int slots[NOTIFY_MAX_SLOTS];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int r = 0; r < RAISES; r++)
        (void)notify_raise(probe, strlen(probe), slots, NOTIFY_MAX_SLOTS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / RAISES / 1e3;
}

int
main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 8192;
    if (n <= 0 || n > 1000000) {
        fprintf(stderr, "usage: %s [N waiters, 1..1000000]\n", argv[0]);
        return 2;
    }
    char (*keys)[48] = calloc((size_t)n, sizeof(*keys));
    if (keys == NULL)
        return 1;
    char probe[48];
    for (long i = 0;; i++) {
        snprintf(probe, sizeof(probe), "Send%ld@1", i);
        if (fnv1a_1024(probe, strlen(probe)) == 0)
            break;
    }
    double idle = raise_us(probe);
    for (long i = 0, found = 0; found < n; i++) {
        snprintf(keys[found], sizeof(keys[found]), "Flood%ld@%ld", i, i % 8);
        if (fnv1a_1024(keys[found], strlen(keys[found])) == 0 &&
            notify_interest(keys[found], strlen(keys[found]), 0, +1) == 0)
            found++;
    }
    double flooded = raise_us(probe);
    printf("notify_raise of a key nobody waits on: %.3f us with no waiters, %.3f us with %ld "
           "waiters on keys of its old FNV-1a bucket (%.1fx)\n", idle, flooded, n, flooded / idle);
    free(keys);
    return 0;
}
