#!/usr/bin/env bash
# Master and slave on two hosts, as far as one machine allows: two network
# namespaces joined by a veth pair (iproute2, needs root).  The link is cut
# (ip link set down) and healed while a producer keeps sending to the
# master; replication must stall, resume and converge with the slave's
# commit log byte for byte the master's (no gap, no duplicate) and the
# same consume queue ends.
#
#   scripts/netns-ha.sh [--short] [--build DIR]
#
# Phases: send S s (replicated); cut the link, send S s (the slave's files
# must not change); heal, send S s; stop sending and wait (<= 60 s) until
# the slave's files equal the master's.  `rmq bench produce -c 16 -s 512`,
# S = 3; --short (what spec/integration/ha_netns_spec.lua runs): -c 1
# -s 256, S = 1.  Exit 0 = converged, 1 =
# failed, 77 = skipped (not root, or no network namespaces here: the
# reason is printed).  Everything it creates (namespaces, veth, servers
# by PID, its temp dir) is removed on exit.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$RMQ_ROOT"

secs=3 conc=16 size=512 build="${RMQ_BUILD:-build}"
while [ $# -gt 0 ]; do
    case "$1" in
        --short) secs=1 conc=1 size=256; shift ;;
        --build) build="$2"; shift 2 ;;
        *) echo "usage: $0 [--short] [--build DIR]" >&2; exit 2 ;;
    esac
done

skip() { echo "netns-ha: SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "no iproute2 (ip)"
[ -x "$build/rmq-server" ] || rmq_build "$build" >/dev/null

id=$$
nm="rmqha-m-$id" ns_="rmqha-s-$id"
vm="rmqham$((id % 100000))" vs="rmqhas$((id % 100000))"
net="10.231.$((id % 250)).0"
ipm="10.231.$((id % 250)).1" ips="10.231.$((id % 250)).2"
tmp="$(mktemp -d /tmp/rmq-netns-ha.XXXXXX)"
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns del "$nm" 2>/dev/null || true
    ip netns del "$ns_" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$nm" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$ns_"
ip link add "$vm" type veth peer name "$vs"
ip link set "$vm" netns "$nm"
ip link set "$vs" netns "$ns_"
ip -n "$nm" addr add "$ipm/24" dev "$vm"
ip -n "$ns_" addr add "$ips/24" dev "$vs"
for n in "$nm" "$ns_"; do ip -n "$n" link set lo up; done
ip -n "$nm" link set "$vm" up
ip -n "$ns_" link set "$vs" up

# Waits for a READY line in $1 (<= 15 s).
ready() {
    for _ in $(seq 150); do grep -q READY "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "netns-ha: no READY in $1:"; cat "${1%.out}.err"; return 1
}

# The default HA allow list (the master serves the brokers registered for
# its brokerName): no haAllowAnyAddress.
common="brokerClusterName = 'NetnsCluster', brokerName = 'broker-netns', workers = 2,
  mappedFileSizeCommitLog = 1048576, registerNameServerPeriod = 2000,
  haSendHeartbeatInterval = 1000, haHousekeepingInterval = 5000, namesrvAddr = '$ipm:9876'"
cat > "$tmp/ns.lua" <<C
return { role = 'namesrv', listenPort = 9876, bindAddress = '$ipm' }
C
cat > "$tmp/m.lua" <<C
return { role = 'broker', listenPort = 10911, bindAddress = '$ipm', brokerIP1 = '$ipm',
  brokerRole = 'ASYNC_MASTER', storePathRootDir = '$tmp/master', $common }
C
cat > "$tmp/s.lua" <<C
return { role = 'broker', listenPort = 10911, bindAddress = '$ips', brokerIP1 = '$ips',
  brokerRole = 'SLAVE', brokerId = 1, storePathRootDir = '$tmp/slave', $common }
C
ip netns exec "$nm" "$build/rmq-server" "$tmp/ns.lua" >"$tmp/ns.out" 2>"$tmp/ns.err" & pids+=($!)
ready "$tmp/ns.out"
ip netns exec "$nm" "$build/rmq-server" "$tmp/m.lua" >"$tmp/m.out" 2>"$tmp/m.err" & pids+=($!)
ready "$tmp/m.out"
ip netns exec "$ns_" "$build/rmq-server" "$tmp/s.lua" >"$tmp/s.out" 2>"$tmp/s.err" & pids+=($!)
ready "$tmp/s.out"
for _ in $(seq 150); do grep -q "HA: connected to master" "$tmp/s.err" && break; sleep 0.1; done
grep -q "HA: connected to master" "$tmp/s.err" || { echo "netns-ha: the slave did not connect"; cat "$tmp/s.err"; exit 1; }

produce() {
    ip netns exec "$nm" "$build/rmq" bench produce -n "$ipm:9876" -t NetnsTopic -s "$size" -c "$conc" -d "$1" \
        | grep Complete || true
}

# Byte-for-byte: every commit log file on either side equals the other's
# (a file one side lacks must be all zeros: the allocator's next file).
same_logs() {
    local f
    for f in $( (ls "$tmp/master/commitlog"; ls "$tmp/slave/commitlog") | sort -u); do
        local a="$tmp/master/commitlog/$f" b="$tmp/slave/commitlog/$f"
        [ -f "$a" ] || a=/dev/zero
        [ -f "$b" ] || b=/dev/zero
        cmp -s -n 1048576 "$a" "$b" || return 1
    done
    return 0
}
digest() { cat "$tmp/slave/commitlog/"* | md5sum | cut -d' ' -f1; }

echo "netns-ha: master $ipm ($nm), slave $ips ($ns_); phases of $secs s"
echo "phase 1 (linked):  $(produce "$secs")"
ip -n "$nm" link set "$vm" down
sleep 0.5   # frames in flight land before the cut is measured
before=$(digest)
echo "phase 2 (cut):     $(produce "$secs")"
sleep 1
after=$(digest)
if [ "$before" != "$after" ]; then
    echo "netns-ha: FAILED: the slave's log changed while the link was down"; exit 1
fi
if same_logs; then
    echo "netns-ha: FAILED: the master took no writes while the link was down"; exit 1
fi
echo "stalled: the slave's files did not change while cut"
ip -n "$nm" link set "$vm" up
echo "phase 3 (healed):  $(produce "$secs")"
t0=$(date +%s%N)
for _ in $(seq 600); do same_logs && break; sleep 0.1; done
if ! same_logs; then
    echo "netns-ha: FAILED: the slave did not converge within 60 s"
    tail -20 "$tmp/s.err"; exit 1
fi
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
files=$(ls "$tmp/master/commitlog" | wc -l)
reconnects=$(grep -c "HA: connected to master" "$tmp/s.err" || true)
echo "converged ${ms} ms after the last send: $files commit log files byte for byte equal; slave connected $reconnects time(s)"
# The consume queues too: every queue file of the master equals the slave's.
for q in "$tmp/master/consumequeue/NetnsTopic/"*; do
    qid=$(basename "$q")
    for f in "$q"/*; do
        cmp -s "$f" "$tmp/slave/consumequeue/NetnsTopic/$qid/$(basename "$f")" || {
            echo "netns-ha: FAILED: consume queue $qid/$(basename "$f") differs"; exit 1; }
    done
done
echo "netns-ha: OK"
