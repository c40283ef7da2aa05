#!/usr/bin/env bash
# Partition proof: two NameServers, two brokers of one cluster and the
# clients, each in a network namespace of its own (ip netns + veth to a
# bridge, iproute2, as root).  A cut between two nodes is a blackhole
# route on both sides: established connections go silent, new ones fail.
#
#   scripts/partition.sh [--short] [--build DIR] [--keep]
#
# Nodes: ns1, ns2 (NameServers), broker-a, broker-b (cluster PartCluster,
# both serving PartTopic, 4 queues each), cl (`rmq audit produce` with
# sendLatencyFaultEnable and `rmq audit consume`, both given both
# NameServers).  Phases:
#   0. linked, S s of load: both brokers take sends.
#   1. cut broker-a <-> ns1.  ns1 must stop routing PartTopic to broker-a
#      after brokerChannelExpiredTime (4.9.8 hard-codes 120 s; here the
#      key is E, the broker registering every 10 s, Java's shortest
#      period), while ns2 still routes to it.
#   2. also cut broker-a <-> cl for S s: the producer fails over; sends
#      are acknowledged by broker-b alone.
#   3. heal both cuts: broker-a registers at ns1 again (<= 10 s + TCP).
#   4. S s more load, and a second producer started for those S s: it
#      sends to both brokers (the first one still avoids broker-a, as
#      4.9.8's MQFaultStrategy isolates a broker 600 s after a failed
#      send); then the audit of both: nothing acknowledged lost.
# Full: E = 40 s, S = 10; --short (spec/integration/chaos_scripts_spec.lua):
# E = 15 s, S = 4, < 90 s.  The last line is "partition: acknowledged=N
# lost=N duplicates=N ..."; exit 0 when every check passed.  Where
# namespaces cannot be made (not root, no iproute2, a container without
# CAP_SYS_ADMIN) it prints "partition: SKIP: reason" and exits 0.
# Everything it creates (namespaces, veths, servers by PID, its temp dir)
# is removed on exit.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
source "$(dirname "${BASH_SOURCE[0]}")/proof-lib.sh"
cd "$RMQ_ROOT"

expire=40000 secs=10 build="${RMQ_BUILD:-build}" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --short) expire=15000 secs=4; shift ;;
        --build) build="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--short] [--build DIR] [--keep]" >&2; exit 2 ;;
    esac
done

