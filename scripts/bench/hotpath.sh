#!/usr/bin/env bash
# The hot path's cost, before and after, in the same run: callgrind
# instructions per request of a 1-worker server, and `rmq bench produce`
# TPS, for a base revision and for the current tree.
#
#   scripts/bench/hotpath.sh [--base REV] [--requests N] [--rounds R]
#                            [--seconds S] [--tps-rounds T]
#                            [--current-conf 'KEY = VALUE, ...']
#
# From anywhere in the repository.  "current" is the working tree as it
# is (uncommitted changes included), built into build/ (RMQ_BUILD picks
# another dir) by scripts/setup.sh's rmq_build.  "base" is REV, checked
# out in a temporary git worktree under /tmp and built there by its own
# scripts/setup.sh.  Without --base, REV is `git merge-base HEAD main`
# (where a branch left main), or HEAD^1 when that is HEAD itself (on
# main after a merge: the first parent, main before it).  `--base HEAD`
# measures the same code twice: the spread of the figures.
#
# Instructions (valgrind --tool=callgrind, Ir): each build serves a
# standalone conf (NameServer and broker in one process, workers = 1,
# 64 MiB commit log files, a fresh store under the temp dir) on
# 127.0.0.1 ephemeral ports.  After a warm-up (300 sends, which create
# the topic; the route; a HEART_BEAT with the consumer group's
# subscription; 20 pulls of each kind, heartbeats, empty long
# polls, offset commits and look-ups), each phase is N requests, one at
# a time on one connection, from a client outside valgrind:
#   SEND_MESSAGE_V2 1 KiB    the header a 4.9.8 Java producer sends
#                            (fixture send-java.jsonl: a..n fields,
#                            KEYS, UNIQ_KEY, WAIT, TAGS), queues 0-3
#   PULL_MESSAGE 1 / 32      Java's pull header (pull-java.jsonl),
#                            maxMsgNums 1 / 32, queue 0, offsets walking
#                            over messages that are there
#   GET_ROUTEINFO_BY_TOPIC   Java's header (route.jsonl), to the
#                            NameServer part
#   HEART_BEAT consumer      a push consumer's heartbeat (the warm-up's:
#                            one group, its topic and retry topic)
#   PULL empty long poll     Java's pull header at the end of queue 0
#                            (FLAG_SUSPEND, suspendTimeoutMillis 2): held
#                            2 ms, answered PULL_NOT_FOUND (19); the
#                            commonest pull of an idle consumer
#   UPDATE_CONSUMER_OFFSET   Java's header (update-consumer-offset.jsonl's
#                            keys), answered (the sync form)
#   QUERY_CONSUMER_OFFSET    Java's header (query-consumer-offset.jsonl)
# Every reply is checked (code 0; a pull's body holds exactly the
# messages asked): one failure and no figure is printed.  Counters are
# zeroed (callgrind_control -z) before a phase and dumped (-d) after it,
# with --separate-threads=yes.  The figure is the worker thread's Ir / N
# (the busiest thread but main), libuv's read and write per request
# included (one request in flight: nothing is batched).  Not the whole
# process: the main thread runs the timers (the delay-level scan of
# SCHEDULE_TOPIC alone is ~1.4 M Ir/s idle), which would dominate the
# figure and make it depend on how long a phase takes.  The store's own
# threads (index dispatch, flush, allocator) are shown beside it as
# "other threads" (a send's index entries are built there); idle they
# cost ~10 K Ir/s, little next to a phase's work.  Each phase runs R
# rounds; the table shows the best round and the spread (max-min)/min in
# brackets: what the Lua collector and malloc happen to do in a phase
# (~4 % of a route lookup, under 1 % of the others), or a periodic
# registration (every 60 s here) landing on the worker, shows there and
# not in the best.  Figures move a little with N: compare at the same N.
#
# TPS: `rmq bench produce -s 1024 -c 64 -d S` (the current tree's rmq:
# the same load generator for both) against each build natively, the
# same standalone conf with workers = 0 (the default count), T rounds
# alternating base and current; the best of each (the round least
# disturbed by other work on this shared machine: one round of the same
# build varies by up to ~20 % here).
#
# Prints a table (current/base ratios), then the commands it ran.
# Everything it starts is stopped by PID; its temp dir (worktree,
# stores, dumps) is removed at the end, but for the dumps and confs when
# RMQ_KEEP_TMP=1 (for callgrind_annotate: dump k of a server is phase k
# of its rounds in order; the dumps carry names in full, so
# `callgrind_annotate --threshold=100 DUMP` reads any one alone; the
# worker is the thread whose dump is largest).  --tps-rounds 0 skips the
# TPS part.
# --current-conf adds conf fields (Lua table syntax) to the current
# build's confs only: with --base HEAD, a feature on against off, e.g.
#   --current-conf 'metricsExporterType = "PROM", metricsPromExporterPort = 0'.  Takes
# ~2.5 minutes with the defaults: N=2000, R=3, S=10, T=3.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"

base="" requests=2000 rounds=3 seconds=10 tps_rounds=3 current_conf=""
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base="$2"; shift 2 ;;
        --requests) requests="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --tps-rounds) tps_rounds="$2"; shift 2 ;;
        --current-conf) current_conf="$2"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
if [ -z "$base" ]; then
    base=$(git merge-base HEAD main)
    [ "$base" != "$(git rev-parse HEAD)" ] || base=$(git rev-parse HEAD^1)
fi
base_rev=$(git rev-parse --verify "$base^{commit}")

rmq_install_packages "${RMQ_PACKAGES[@]}" valgrind
tmp=$(mktemp -d /tmp/rmq-hotpath.XXXXXX)
cleanup() {
    # Only what this run started: the PIDs the driver wrote, if they are
    # still an rmq-server (valgrind runs it in the same process).
    if [ -f "$tmp/pids" ]; then
        while read -r pid; do
            if grep -qs "$tmp" "/proc/$pid/cmdline"; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        done < "$tmp/pids"
    fi
    git worktree remove --force "$tmp/base" 2>/dev/null || true
    if [ "${RMQ_KEEP_TMP:-0}" = 1 ]; then
        echo "hotpath: kept $tmp/work (callgrind dumps: */cg.PID.DUMP-THREAD)" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

current_build="$RMQ_ROOT/${RMQ_BUILD:-build}"
echo "hotpath: base $(git log -1 --format='%h %s' "$base_rev")" >&2
git worktree add --detach "$tmp/base" "$base_rev" >&2
bash "$tmp/base/scripts/setup.sh" "$tmp/base/build" >&2
rmq_build "$current_build"

mkdir "$tmp/work"
# Each build's server runs its own Lua (compiled in; older builds: lua/ next
# to the binary): no RMQ_LUA_DIR.
env -u RMQ_LUA_DIR RMQ_HOTPATH_CURRENT_CONF="$current_conf" lua5.4 scripts/bench/hotpath.lua "$tmp/work" "$tmp/base/build" "$current_build" \
    "$requests" "$rounds" "$seconds" "$tps_rounds"
echo "base: $base_rev$([ "$base" = "$base_rev" ] || echo " ($base)"); current: the working tree of $(git rev-parse HEAD)"
echo "  $0 --base $base --requests $requests --rounds $rounds --seconds $seconds --tps-rounds $tps_rounds${current_conf:+ --current-conf '$current_conf'}"
