#!/usr/bin/env bash
# Crash proof: repeated kill -9 of the broker and of the NameServer under
# producer and consumer load, every acknowledged message audited.
#
#   scripts/chaos.sh [--short] [--rounds N] [--flush SYNC_FLUSH|ASYNC_FLUSH|both]
#                    [--rate MSGS_PER_S] [--build DIR] [--keep]
#
# For each flush type: a NameServer and a broker on 127.0.0.1 (fixed
# ports below the ephemeral range, so a restart gets them back), a topic
# of 4 queues, `rmq audit produce` (4 tasks of the project's producer,
# sync sends, every acknowledgement recorded) and `rmq audit consume` (the
# project's push consumer, every delivery recorded).  Each round waits a
# random 0.5-2.5 s, then kill -9s the broker, the NameServer, both, or
# the broker and the consumer process (round 1 the broker, round 2 the
# NameServer, round 3 all three, then at random), waits a random 0-1 s
# and starts what it killed again on the same store and ports.  After the last round the producer stops, the consumer is given
# up to 60 s to catch up, and `rmq audit check` counts: acknowledged,
# lost (acknowledged, never delivered), duplicates (deliveries beyond the
# first: offsets committed before a kill are replayed).
#
# SYNC_FLUSH: a send is acknowledged after fsync, so nothing
# acknowledged can be lost, even by a power cut.  ASYNC_FLUSH: the
# acknowledgement comes once the record is in the file's page cache (a
# staged record is written before its reply leaves: commitlog.h); kill -9 of
# the process does not lose it either, because the page cache belongs to
# the kernel and survives the process (only a power cut or a kernel crash
# could lose the unflushed tail, at most flushIntervalCommitLog of it).
# Both must end with lost=0.
#
# Prints a line per round and, last, "chaos: rounds=N acknowledged=N
# lost=N duplicates=N" over all flush types.  Exit 0 when nothing was
# lost, 1 otherwise.  --short (what spec/integration/chaos_scripts_spec.lua
# runs): 3 rounds per flush type, both flush types, < 60 s.  Default: 20
# rounds, both.  --keep leaves the temp dir (stores, logs, records).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
source "$(dirname "${BASH_SOURCE[0]}")/proof-lib.sh"
cd "$RMQ_ROOT"

rounds=20 flush=both rate=2000 build="${RMQ_BUILD:-build}" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --short) rounds=3; rate=1000; shift ;;
        --rounds) rounds="$2"; shift 2 ;;
        --flush) flush="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--short] [--rounds N] [--flush SYNC_FLUSH|ASYNC_FLUSH|both] [--rate N] [--build DIR] [--keep]" >&2
           exit 2 ;;
    esac
done
case "$flush" in
    both) flushes=(SYNC_FLUSH ASYNC_FLUSH) ;;
    SYNC_FLUSH|ASYNC_FLUSH) flushes=("$flush") ;;
    *) echo "chaos: --flush takes SYNC_FLUSH, ASYNC_FLUSH or both" >&2; exit 2 ;;
esac
[ -x "$build/rmq-server" ] || rmq_build "$build" >/dev/null

# Under scripts/test.sh, inside the run's own directory (removed after it).
tmp="$(mktemp -d "${RMQ_TEST_TMP:-/tmp}/rmq-chaos.XXXXXX")"
declare -A pid=()
helpers=()

