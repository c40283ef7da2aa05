#!/usr/bin/env bash
# Soak: steady produce and consume for M minutes with periodic broker
# restarts; RSS, fds and the p99 send latency printed every minute and
# checked flat at the end; every acknowledged message audited.
#
#   scripts/soak.sh [--minutes M] [--short] [--restart-every R] [--rate N]
#                   [--build DIR] [--keep]
#
# A NameServer and a broker (ASYNC_FLUSH, 16 MiB commit log files) on
# 127.0.0.1; `rmq audit produce` (4 tasks, N msgs/s in total, default 300,
# 256-byte bodies) and `rmq audit consume`.  After every R minutes
# (default 5) the broker is restarted on its store: SIGTERM and kill -9
# by turns.  At the end of each minute one line: the broker's and the
# NameServer's VmRSS, RssAnon and open fds (/proc/PID/status, /proc/PID/
# fd), the producer's and the consumer's VmRSS, and the minute's sends,
# failures and p50/p99 latency of acknowledged sends (from the producer's
# STATS lines).  M defaults to 30; --short is M = 2, R = 1.
#
# Flat means (checked at the end; any failure makes the exit status 1):
#   broker:     restarts reset it, so its last sample is compared with the
#               first sample of the same age (minutes since its start):
#               RssAnon (its heap: the mapped store's pages are the page
#               cache's, not a leak) within 25 % + 4 MiB, fds within 2;
#   NameServer: never restarted: last VmRSS within 10 % + 2 MiB of minute
#               2's (minute 1's when M < 3), fds within 2;
#   latency:    the last minute's p99 at most 3 x the reference minute's
#               + 20 ms (the machine is shared: this catches a trend, not
#               noise);
#   audit:      lost = 0.
# The last line: "soak: minutes=M acknowledged=N lost=N duplicates=N
# restarts=N flat=yes|no".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
source "$(dirname "${BASH_SOURCE[0]}")/proof-lib.sh"
cd "$RMQ_ROOT"

minutes=30 every=5 rate=300 build="${RMQ_BUILD:-build}" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --short) minutes=2 every=1; shift ;;
        --minutes) minutes="$2"; shift 2 ;;
        --restart-every) every="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--minutes M] [--short] [--restart-every R] [--rate N] [--build DIR] [--keep]" >&2
           exit 2 ;;
    esac
done
[ -x "$build/rmq-server" ] || rmq_build "$build" >/dev/null

