#!/usr/bin/env bash
# rmq against RocketMQ 4.9.8, in one run: the same generator
# (`rmq bench produce --broker ADDR`) drives rmq-server (standalone) and a
# 4.9.8 broker (with its NameServer) alternately, per message size.
#
#   scripts/bench/vs-java.sh JAVA_DIR [--rounds R] [--seconds S]
#                            [--concurrency C] [--sizes "128 1024 16384"]
#                            [--flush ASYNC_FLUSH|SYNC_FLUSH] [--warmup S]
#                            [--conf 'KEY = VALUE, ...']
#
# JAVA_DIR: a RocketMQ 4.9.8 build outside this repository, either a
# distribution (bin/mqnamesrv, bin/mqbroker; JAVA_OPT etc. as its scripts
# read them) or a class-dir build with a `jrun CLASS ARGS` launcher.
# Per size: both brokers start on fresh stores in a temp dir with
# flushDiskType FLUSH (both sides), autoCreateTopicEnable; a warm-up run
# of W seconds each (default 10: the JVM's JIT needs it; not counted);
# then R rounds of S seconds alternating java, rmq.  Each row: TPS, the
# broker process's CPU per message (utime+stime of the broker process
# from /proc/PID/stat, all threads: for Java that includes its JIT and GC
# threads, not the NameServer's; for rmq the NameServer shares the
# process but is idle here), and the 1-minute load average when the run
# started.  Defaults: R=2, S=5, C=64, W=10 (~3 min).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
source "$RMQ_ROOT/scripts/bench/ab-lib.sh"
cd "$RMQ_ROOT"

[ $# -ge 1 ] && [ -d "$1" ] || { sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
jdir=$(cd "$1" && pwd); shift
rounds=2 seconds=5 conc=64 sizes="128 1024 16384" flush=ASYNC_FLUSH warm=10 conf=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --concurrency) conc="$2"; shift 2 ;;
        --sizes) sizes="$2"; shift 2 ;;
        --flush) flush="$2"; shift 2 ;;
        --warmup) warm="$2"; shift 2 ;;
        --conf) conf="$2"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
trap ab_cleanup EXIT

build="$RMQ_ROOT/${RMQ_BUILD:-build}"
rmq_build "$build"
rmq="$build/rmq"

printf '%-8s %-6s %5s %10s %12s %6s\n' size server round TPS "CPU us/msg" load
summary=()
for size in $sizes; do
    ab_start_java "$jdir" "$AB_TMP/java" "$flush"; jpid=$AB_PID jaddr=$AB_ADDR
    ab_start_rmq "$build" "$AB_TMP/rmq" "flushDiskType = \"$flush\", ${conf:+$conf,}"; rpid=$AB_PID raddr=$AB_ADDR
    ab_produce "$rmq" "$jpid" "$jaddr" "$size" "$conc" "$warm" > /dev/null
    ab_produce "$rmq" "$rpid" "$raddr" "$size" "$conc" 2 > /dev/null
    j_tps=0 j_cpu=1e9 r_tps=0 r_cpu=1e9 j_load="" r_load=""
    for r in $(seq "$rounds"); do
        for side in java rmq; do
            if [ $side = java ]; then pid=$jpid addr=$jaddr; else pid=$rpid addr=$raddr; fi
            read -r tps cpu load n < <(ab_produce "$rmq" "$pid" "$addr" "$size" "$conc" "$seconds")
            printf '%-8s %-6s %5s %10s %12s %6s\n' "$size" "$side" "$r" "$tps" "$cpu" "$load"
            if [ $side = java ]; then
                [ "$tps" -gt "$j_tps" ] && j_tps=$tps
                awk -v a="$cpu" -v b="$j_cpu" 'BEGIN { exit !(a < b) }' && j_cpu=$cpu
                j_load="$j_load $load"
            else
                [ "$tps" -gt "$r_tps" ] && r_tps=$tps
                awk -v a="$cpu" -v b="$r_cpu" 'BEGIN { exit !(a < b) }' && r_cpu=$cpu
                r_load="$r_load $load"
            fi
        done
    done
    ab_stop "$rpid"; ab_stop "$jpid"
    # The NameServer: the other PID recorded for this size.
    while read -r pid what; do
        [ "$what" = "$AB_TMP/java/ns.properties" ] && ab_stop "$pid"
    done < "$AB_TMP/pids"
    rm -rf "$AB_TMP/rmq" "$AB_TMP/java"
    summary+=("$(awk -v s="$size" -v jt="$j_tps" -v rt="$r_tps" -v jc="$j_cpu" -v rc="$r_cpu" \
        'BEGIN { printf "%-8s java %7d TPS %6.2f us/msg | rmq %7d TPS %5.2f us/msg | rmq/java TPS %.1fx, java/rmq CPU/msg %.1fx", s, jt, jc, rt, rc, rt / jt, jc / rc }') | loads:$j_load /$r_load")
done
echo
echo "$flush, best round of each (TPS: highest; CPU/msg: lowest):"
printf '%s\n' "${summary[@]}"
echo
echo "$0 $jdir --rounds $rounds --seconds $seconds --concurrency $conc --sizes '$sizes' --flush $flush --warmup $warm${conf:+ --conf '$conf'}"
echo "generator: $rmq bench produce -n 127.0.0.1:1 -t BenchTopic --broker ADDR -s SIZE -c $conc -d $seconds; $(nproc) cores"