cleanup() {
    for p in "${pid[@]}" "${helpers[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pid[@]}" "${helpers[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "$keep" = 1 ]; then echo "chaos: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# A random number of ms in [lo, hi].
rand_ms() { echo $(( $1 + RANDOM % ($2 - $1 + 1) )); }
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# start NAME: starts the server of $tmp/NAME.lua, appending to its logs;
# waits for its READY line (<= 30 s); returns 1 (and says why) if none.
start() {
    local name="$1" out="$tmp/$1.out" err="$tmp/$1.err"
    if [ "$name" = consumer ]; then
        # Its records are written before each batch is acknowledged, so a
        # kill -9 loses none; its uncommitted offsets come back as
        # duplicates.
        "$build/rmq" "${consumer_args[@]}" >>"$consumer_dir/consumer.out" 2>>"$consumer_dir/consumer.err" &
        pid[consumer]=$!
        return 0
    fi
    local before
    before=$(grep -c READY "$out" 2>/dev/null || true)
    "${proof_server_env[@]}" "$build/rmq-server" "$tmp/$name.lua" >>"$out" 2>>"$err" &
    pid[$name]=$!
    proof_ready "$out" "$err" "${before:-0}" "chaos: $name" "${pid[$name]}"
}

kill9() {
    [ -n "${pid[$1]:-}" ] || return 0
    kill -9 "${pid[$1]}" 2>/dev/null || true
    wait "${pid[$1]}" 2>/dev/null || true
}

count() { grep -c "^$1 " "$2" 2>/dev/null || true; }

total_rounds=0 total_acked=0 total_lost=0 total_dup=0 failed=0

run_flush() {
    local ft="$1" dir="$tmp/$1"
    mkdir -p "$dir"
    local attempt
    for attempt in 1 2 3 4 5; do
        # BASE: the NameServer; BASE+4 the broker (BASE+2 its VIP port,
        # BASE+5 its HA port).
        proof_base
        local ns_port=$base br_port=$((base + 4))
        cat >"$tmp/ns.lua" <<C
return { role = 'namesrv', listenPort = $ns_port, bindAddress = '127.0.0.1', workers = 1 }
C
        cat >"$tmp/broker.lua" <<C
return { role = 'broker', listenPort = $br_port, bindAddress = '127.0.0.1', brokerIP1 = '127.0.0.1',
  brokerClusterName = 'ChaosCluster', brokerName = 'chaos-a', namesrvAddr = '127.0.0.1:$ns_port',
  storePathRootDir = '$dir/store', flushDiskType = '$ft', workers = 2,
  mappedFileSizeCommitLog = 1048576, mappedFileSizeConsumeQueue = 60000,
  registerNameServerPeriod = 1000, flushConsumerOffsetInterval = 1000 }
C
        : >"$tmp/ns.out"; : >"$tmp/broker.out"
        if start ns 2>/dev/null && start broker; then break; fi
        kill9 ns; kill9 broker
        grep -q "port in use" "$tmp/ns.err" "$tmp/broker.err" 2>/dev/null || { failed=1; return; }
    done
    local ns="127.0.0.1:$ns_port" broker="127.0.0.1:$br_port"
    "$build/rmq" admin updateTopic -n "$ns" -b "$broker" -t ChaosTopic -r 4 -w 4 >/dev/null
    for _ in $(seq 100); do
        "$build/rmq" topic-route -n "$ns" ChaosTopic >/dev/null 2>&1 && break
        sleep 0.1
    done

    local rec="$dir/records"
    mkdir -p "$rec"
    consumer_args=(audit consume -n "$ns" -t ChaosTopic -g ChaosGroup -o "$rec/received.log"
                   --stop-file "$dir/stop-consumer")
    consumer_dir=$dir
    start consumer
    "$build/rmq" audit produce -n "$ns" -t ChaosTopic -o "$rec/acked.log" -c 4 -r "$rate" -s 200 \
        --stop-file "$dir/stop-producer" >"$dir/producer.out" 2>"$dir/producer.err" &
    local ppid=$!
    helpers+=("$ppid")

    echo "chaos: $ft: NameServer $ns, broker $broker, store $dir/store; $rounds rounds"
    local r
    for r in $(seq "$rounds"); do
        local wait_ms down_ms victims
        wait_ms=$(rand_ms 500 2500)
        down_ms=$(rand_ms 0 1000)
        case "$r" in
            1) victims="broker" ;;
            2) victims="ns" ;;
            3) victims="ns broker consumer" ;;
            *) case $((RANDOM % 5)) in
                   0|1) victims="broker" ;; 2) victims="ns" ;; 3) victims="ns broker" ;; *) victims="broker consumer" ;;
               esac ;;
        esac
        sleep_ms "$wait_ms"
        local acked_before
        acked_before=$(count A "$rec/acked.log")
        local v
        for v in $victims; do kill9 "$v"; done
        sleep_ms "$down_ms"
        local t0 ready_ms
        t0=$(now_ms)
        for v in $victims; do start "$v" || { failed=1; return; }; done
        ready_ms=$(( $(now_ms) - t0 ))
        local recovered=""
        case " $victims " in
            *" broker "*) recovered=$(grep -o "scanned from [0-9]* ([0-9]* records re-dispatched)" "$tmp/broker.err" \
                              | tail -1 | grep -o "[0-9]* records" || true) ;;
        esac
        local who="" w
        for w in $victims; do
            [ "$w" = ns ] && w=NameServer
            who="${who:+$who, }$w"
        done
        echo "round $r/$rounds $ft: kill -9 $who after ${wait_ms} ms, down ${down_ms} ms," \
             "READY again in ${ready_ms} ms${recovered:+ (recovery re-dispatched $recovered)}; acknowledged so far $acked_before"
    done
    sleep 2
    touch "$dir/stop-producer"
    wait "$ppid" || true
    proof_drain "$build" "$rec/acked.log" "$rec/received.log"
    local line
    touch "$dir/stop-consumer"
    wait "${pid[consumer]}" || true
    unset 'pid[consumer]'
    local status=0
    line=$("$build/rmq" audit check "$rec/acked.log" "$rec/received.log" 2>"$dir/lost.txt") || status=$?
    echo "chaos: $ft: $line"
    if [ "$status" -ne 0 ]; then
        echo "chaos: $ft: LOST messages (first ones: id msgId broker queue offset):"
        head -20 "$dir/lost.txt"
        failed=1
    fi
    local acked lost dup
    acked=$(proof_field "$line" acknowledged)
    lost=$(proof_field "$line" lost)
    dup=$(proof_field "$line" duplicates)
    total_rounds=$((total_rounds + rounds))
    total_acked=$((total_acked + ${acked:-0}))
    total_lost=$((total_lost + ${lost:-0}))
    total_dup=$((total_dup + ${dup:-0}))
    if [ "${acked:-0}" -eq 0 ]; then
        echo "chaos: $ft: nothing was acknowledged: the load did not run"; tail -5 "$dir/producer.err"
        failed=1
    fi
    # A clean stop at the end: the store must also close cleanly.
    kill -15 "${pid[broker]}" 2>/dev/null || true
    wait "${pid[broker]}" || { echo "chaos: $ft: the broker did not stop cleanly"; tail -20 "$tmp/broker.err"; failed=1; }
    kill -15 "${pid[ns]}" 2>/dev/null || true
    wait "${pid[ns]}" || true
    unset 'pid[broker]' 'pid[ns]'
    cp "$tmp/broker.err" "$dir/broker.err"; cp "$tmp/ns.err" "$dir/ns.err"
}

for ft in "${flushes[@]}"; do
    run_flush "$ft"
    [ "$failed" = 0 ] || [ "$total_lost" -gt 0 ] || break
done
echo "chaos: rounds=$total_rounds acknowledged=$total_acked lost=$total_lost duplicates=$total_dup"
[ "$failed" = 0 ] && [ "$total_lost" = 0 ]
