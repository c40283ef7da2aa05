#!/usr/bin/env bash
# rmq against the machine's ceiling, in one run: a do-nothing remoting
# server (scripts/bench/ceiling_server.c: answers every frame with a fixed
# SEND_OK) and rmq-server, driven by the same generator
# (`rmq bench produce --broker ADDR`), alternating, for 128 B, 1 KiB and
# 16 KiB.
#
#   scripts/bench/ceiling.sh [--rounds R] [--seconds S] [--concurrency C]
#                            [--sizes "128 1024 16384"] [--ceiling-threads T]
#                            [--conf 'KEY = VALUE, ...'] [--vs-conf 'KEY = VALUE, ...']
#                            [--vs-build DIR] [--threads] [--uniq-key]
#
# From anywhere in the repository; builds build/ (RMQ_BUILD picks another
# dir) and its rmq-ceiling-server target.  Per size: both servers start
# (rmq standalone on ephemeral ports, a fresh store in a temp dir, the
# default workers unless --conf says otherwise), one warm-up run each
# (not counted: creates the topic, maps the first files), then R rounds
# of S seconds alternating ceiling, rmq (with a second rmq, the two
# swap places every other round: a round leaves more page cache for the
# one after it).  Each row: TPS, the server
# process's CPU per message (utime+stime from /proc/PID/stat before and
# after the run, all threads, divided by the messages sent; 10 ms ticks,
# so ~1-5 % resolution at these rates) and the 1-minute load average
# when the run started.  The summary takes the best TPS round and the
# lowest CPU round of each side: rmq's TPS as a fraction of the
# ceiling's, and rmq's CPU per message against the ceiling's.  The
# ceiling's own TPS moves with the host by up to 40 % between runs
# minutes apart, so the summary also gives each round's ratio to the
# ceiling round just before it (run within seconds of each other) and
# their median: the steadier figure of the two.
#
# TPS depends on what else the machine is doing (the generator shares the
# cores with the server); CPU per message much less so: read the load
# average beside each figure.  Defaults: R=2, S=5, C=64, T=1 (~1.5 min).
# --vs-conf adds a third server to the rotation, rmq with those conf
# fields instead of --conf's (e.g. --conf 'workers = 1' --vs-conf
# 'workers = 2': the worker count A/B, both against the same ceiling).
# --uniq-key: every send carries a Java producer's UNIQ_KEY property (32
# hex digits, a counter in it), as the Java client's do; without it the
# generator's properties are the same in every send, which a connection's
# header memo (docs/architecture.md) reads once.
# --vs-build DIR adds rmq-server from another build directory instead
# (same --conf): before against after in one run, e.g. a build of the
# base revision made elsewhere (git archive REV | tar -x -C DIR; cmake).
# --threads: after each row, that server's CPU per message by thread
# name; per 1000 messages each thread's sleeps (voluntary switches) and
# preemptions (involuntary), and the share of the run it spent on a CPU
# and runnable but waiting for one (/proc/PID/task/TID/schedstat: the
# worker's busy fraction); the same for the generator's thread (its
# --json summary: getrusage), whose sleeps are its waits for replies.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
source "$RMQ_ROOT/scripts/bench/ab-lib.sh"
cd "$RMQ_ROOT"

rounds=2 seconds=5 conc=64 sizes="128 1024 16384" cthreads=1 conf="" vsconf="" vsbuild="" threads=""
gen=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --concurrency) conc="$2"; shift 2 ;;
        --sizes) sizes="$2"; shift 2 ;;
        --ceiling-threads) cthreads="$2"; shift 2 ;;
        --conf) conf="$2"; shift 2 ;;
        --vs-conf) vsconf="$2"; shift 2 ;;
        --vs-build) vsbuild="$(cd "$2" && pwd)"; shift 2 ;;
        --threads) threads=1; shift ;;
        --uniq-key) gen=(--uniq-key); shift ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
trap ab_cleanup EXIT

build="$RMQ_ROOT/${RMQ_BUILD:-build}"
rmq_build "$build"
cmake --build "$build" --target rmq-ceiling-server >&2
rmq="$build/rmq"

