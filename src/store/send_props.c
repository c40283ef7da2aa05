/*
 * send_props: see send_props.h.
 */
#include "store/send_props.h"

#include <string.h>

static int
put(struct buf *out, const void *p, size_t n)
{
    return n == 0 ? 0 : buf_append(out, p, n);
}

int
send_props_store(const char *p, size_t n, const char *cluster, size_t cl,
                 bool keep_wait, struct buf *out, struct send_props *f)
{
    f->tags = NULL;
    f->tags_len = 0;
    f->wait = true;
    f->delay = 0;
    /* The input plus CLUSTER is the most it can grow to. */
    if (buf_reserve(out, n + cl + 10) != 0)
        return -12;
    size_t pos = 0;
    bool first = true;
    while (pos <= n) {
        const char *seg = p + pos;
        const char *end = memchr(seg, 2, n - pos);
        size_t len = end ? (size_t)(end - seg) : n - pos;
        const char *sep = memchr(seg, 1, len);
        /* A key and a non-empty value, else Java drops the pair. */
        if (sep != NULL && sep > seg && (size_t)(sep - seg) + 1 < len) {
            size_t kl = (size_t)(sep - seg);
            const char *v = sep + 1;
            size_t vl = len - kl - 1;
            bool drop = false;
            if (kl == 4 && memcmp(seg, "WAIT", 4) == 0) {
                f->wait = !(vl == 5 && memcmp(v, "false", 5) == 0);
                drop = !keep_wait;
            } else if (kl == 4 && memcmp(seg, "TAGS", 4) == 0) {
                f->tags = v;
                f->tags_len = vl;
            } else if (kl == 5 && memcmp(seg, "DELAY", 5) == 0) {
                int d = 0;
                for (size_t i = 0; i < vl && v[i] >= '0' && v[i] <= '9' && d < 1000; i++)
                    d = d * 10 + (v[i] - '0');
                f->delay = d;
            } else if (kl == 7 && memcmp(seg, "CLUSTER", 7) == 0) {
                drop = true;  /* ours replaces it */
            }
            if (!drop) {
                if (!first && put(out, "\002", 1) != 0)
                    return -12;
                if (put(out, seg, len) != 0)
                    return -12;
                first = false;
            }
        }
        if (end == NULL)
            break;
        pos += len + 1;
    }
    if ((!first && put(out, "\002", 1) != 0) || put(out, "CLUSTER\001", 8) != 0 ||
        put(out, cluster, cl) != 0)
        return -12;
    return 0;
}
