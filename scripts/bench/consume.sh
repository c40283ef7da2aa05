#!/usr/bin/env bash
# Consume drain: the broker's CPU per pulled message, two rmq servers in
# one run (this build against another build, or against other conf).
#
#   scripts/bench/consume.sh [--rounds R] [--size BYTES] [--produce S]
#                            [--seconds S] [--queues Q] [--new-group]
#                            [--conf 'KEY = VALUE, ...']
#                            [--vs-conf 'KEY = VALUE, ...'] [--vs-build DIR]
#
# From anywhere in the repository; builds build/ (RMQ_BUILD picks another
# dir).  Both servers start standalone (ephemeral ports, fresh stores in
# a temp dir).  Each round, per server: `rmq bench produce --broker`
# fills a new topic for --produce seconds (c64, 4 queues: a queue's
# records are 3 records apart in the log; --queues 1: one queue, its
# records adjacent, so a pull's records are one run), then `rmq
# bench consume --from first` (through the NameServer) pulls it for
# --seconds.  The group is a lagging one: before the produce it pulls
# the topic's first messages (a second's consume of a few written for
# it), so it is an active reader behind the backlog, as a group that
# falls behind is (the page cache drop window keeps what an active
# group has still to read: commitLogDropCacheReaderSeconds).  --new-group:
# a group that never pulled before the backlog was written (what
# commitLogDropCacheBehindBytes dropped comes from the disk).  Each row:
# messages pulled, the best one-second rate the consumer printed, the
# broker's CPU over the consume run (utime+stime from /proc/PID/stat,
# all threads, 10 ms ticks) divided by the messages pulled, the MiB the
# broker read from the disk meanwhile (read_bytes of /proc/PID/io: page
# cache misses), and the 1-minute load average when the consume
# started.  The consumer is the Lua client (`rmq bench consume`): its
# rate is the consumer's ceiling on this machine as much as the
# broker's, so compare the CPU per message.  The drain must outlast the
# consume run for the rate to mean anything: produce longer than you
# consume (the defaults: 6 s, 3 s).  Defaults: R=2, 1024 B.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
source "$RMQ_ROOT/scripts/bench/ab-lib.sh"
cd "$RMQ_ROOT"

rounds=2 size=1024 produce=6 seconds=3 queues=4 conf="" vsconf="" vsbuild="" lag=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --size) size="$2"; shift 2 ;;
        --produce) produce="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --queues) queues="$2"; shift 2 ;;
        --new-group) lag=0; shift ;;
        --conf) conf="$2"; shift 2 ;;
        --vs-conf) vsconf="$2"; shift 2 ;;
        --vs-build) vsbuild="$(cd "$2" && pwd)"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
[ -n "$vsconf" ] || [ -n "$vsbuild" ] || { echo "give --vs-conf or --vs-build" >&2; exit 2; }
trap ab_cleanup EXIT

build="$RMQ_ROOT/${RMQ_BUILD:-build}"
rmq_build "$build"
rmq="$build/rmq"

declare -A pid addr ns
start() {   # start SIDE BUILD CONF
    ab_start_rmq "$2" "$AB_TMP/$1" "${3:+$3,}"
    pid[$1]=$AB_PID addr[$1]=$AB_ADDR
    ns[$1]=$(sed -n 's/.* listen=\([^ ]*\).*/\1/p' "$AB_TMP/$1/stdout" | head -1)
}
start rmq "$build" "$conf"
if [ -n "$vsbuild" ]; then start rmq-vs "$vsbuild" "$conf"; else start rmq-vs "$build" "$vsconf"; fi

disk_bytes() { awk '/^read_bytes:/ { print $2 }' "/proc/$1/io"; }

printf '%-7s %5s %10s %12s %12s %9s %6s\n' server round pulled "best msgs/s" "CPU us/msg" "disk MiB" load
for r in $(seq "$rounds"); do
    for side in rmq rmq-vs; do
        topic="Drain$r"
        if [ "$lag" = 1 ]; then
            "$rmq" bench produce -n 127.0.0.1:1 -t "$topic" --broker "${addr[$side]}" \
                -q "$queues" -s "$size" -c 4 -d 1 > /dev/null 2>&1 || true
            "$rmq" bench consume -n "${ns[$side]}" -t "$topic" -g "G$r" --from first -d 1 > /dev/null 2>&1 || true
        fi
        "$rmq" bench produce -n 127.0.0.1:1 -t "$topic" --broker "${addr[$side]}" \
            -q "$queues" -s "$size" -c 64 -d "$produce" > /dev/null 2>&1 || true
        load=$(ab_load)
        t0=$(ab_cpu_ticks "${pid[$side]}") d0=$(disk_bytes "${pid[$side]}")
        out=$("$rmq" bench consume -n "${ns[$side]}" -t "$topic" -g "G$r" --from first \
              -d "$seconds" 2>&1) || { echo "bench consume failed:" >&2; echo "$out" >&2; exit 1; }
        t1=$(ab_cpu_ticks "${pid[$side]}") d1=$(disk_bytes "${pid[$side]}")
        total=$(sed -n 's/^\[Complete\] Consume Total: \([0-9]*\).*/\1/p' <<< "$out")
        [ -n "$total" ] && [ "$total" -gt 0 ] || { echo "nothing pulled:" >&2; echo "$out" >&2; exit 1; }
        peak=$(sed -n 's/^Current Time: .* | Consume TPS: \([0-9]*\).*/\1/p' <<< "$out" | sort -n | tail -1)
        awk -v s="$side" -v r="$r" -v n="$total" -v p="${peak:-?}" -v d=$((t1 - t0)) \
            -v hz="$AB_CLK_TCK" -v l="$load" -v io=$((d1 - d0)) \
            'BEGIN { printf "%-7s %5s %10d %12s %12.2f %9.1f %6s\n", s, r, n, p, d * 1e6 / hz / n, io / 1048576, l }'
    done
done
echo "rmq: $build${conf:+ ($conf)}; rmq-vs: ${vsbuild:-$build ($vsconf)}"
