/* log: lines of threads other than main go through the ring
 * (core/log.h): a sink that takes nothing never blocks them, the lines
 * dropped are counted in a note written before any later line, each
 * thread's lines keep their order, and log_close writes out the rest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/log.h"

struct lines {
    int from, to;
};

static void *
log_lines(void *arg)
{
    struct lines *l = arg;
    char pad[201];
    memset(pad, 'p', 200);
    pad[200] = '\0';
    for (int i = l->from; i < l->to; i++)
        log_info("LINE %d %s", i, pad);
    return NULL;
}

static void
in_thread(int from, int to)
{
    struct lines l = { from, to };
    pthread_t t;
    assert_int_equal(0, pthread_create(&t, NULL, log_lines, &l));
    assert_int_equal(0, pthread_join(t, NULL));
}

static void
tmp_path(char *out, size_t n, const char *name)
{
    const char *d = getenv("TMPDIR");
    snprintf(out, n, "%s/rmq-test-log-%d-%s", d ? d : "/tmp", (int)getpid(), name);
}

/* Of lines 0..999 in text (whole lines only): those written plus those
 * the notes say were suppressed. */
static int
accounted(const char *text)
{
    int n = 0;
    for (const char *l = text; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        if (nl == NULL)
            break;   /* a partial line: not yet */
        const char *s = strstr(l, "LINE ");
        unsigned long long k;
        if (s != NULL && s < nl && atoi(s + 5) < 1000)
            n++;
        else if ((s = strstr(l, "[log] ")) != NULL && s < nl &&
                 sscanf(s + 6, "%llu messages suppressed", &k) == 1)
            n += (int)k;
        l = nl + 1;
    }
    return n;
}

/* The sink is a FIFO whose reader reads nothing at first: its pipe and
 * the ring fill, the thread goes on (it is joined), the rest is dropped. */
static void
full_ring_drops_and_counts(void **state)
{
    (void)state;
    char fifo[256];
    tmp_path(fifo, sizeof(fifo), "fifo");
    unlink(fifo);
    assert_int_equal(0, mkfifo(fifo, 0600));
    int rd = open(fifo, O_RDWR | O_NONBLOCK);   /* a reader: the open below does not wait */
    assert_true(rd >= 0);
    assert_int_equal(0, log_open(fifo, LOG_INFO));
    assert_int_equal(0, log_start_async(LOG_RING_MIN));
    uint64_t dropped0 = log_dropped_total();
    in_thread(0, 1000);   /* ~230 KB: past the pipe (64 KiB) and the ring */
    assert_true(log_dropped_total() > dropped0);
    /* Read it all as it comes; lines logged once every one of the first
     * 1000 is accounted for (written, or counted in a note: the ring is
     * empty then) follow the notes.  (Logged at the first note instead,
     * they could meet a ring still full of lines queued behind that note
     * and be dropped too: notes come mid-stream whenever a write frees
     * room while the burst goes on.) */
    static char text[1 << 20];
    size_t got = 0;
    bool later = false;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t r = read(rd, text + got, sizeof(text) - 1 - got);
        if (r > 0)
            got += (size_t)r;
        text[got] = '\0';
        if (!later && r > 0 && accounted(text) == 1000) {
            in_thread(1000, 1003);
            later = true;
        }
        if (strstr(text, "LINE 1002 ") != NULL)
            break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        assert_true(now.tv_sec - t0.tv_sec < 60);
        if (r <= 0)
            usleep(1000);
    }
    int last = -1, kept = 0, note_after = -1;
    unsigned long long suppressed = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        char *s = strstr(l, "LINE ");
        unsigned long long n;
        if (s != NULL) {
            int i = atoi(s + 5);
            assert_true(i > last);   /* in order */
            last = i;
            if (i < 1000)
                kept++;
            else
                assert_true(note_after >= 0);   /* after the note */
        } else if ((s = strstr(l, "[log] ")) != NULL && sscanf(s + 6, "%llu messages suppressed", &n) == 1) {
            suppressed += n;
            if (note_after < 0)
                note_after = kept;
        }
    }
    assert_true(kept > 0 && kept < 1000);
    assert_true(note_after >= 0);
    assert_int_equal(1000 - kept, (int)suppressed);   /* each one written or counted */
    assert_int_equal(1002, last);
    log_close();
    close(rd);
    unlink(fifo);
}

/* A clean stop writes out everything queued. */
static void
close_writes_the_rest(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof(path), "file");
    unlink(path);
    assert_int_equal(0, log_open(path, LOG_INFO));
    assert_int_equal(0, log_start_async(1 << 20));
    in_thread(0, 2000);
    log_close();
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[4096];
    int next = 0;
    while (fgets(buf, sizeof(buf), f) != NULL) {
        char *s = strstr(buf, "LINE ");
        assert_non_null(s);
        assert_int_equal(next, atoi(s + 5));
        next++;
    }
    fclose(f);
    assert_int_equal(2000, next);
    unlink(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_ring_drops_and_counts),
        cmocka_unit_test(close_writes_the_rest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