# Under scripts/test.sh, inside the run's own directory (removed after it).
tmp="$(mktemp -d "${RMQ_TEST_TMP:-/tmp}/rmq-soak.XXXXXX")"
declare -A pid=()
cleanup() {
    for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pid[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "$keep" = 1 ]; then echo "soak: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

start() {
    local name="$1" out="$tmp/$1.out" before
    before=$(grep -c READY "$out" 2>/dev/null || true)
    "${proof_server_env[@]}" "$build/rmq-server" "$tmp/$name.lua" >>"$out" 2>>"$tmp/$name.err" &
    pid[$name]=$!
    proof_ready "$out" "$tmp/$name.err" "${before:-0}" "soak: $name" "${pid[$name]}"
}
for attempt in 1 2 3 4 5; do
    proof_base
    ns="127.0.0.1:$base" broker="127.0.0.1:$((base + 4))"
    cat >"$tmp/ns.lua" <<C
return { role = 'namesrv', listenPort = $base, bindAddress = '127.0.0.1', workers = 1 }
C
    cat >"$tmp/broker.lua" <<C
return { role = 'broker', listenPort = $((base + 4)), bindAddress = '127.0.0.1', brokerIP1 = '127.0.0.1',
  brokerClusterName = 'SoakCluster', brokerName = 'soak-a', namesrvAddr = '$ns',
  storePathRootDir = '$tmp/store', workers = 2, mappedFileSizeCommitLog = 16777216,
  mappedFileSizeConsumeQueue = 600000, registerNameServerPeriod = 10000 }
C
    : >"$tmp/ns.out"; : >"$tmp/broker.out"
    if start ns 2>/dev/null && start broker; then break; fi
    for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pid=()
    [ "$attempt" -lt 5 ] || { echo "soak: FAILED: no free ports"; exit 1; }
done
"$build/rmq" admin updateTopic -n "$ns" -b "$broker" -t SoakTopic -r 4 -w 4 >/dev/null
for _ in $(seq 100); do "$build/rmq" topic-route -n "$ns" SoakTopic >/dev/null 2>&1 && break; sleep 0.1; done

rec="$tmp/records"
mkdir -p "$rec"
"$build/rmq" audit consume -n "$ns" -t SoakTopic -g SoakGroup -o "$rec/received.log" \
    --stop-file "$tmp/stop-consumer" >"$tmp/consumer.out" 2>"$tmp/consumer.err" &
pid[consumer]=$!
"$build/rmq" audit produce -n "$ns" -t SoakTopic -o "$rec/acked.log" -c 4 -r "$rate" -s 256 \
    --stats-every 60 --stop-file "$tmp/stop-producer" >"$tmp/producer.out" 2>"$tmp/producer.err" &
pid[producer]=$!
t0=$(date +%s)

status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

echo "soak: $minutes min, $rate msgs/s, broker restarted after every $every min (SIGTERM and kill -9 by turns)"
printf '%-4s %-13s %-13s %-5s %-13s %-5s %-9s %-9s %-7s %-6s %-5s %-5s %s\n' min broker.rss broker.anon fds \
    ns.rss fds prod.rss cons.rss sent failed p50 p99 note
declare -a b_anon b_fds b_age n_rss n_fds p99s notes
age=0 restarts=0 note=""
for m in $(seq "$minutes"); do
    # Sleep to the minute's end (the producer's m-th STATS line).
    sleep $(( t0 + 60 * m - $(date +%s) > 0 ? t0 + 60 * m - $(date +%s) : 0 ))
    for _ in $(seq 50); do [ "$(grep -c '^STATS' "$tmp/producer.out")" -ge "$m" ] && break; sleep 0.1; done
    stats=$(grep '^STATS' "$tmp/producer.out" | sed -n "${m}p")
    age=$((age + 1))
    bp=${pid[broker]} np=${pid[ns]}
    b_anon[$m]=$(status_kb "$bp" RssAnon) b_fds[$m]=$(fds "$bp") b_age[$m]=$age
    n_rss[$m]=$(status_kb "$np" VmRSS) n_fds[$m]=$(fds "$np")
    sent=$(proof_field "$stats" sent) failed=$(proof_field "$stats" failed) p50=$(proof_field "$stats" p50)
    p99s[$m]=$(proof_field "$stats" p99)
    notes[$m]=$note
    printf '%-4s %-13s %-13s %-5s %-13s %-5s %-9s %-9s %-7s %-6s %-5s %-5s %s\n' "$m" \
        "$(mb "$(status_kb "$bp" VmRSS)") MB" "$(mb "${b_anon[$m]}") MB" "${b_fds[$m]}" \
        "$(mb "${n_rss[$m]}") MB" "${n_fds[$m]}" "$(mb "$(status_kb "${pid[producer]}" VmRSS)") MB" \
        "$(mb "$(status_kb "${pid[consumer]}" VmRSS)") MB" "${sent:-?}" "${failed:-?}" "${p50:-?}ms" "${p99s[$m]:-?}ms" "$note"
    note=""
    if [ "$m" -lt "$minutes" ] && [ $((m % every)) -eq 0 ]; then
        restarts=$((restarts + 1))
        if [ $((restarts % 2)) -eq 1 ]; then
            kill -15 "$bp"; wait "$bp" || true; note="after SIGTERM"
        else
            kill -9 "$bp"; wait "$bp" 2>/dev/null || true; note="after kill -9"
        fi
        start broker || exit 1
        age=0
        note="broker restarted ($note)"
    fi
done
touch "$tmp/stop-producer"
wait "${pid[producer]}" || true
unset 'pid[producer]'
proof_drain "$build" "$rec/acked.log" "$rec/received.log"
touch "$tmp/stop-consumer"
wait "${pid[consumer]}" || true
unset 'pid[consumer]'
audit_status=0
line=$("$build/rmq" audit check "$rec/acked.log" "$rec/received.log" 2>"$tmp/lost.txt") || audit_status=$?
echo "audit: $line"

flat=yes
verdict() { if eval "$2"; then echo "  ok: $1"; else echo "  NOT FLAT: $1"; flat=no; fi; }
last=$minutes
ref=0
for m in $(seq "$minutes"); do
    if [ "${b_age[$m]}" = "${b_age[$last]}" ]; then ref=$m; break; fi
done
nref=$([ "$minutes" -ge 3 ] && echo 2 || echo 1)
echo "checks (last minute $last against minute $ref for the broker, both $((${b_age[$last]})) min after a start;" \
     "minute $nref for the NameServer and the latency):"
verdict "broker RssAnon $(mb "${b_anon[$last]}") MB <= 1.25 x $(mb "${b_anon[$ref]}") MB + 4 MiB" \
    '[ "${b_anon[$last]}" -le $(( b_anon[ref] * 125 / 100 + 4096 )) ]'
verdict "broker fds ${b_fds[$last]} within 2 of ${b_fds[$ref]}" \
    '[ $(( b_fds[last] - b_fds[ref] )) -le 2 ] && [ $(( b_fds[ref] - b_fds[last] )) -le 2 ]'
verdict "NameServer VmRSS $(mb "${n_rss[$last]}") MB <= 1.1 x $(mb "${n_rss[$nref]}") MB + 2 MiB" \
    '[ "${n_rss[$last]}" -le $(( n_rss[nref] * 110 / 100 + 2048 )) ]'
verdict "NameServer fds ${n_fds[$last]} within 2 of ${n_fds[$nref]}" \
    '[ $(( n_fds[last] - n_fds[nref] )) -le 2 ] && [ $(( n_fds[nref] - n_fds[last] )) -le 2 ]'
verdict "p99 ${p99s[$last]:-?} ms <= 3 x ${p99s[$nref]:-?} ms + 20 ms" \
    'awk -v a="${p99s[$last]:-x}" -v r="${p99s[$nref]:-0}" "BEGIN { exit !(a != \"x\" && a + 0 <= r * 3 + 20) }"'
lost=$(proof_field "$line" lost)
if [ "$audit_status" -ne 0 ]; then head -20 "$tmp/lost.txt"; fi
echo "soak: minutes=$minutes acknowledged=$(proof_field "$line" acknowledged) lost=${lost:--1}" \
     "duplicates=$(proof_field "$line" duplicates) restarts=$restarts flat=$flat"
kill -15 "${pid[broker]}" 2>/dev/null || true; wait "${pid[broker]}" 2>/dev/null || true; unset 'pid[broker]'
kill -15 "${pid[ns]}" 2>/dev/null || true; wait "${pid[ns]}" 2>/dev/null || true; unset 'pid[ns]'
[ "$flat" = yes ] && [ "$audit_status" = 0 ]