skip() { echo "partition: SKIP: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "no iproute2 (ip)"
[ -x "$build/rmq-server" ] || rmq_build "$build" >/dev/null
build="$(cd "$build" && pwd)"

id=$$
sub="10.233.$((id % 250))"
nodes=(ns1 ns2 ba bb cl)
declare -A ip_of=([ns1]="$sub.1" [ns2]="$sub.2" [ba]="$sub.11" [bb]="$sub.12" [cl]="$sub.21")
hub="rmqpt-hub-$id"
# Under scripts/test.sh, inside the run's own directory (removed after it).
tmp="$(mktemp -d "${RMQ_TEST_TMP:-/tmp}/rmq-partition.XXXXXX")"
pids=()

nsname() { echo "rmqpt-$1-$id"; }
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for n in "${nodes[@]}"; do ip netns del "$(nsname "$n")" 2>/dev/null || true; done
    ip netns del "$hub" 2>/dev/null || true
    if [ "$keep" = 1 ]; then echo "partition: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

ip netns add "$hub" 2>/dev/null || skip "cannot create a network namespace"
ip -n "$hub" link add br0 type bridge 2>/dev/null || skip "cannot create a bridge"
ip -n "$hub" link set br0 up
ip -n "$hub" link set lo up
k=0
for n in "${nodes[@]}"; do
    k=$((k + 1))
    ns=$(nsname "$n")
    ip netns add "$ns"
    a="pt$((id % 10000))n$k" b="pt$((id % 10000))h$k"
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "$ns"
    ip link set "$b" netns "$hub"
    ip -n "$hub" link set "$b" master br0
    ip -n "$hub" link set "$b" up
    ip -n "$ns" addr add "${ip_of[$n]}/24" dev "$a"
    ip -n "$ns" link set "$a" up
    ip -n "$ns" link set lo up
done
# Foreground commands only: `on ... &` would run in a subshell whose PID
# is not the server's, and killing that PID would leave the server
# running (ip netns exec itself execs the command: its PID is the
# server's).
on() { local n="$1"; shift; ip netns exec "$(nsname "$n")" "$@"; }
cut() {
    ip -n "$(nsname "$1")" route add blackhole "${ip_of[$2]}/32"
    ip -n "$(nsname "$2")" route add blackhole "${ip_of[$1]}/32"
}
heal() {
    ip -n "$(nsname "$1")" route del blackhole "${ip_of[$2]}/32"
    ip -n "$(nsname "$2")" route del blackhole "${ip_of[$1]}/32"
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

namesrvs="${ip_of[ns1]}:9876;${ip_of[ns2]}:9876"
for n in ns1 ns2; do
    cat >"$tmp/$n.lua" <<C
return { role = 'namesrv', listenPort = 9876, bindAddress = '${ip_of[$n]}', workers = 1,
  brokerChannelExpiredTime = $expire, scanNotActiveBrokerInterval = 1000 }
C
done
declare -A bname=([ba]=broker-a [bb]=broker-b)
for n in ba bb; do
    cat >"$tmp/$n.lua" <<C
return { role = 'broker', listenPort = 10911, bindAddress = '${ip_of[$n]}', brokerIP1 = '${ip_of[$n]}',
  brokerClusterName = 'PartCluster', brokerName = '${bname[$n]}', namesrvAddr = '$namesrvs',
  storePathRootDir = '$tmp/$n-store', workers = 2, mappedFileSizeCommitLog = 1048576,
  mappedFileSizeConsumeQueue = 60000, registerNameServerPeriod = 10000,
  registerBrokerTimeoutMills = 3000 }
C
done
for n in ns1 ns2 ba bb; do
    ip netns exec "$(nsname "$n")" "${proof_server_env[@]}" "$build/rmq-server" "$tmp/$n.lua" \
        >"$tmp/$n.out" 2>"$tmp/$n.err" &
    pids+=($!)
    proof_ready "$tmp/$n.out" "$tmp/$n.err" 0 "partition: $n" "$!" || exit 1
done
for n in ba bb; do
    on cl "$build/rmq" admin updateTopic -n "$namesrvs" -b "${ip_of[$n]}:10911" -t PartTopic -r 4 -w 4 >/dev/null
done

# routes NS: the brokers NameServer NS routes PartTopic to, sorted.
routes() {
    on cl "$build/rmq" topic-route -n "${ip_of[$1]}:9876" PartTopic 2>/dev/null \
        | awk 'NR > 1 { print $1 }' | sort -u | tr '\n' ' ' | sed 's/ $//'
}
# await SECONDS CMD...: polls CMD every 0.5 s; prints the ms it took.
await() {
    local limit=$(( $1 * 2 )) t0; shift
    t0=$(now_ms)
    for _ in $(seq "$limit"); do
        if "$@"; then echo $(( $(now_ms) - t0 )); return 0; fi
        sleep 0.5
    done
    return 1
}
both_routed() { [ "$(routes ns1)" = "broker-a broker-b" ] && [ "$(routes ns2)" = "broker-a broker-b" ]; }
a_gone_at_ns1() { [ "$(routes ns1)" = "broker-b" ]; }
a_back_at_ns1() { [ "$(routes ns1)" = "broker-a broker-b" ]; }
await 20 both_routed >/dev/null || { echo "partition: FAILED: the NameServers never routed both brokers"; exit 1; }

rec="$tmp/records"
mkdir -p "$rec"
ip netns exec "$(nsname cl)" "$build/rmq" audit consume -n "$namesrvs" -t PartTopic -g PartGroup -o "$rec/received.log" \
    --stop-file "$tmp/stop-consumer" >"$tmp/consumer.out" 2>"$tmp/consumer.err" &
cpid=$!; pids+=("$cpid")
ip netns exec "$(nsname cl)" "$build/rmq" audit produce -n "$namesrvs" -t PartTopic -o "$rec/acked.log" -c 4 -r 400 -s 200 \
    --timeout 1000 --latency-fault --stop-file "$tmp/stop-producer" >"$tmp/producer.out" 2>"$tmp/producer.err" &
ppid=$!; pids+=("$ppid")

acks_by() { awk -v b="$1" -v from="$2" '$1 == "A" && NR > from && $4 == b' "$rec/acked.log" | wc -l; }
lines() { wc -l <"$rec/acked.log"; }
fail=0
check() { if eval "$2"; then echo "  ok: $1"; else echo "  FAILED: $1"; fail=1; fi; }

echo "partition: ns1 ${ip_of[ns1]}, ns2 ${ip_of[ns2]}, broker-a ${ip_of[ba]}, broker-b ${ip_of[bb]}," \
     "clients ${ip_of[cl]}; brokerChannelExpiredTime $expire ms"
mark=0
sleep "$secs"
a0=$(acks_by broker-a "$mark") b0=$(acks_by broker-b "$mark")
echo "phase 0 (linked, $secs s): acknowledged by broker-a $a0, broker-b $b0"
check "both brokers took sends" '[ "$a0" -gt 0 ] && [ "$b0" -gt 0 ]'

cut ba ns1
echo "phase 1: cut broker-a <-> ns1"
if expired=$(await $(( expire / 1000 + 20 )) a_gone_at_ns1); then
    echo "  ns1 stopped routing to broker-a $expired ms after the cut"
    # The last registration came up to one period (10 s) before the cut.
    check "ns1 expired broker-a after brokerChannelExpiredTime (- one period, + the scan)" \
          '[ "$expired" -ge $(( expire - 10000 - 1000 )) ] && [ "$expired" -le $(( expire + 3000 )) ]'
else
    expired=-1
    check "ns1 expired broker-a" false
fi
check "ns2 still routes to broker-a" '[ "$(routes ns2)" = "broker-a broker-b" ]'

cut ba cl
echo "phase 2: cut broker-a <-> clients for $secs s"
sleep 2     # sends already on their way to broker-a time out (1 s)
mark=$(lines)
sleep "$((secs - 2 > 0 ? secs - 2 : 1))"
a2=$(acks_by broker-a "$mark") b2=$(acks_by broker-b "$mark")
echo "  acknowledged since the cut settled: broker-a $a2, broker-b $b2"
check "the producer failed over to broker-b" '[ "$b2" -gt 0 ] && [ "$a2" -eq 0 ]'

heal ba ns1
heal ba cl
echo "phase 3: healed"
if back=$(await 40 a_back_at_ns1); then
    echo "  broker-a registered at ns1 again $back ms after the heal"
else
    back=-1
    check "broker-a registered at ns1 again" false
fi
mark=$(lines)
# A producer started now sees the healed cluster as a new client would;
# the running one still avoids broker-a: 4.9.8's MQFaultStrategy counts a
# failed send as 30 s of latency, 600 s of isolation.
ip netns exec "$(nsname cl)" "$build/rmq" audit produce -n "$namesrvs" -t PartTopic -o "$rec/acked-fresh.log" -c 2 -r 200 -s 200 \
    --id Q --latency-fault -d "$secs" >"$tmp/producer-fresh.out" 2>"$tmp/producer-fresh.err" &
fpid=$!; pids+=("$fpid")
sleep "$secs"
wait "$fpid" || true
a4=$(acks_by broker-a "$mark") b4=$(acks_by broker-b "$mark")
fa=$(awk '$1 == "A" && $4 == "broker-a"' "$rec/acked-fresh.log" | wc -l)
fb=$(awk '$1 == "A" && $4 == "broker-b"' "$rec/acked-fresh.log" | wc -l)
echo "phase 4 (healed, $secs s): acknowledged by broker-a $a4, broker-b $b4 (the running producer);" \
     "a new producer: broker-a $fa, broker-b $fb"
check "a new producer sends to both brokers again" '[ "$fa" -gt 0 ] && [ "$fb" -gt 0 ]'
touch "$tmp/stop-producer"
wait "$ppid" || true

# The consumer catches up (its pulls to broker-a resume after the heal).
cat "$rec/acked.log" "$rec/acked-fresh.log" >"$rec/acked-all.log"
proof_drain "$build" "$rec/acked-all.log" "$rec/received.log"
touch "$tmp/stop-consumer"
wait "$cpid" || true
status=0
line=$("$build/rmq" audit check "$rec/acked.log" "$rec/acked-fresh.log" "$rec/received.log" 2>"$tmp/lost.txt") || status=$?
echo "audit: $line"
if [ "$status" -ne 0 ]; then head -20 "$tmp/lost.txt"; fail=1; fi
acked=$(proof_field "$line" acknowledged) lost=$(proof_field "$line" lost) dup=$(proof_field "$line" duplicates)
[ "${acked:-0}" -gt 0 ] || fail=1
[ "$fail" = 0 ] || echo "partition: FAILED (see above)"
echo "partition: acknowledged=${acked:-0} lost=${lost:--1} duplicates=${dup:-0} expired_after_ms=$expired" \
     "failover_acks=$b2 reregistered_after_ms=$back result=$([ "$fail" = 0 ] && echo OK || echo FAILED)"
[ "$fail" = 0 ]
