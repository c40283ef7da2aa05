/*
 * fuzz_sql92: libFuzzer target for the SQL92 filter compiler and
 * evaluator (filter/sql92.c), which compile what any consumer's
 * heartbeat, pull or CHECK_CLIENT_CONFIG carries.
 *
 * Input: byte 0 picks the limits (small ones too, so the depth, node
 * and length refusals are reached); up to the first 0x00 is the
 * expression; what follows is a properties string (store/props.h) the
 * compiled filter is evaluated over.
 *
 * Oracles (abort = crash): an error message is one non-empty line with
 * no control bytes; a compiled filter has at least one node and at most
 * max_nodes; evaluating twice gives the same result, inside the enum;
 * sql92_match_props agrees with sql92_eval_props == TRUE.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "filter/sql92.h"

int
LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    uint8_t sel = d[0];
    d++;
    n--;
    const uint8_t *z = memchr(d, 0, n);
    size_t elen = z ? (size_t)(z - d) : n;
    const char *props = z ? (const char *)z + 1 : "";
    size_t plen = z ? n - elen - 1 : 0;
    struct sql92_limits lim = {
        .max_len = (sel & 1) ? 64 : 65536,
        .max_depth = (sel & 2) ? 4 : 128,
        .max_nodes = (sel & 4) ? 8 : 4096,
    };
    char err[512];
    struct sql92 *f = sql92_compile((const char *)d, elen, &lim, err, sizeof(err));
    if (f == NULL) {
        if (err[0] == 0)
            abort();
        for (const char *c = err; *c; c++)
            if ((unsigned char)*c < 0x20)
                abort();
        return 0;
    }
    int nodes = sql92_nodes(f);
    if (nodes < 1 || nodes > lim.max_nodes)
        abort();
    enum sql92_result a = sql92_eval_props(f, props, plen);
    enum sql92_result b = sql92_eval_props(f, props, plen);
    if (a != b || a < SQL92_FALSE || a > SQL92_ERROR)
        abort();
    if (sql92_match_props(f, props, plen) != (a == SQL92_TRUE))
        abort();
    sql92_free(f);
    return 0;
}