printf '%-8s %-8s %5s %10s %12s %6s\n' size server round TPS "CPU us/msg" load
sides="ceiling rmq"; [ -z "$vsconf" ] && [ -z "$vsbuild" ] || sides="ceiling rmq rmq-vs"
summary=()
declare -A pid addr best_tps best_cpu loads ratios
for size in $sizes; do
    ab_start_ceiling "$build" "$AB_TMP/ceiling" "$cthreads"; pid[ceiling]=$AB_PID addr[ceiling]=$AB_ADDR
    ab_start_rmq "$build" "$AB_TMP/rmq" "${conf:+$conf,}"; pid[rmq]=$AB_PID addr[rmq]=$AB_ADDR
    if [ -n "$vsbuild" ]; then
        ab_start_rmq "$vsbuild" "$AB_TMP/rmq-vs" "${conf:+$conf,}"; pid[rmq-vs]=$AB_PID addr[rmq-vs]=$AB_ADDR
    elif [ -n "$vsconf" ]; then
        ab_start_rmq "$build" "$AB_TMP/rmq-vs" "$vsconf,"; pid[rmq-vs]=$AB_PID addr[rmq-vs]=$AB_ADDR
    fi
    for side in $sides; do
        ab_produce "$rmq" "${pid[$side]}" "${addr[$side]}" "$size" "$conc" 2 "${gen[@]}" > /dev/null
        best_tps[$side]=0 best_cpu[$side]=1e9 loads[$side]="" ratios[$side]=""
    done
    for r in $(seq "$rounds"); do
        # The two rmq sides swap places every round: each rmq round
        # leaves ~1.4 GB more page cache at 1 KiB, and with a fixed order
        # the first rmq side always ran on the lighter one (two runs at
        # load 10-12: its first round 2.2-2.3 us a message, every later
        # round of either build 3.9-6).
        order=$sides
        [ -n "$vsconf$vsbuild" ] && [ $((r % 2)) -eq 0 ] && order="ceiling rmq-vs rmq"
        for side in $order; do
            AB_THREADS=$threads
            read -r tps cpu load n < <(ab_produce "$rmq" "${pid[$side]}" "${addr[$side]}" "$size" "$conc" "$seconds" "${gen[@]}")
            printf '%-8s %-8s %5s %10s %12s %6s\n' "$size" "$side" "$r" "$tps" "$cpu" "$load"
            [ -z "$AB_THREADS" ] || cat "$AB_TMP/threads.line"
            [ "$tps" -gt "${best_tps[$side]}" ] && best_tps[$side]=$tps
            awk -v a="$cpu" -v b="${best_cpu[$side]}" 'BEGIN { exit !(a < b) }' && best_cpu[$side]=$cpu
            loads[$side]="${loads[$side]} $load"
            if [ "$side" = ceiling ]; then
                round_ceiling=$tps
            else
                ratios[$side]="${ratios[$side]} $(awk -v a="$tps" -v b="$round_ceiling" 'BEGIN { printf "%.0f", (b > 0 ? 100 * a / b : 0) }')"
            fi
        done
    done
    for side in $sides; do ab_stop "${pid[$side]}"; done
    rm -rf "$AB_TMP/rmq" "$AB_TMP/rmq-vs"
    for side in $sides; do
        [ "$side" != ceiling ] || continue
        summary+=("$(awk -v s="$size" -v n="$side" -v ct="${best_tps[ceiling]}" -v rt="${best_tps[$side]}" \
            -v cc="${best_cpu[ceiling]}" -v rc="${best_cpu[$side]}" \
            'BEGIN { printf "%-8s ceiling %7d TPS %5.2f us/msg | %-6s %7d TPS %5.2f us/msg | TPS = %3.0f %% of ceiling, CPU/msg = %.1fx ceiling", s, ct, cc, n, rt, rc, 100 * rt / ct, rc / cc }') | loads:${loads[ceiling]} /${loads[$side]}")
        summary+=("$(awk -v s="$size" -v n="$side" -v r="${ratios[$side]# }" 'BEGIN {
            k = split(r, v, " "); all = ""
            for (i = 1; i <= k; i++) { all = all " " v[i] "%"; w[i] = v[i] + 0 }
            for (i = 2; i <= k; i++) for (j = i; j > 1 && w[j - 1] > w[j]; j--) { t = w[j]; w[j] = w[j - 1]; w[j - 1] = t }
            m = k % 2 ? w[(k + 1) / 2] : (w[k / 2] + w[k / 2 + 1]) / 2
            printf "%-8s %-6s TPS by round, %% of the ceiling round before it:%s; median %.0f %%", s, n, all, m }')")
    done
done
echo
echo "best round of each (TPS: highest; CPU/msg: lowest):"
printf '%s\n' "${summary[@]}"
echo
echo "$0 --rounds $rounds --seconds $seconds --concurrency $conc --sizes '$sizes' --ceiling-threads $cthreads${conf:+ --conf '$conf'}${vsconf:+ --vs-conf '$vsconf'}${vsbuild:+ --vs-build '$vsbuild'}${threads:+ --threads}${gen[*]:+ ${gen[*]}}"
echo "generator: $rmq bench produce -n 127.0.0.1:1 -t BenchTopic --broker ADDR -s SIZE -c $conc -d $seconds; $(nproc) cores"
