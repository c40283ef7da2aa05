#!/usr/bin/env bash
# rmq against the machine's ceiling, in one run: a do-nothing remoting
# server (scripts/bench/ceiling_server.c: answers every frame with a fixed
# SEND_OK) and rmq-server, driven by the same generator
# (`rmq bench produce --broker ADDR`), alternating, for 128 B, 1 KiB and
# 16 KiB.
#
#   scripts/bench/ceiling.sh [--rounds R] [--seconds S] [--concurrency C]
#                            [--sizes "128 1024 16384"] [--ceiling-threads T]
#                            [--conf 'KEY = VALUE, ...']
#
# From anywhere in the repository; builds build/ (RMQ_BUILD picks another
# dir) and its rmq-ceiling-server target.  Per size: both servers start
# (rmq standalone on ephemeral ports, a fresh store in a temp dir, the
# default workers unless --conf says otherwise), one warm-up run each
# (not counted: creates the topic, maps the first files), then R rounds
# of S seconds alternating ceiling, rmq.  Each row: TPS, the server
# process's CPU per message (utime+stime from /proc/PID/stat before and
# after the run, all threads, divided by the messages sent; 10 ms ticks,
# so ~1-5 % resolution at these rates) and the 1-minute load average
# when the run started.  The summary takes the best TPS round and the
# lowest CPU round of each side: rmq's TPS as a fraction of the
# ceiling's, and rmq's CPU per message against the ceiling's.
#
# TPS depends on what else the machine is doing (the generator shares the
# cores with the server); CPU per message much less so: read the load
# average beside each figure.  Defaults: R=2, S=5, C=64, T=1 (~1.5 min).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
source "$RMQ_ROOT/scripts/bench/ab-lib.sh"
cd "$RMQ_ROOT"

rounds=2 seconds=5 conc=64 sizes="128 1024 16384" cthreads=1 conf=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --concurrency) conc="$2"; shift 2 ;;
        --sizes) sizes="$2"; shift 2 ;;
        --ceiling-threads) cthreads="$2"; shift 2 ;;
        --conf) conf="$2"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
trap ab_cleanup EXIT

build="$RMQ_ROOT/${RMQ_BUILD:-build}"
rmq_build "$build"
cmake --build "$build" --target rmq-ceiling-server >&2
rmq="$build/rmq"

printf '%-8s %-8s %5s %10s %12s %6s\n' size server round TPS "CPU us/msg" load
summary=()
for size in $sizes; do
    ab_start_ceiling "$build" "$AB_TMP/ceiling" "$cthreads"; cpid=$AB_PID caddr=$AB_ADDR
    ab_start_rmq "$build" "$AB_TMP/rmq" "${conf:+$conf,}"; rpid=$AB_PID raddr=$AB_ADDR
    ab_produce "$rmq" "$cpid" "$caddr" "$size" "$conc" 2 > /dev/null
    ab_produce "$rmq" "$rpid" "$raddr" "$size" "$conc" 2 > /dev/null
    c_tps=0 c_cpu=1e9 r_tps=0 r_cpu=1e9 c_load="" r_load=""
    for r in $(seq "$rounds"); do
        for side in ceiling rmq; do
            if [ $side = ceiling ]; then pid=$cpid addr=$caddr; else pid=$rpid addr=$raddr; fi
            read -r tps cpu load n < <(ab_produce "$rmq" "$pid" "$addr" "$size" "$conc" "$seconds")
            printf '%-8s %-8s %5s %10s %12s %6s\n' "$size" "$side" "$r" "$tps" "$cpu" "$load"
            if [ $side = ceiling ]; then
                [ "$tps" -gt "$c_tps" ] && c_tps=$tps
                awk -v a="$cpu" -v b="$c_cpu" 'BEGIN { exit !(a < b) }' && c_cpu=$cpu
                c_load="$c_load $load"
            else
                [ "$tps" -gt "$r_tps" ] && r_tps=$tps
                awk -v a="$cpu" -v b="$r_cpu" 'BEGIN { exit !(a < b) }' && r_cpu=$cpu
                r_load="$r_load $load"
            fi
        done
    done
    ab_stop "$rpid"; ab_stop "$cpid"
    rm -rf "$AB_TMP/rmq"
    summary+=("$(awk -v s="$size" -v ct="$c_tps" -v rt="$r_tps" -v cc="$c_cpu" -v rc="$r_cpu" \
        'BEGIN { printf "%-8s ceiling %7d TPS %5.2f us/msg | rmq %7d TPS %5.2f us/msg | rmq TPS = %3.0f %% of ceiling, CPU/msg = %.1fx ceiling", s, ct, cc, rt, rc, 100 * rt / ct, rc / cc }') | loads:$c_load /$r_load")
done
echo
echo "best round of each (TPS: highest; CPU/msg: lowest):"
printf '%s\n' "${summary[@]}"
echo
echo "$0 --rounds $rounds --seconds $seconds --concurrency $conc --sizes '$sizes' --ceiling-threads $cthreads${conf:+ --conf '$conf'}"
echo "generator: $rmq bench produce -n 127.0.0.1:1 -t BenchTopic --broker ADDR -s SIZE -c $conc -d $seconds; $(nproc) cores"
