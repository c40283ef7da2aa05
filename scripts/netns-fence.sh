#!/usr/bin/env bash
# A master cut from its controllers and etcd, but still reachable by the
# clients, fences itself; a new master is elected on the majority side;
# after the heal there is one history and nothing acknowledged is lost.
# Three network namespaces (iproute2, needs root):
#
#   C  etcd (127.0.0.1 inside C) and one controller
#   M  the first master (rmq broker in controller mode, allAckInSyncStateSet)
#   H  the NameServer, the two other brokers of the set, and the clients
#      (`rmq audit produce` / `rmq audit consume`)
#
# joined by three veth pairs H-C, H-M and M-C.  A new namespace does not
# forward, so M reaches the controller only over M-C; cutting M-C (ip link
# set down) cuts M from the controllers and etcd while H (clients and
# slaves) still reaches it.  Phases, each with its own audit record file:
#   1 linked   M is the master, the SyncStateSet holds all three; sends
#   2 cut      sends go on; M must fence itself (masterLeaseTimeoutMills,
#              below controllerHeartBeatTimeoutMills) before the controller
#              elects a broker of H, and sends resume on the new master
#   3 healed   M learns the new master, truncates what was never
#              acknowledged, rejoins as a slave; sends
# then: M's commit log ends byte for byte the new master's; `rmq audit
# check` over every phase: lost=0, moved=0 (one history); no send was
# acknowledged by M after the first one the new master acknowledged.
#
#   scripts/netns-fence.sh [--short] [--build DIR]
#
# --short (spec/integration/controller_fence_netns_spec.lua): phases of 2 s.
# Exit 0 = OK, 1 = failed, 77 = skipped (not root, no namespaces: the
# reason is printed).  Everything it creates (namespaces, veth pairs,
# processes by PID, its temp dir) is removed on exit.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$RMQ_ROOT"

secs=4 build="${RMQ_BUILD:-build}"
while [ $# -gt 0 ]; do
    case "$1" in
        --short) secs=2; shift ;;
        --build) build="$2"; shift 2 ;;
        *) echo "usage: $0 [--short] [--build DIR]" >&2; exit 2 ;;
    esac
done

skip() { echo "netns-fence: SKIPPED: $*"; exit 77; }
fail() { echo "netns-fence: FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "no iproute2 (ip)"
[ -x /usr/bin/etcd ] || skip "no etcd (Debian package etcd-server)"
[ -x "$build/rmq-server" ] || rmq_build "$build" >/dev/null

id=$$
nh="rmqf-h-$id" nm="rmqf-m-$id" nc="rmqf-c-$id"
s=$((id % 100000))
vhc="rfhc$s" vch="rfch$s" vhm="rfhm$s" vmh="rfmh$s" vmc="rfmc$s" vcm="rfcm$s"
o=$((id % 200 + 20))
hc_h="10.$o.1.1" hc_c="10.$o.1.2" hm_h="10.$o.2.1" hm_m="10.$o.2.2" mc_m="10.$o.3.1" mc_c="10.$o.3.2"
tmp="$(mktemp -d /tmp/rmq-netns-fence.XXXXXX)"
rec="$tmp/records"
mkdir -p "$rec"
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for n in "$nh" "$nm" "$nc"; do ip netns del "$n" 2>/dev/null || true; done
    [ -n "${RMQ_KEEP_TMP:-}" ] && echo "netns-fence: kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$nh" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$nm"
ip netns add "$nc"
pair() {   # pair NS1 DEV1 IP1 NS2 DEV2 IP2
    ip link add "$2" type veth peer name "$5"
    ip link set "$2" netns "$1"
    ip link set "$5" netns "$4"
    ip -n "$1" addr add "$3/24" dev "$2"
    ip -n "$4" addr add "$6/24" dev "$5"
    ip -n "$1" link set "$2" up
    ip -n "$4" link set "$5" up
}
for n in "$nh" "$nm" "$nc"; do ip -n "$n" link set lo up; done
pair "$nh" "$vhc" "$hc_h" "$nc" "$vch" "$hc_c"
pair "$nh" "$vhm" "$hm_h" "$nm" "$vmh" "$hm_m"
pair "$nm" "$vmc" "$mc_m" "$nc" "$vcm" "$mc_c"

# Waits (<= 30 s) for a line matching $2 in file $1.
wait_for() {
    for _ in $(seq 300); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
start() {   # start NS NAME CONF: rmq-server in NS, output in $tmp/NAME.{out,err}
    ip netns exec "$1" "$build/rmq-server" "$3" >"$tmp/$2.out" 2>"$tmp/$2.err" & pids+=($!)
    wait_for "$tmp/$2.out" READY || { cat "$tmp/$2.err"; fail "$2 printed no READY"; }
}
# Milliseconds since the epoch of a log line's "YYYY-MM-DD HH:MM:SS.mmm".
line_ms() { date -u -d "$(echo "$1" | cut -c1-23)" +%s%3N; }

ip netns exec "$nc" /usr/bin/etcd --name f --data-dir "$tmp/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster f=http://127.0.0.1:2380 >"$tmp/etcd.out" 2>"$tmp/etcd.err" & pids+=($!)
cat > "$tmp/ctl.lua" <<C
return { role = 'controller', listenPort = 19876, bindAddress = '0.0.0.0',
  etcdEndpoints = 'http://127.0.0.1:2379', etcdLeaseTtlSeconds = 2, scanNotActiveBrokerInterval = 300 }
C
cat > "$tmp/ns.lua" <<C
return { role = 'namesrv', listenPort = 9876, bindAddress = '0.0.0.0' }
C
common="brokerClusterName = 'FenceCluster', brokerName = 'bs-fence', workers = 1, bindAddress = '0.0.0.0',
  enableControllerMode = true, brokerHeartbeatInterval = 300, controllerHeartBeatTimeoutMills = 3000,
  masterLeaseTimeoutMills = 1500, syncBrokerMetadataPeriod = 500, allAckInSyncStateSet = true,
  autoCreateTopicEnable = true, haAllowAnyAddress = true, haSendHeartbeatInterval = 500,
  haMaxTimeSlaveNotCatchup = 5000, registerNameServerPeriod = 2000, slaveSynchronizePeriodMillis = 1000,
  mappedFileSizeCommitLog = 1048576"
cat > "$tmp/m.lua" <<C
return { role = 'broker', listenPort = 10911, brokerIP1 = '$hm_m', namesrvAddr = '$hm_h:9876',
  controllerAddr = '$mc_c:19876', storePathRootDir = '$tmp/m', brokerElectionPriority = 1, $common }
C
for b in 2 3; do
    cat > "$tmp/s$b.lua" <<C
return { role = 'broker', listenPort = 109${b}1, brokerIP1 = '$hm_h', namesrvAddr = '127.0.0.1:9876',
  controllerAddr = '$hc_c:19876', storePathRootDir = '$tmp/s$b', brokerElectionPriority = $b, $common }
C
done

start "$nc" ctl "$tmp/ctl.lua"
wait_for "$tmp/ctl.err" "controller: active" || { cat "$tmp/ctl.err" "$tmp/etcd.err" | tail -30; fail "no active controller"; }
start "$nh" ns "$tmp/ns.lua"
start "$nm" m "$tmp/m.lua"
wait_for "$tmp/m.err" "role: master of bs-fence at epoch 1" || { tail -20 "$tmp/m.err"; fail "M did not become the master"; }
start "$nh" s2 "$tmp/s2.lua"
start "$nh" s3 "$tmp/s3.lua"
for _ in $(seq 600); do grep -q "SyncStateSet now 1,2,3" "$tmp/ctl.err" && break; sleep 0.1; done
grep -q "SyncStateSet now 1,2,3" "$tmp/ctl.err" || { tail -20 "$tmp/ctl.err"; tail -20 "$tmp/m.err"; fail "the SyncStateSet never held all three"; }
echo "netns-fence: M $hm_m:10911 ($nm) master at epoch 1, SyncStateSet {1,2,3}; H $hm_h (NameServer, two brokers, clients); C $hc_c (etcd, controller)"

produce() {   # produce PHASE [extra args]: in H, in the background; $prod = its PID
    local phase="$1"; shift
    ip netns exec "$nh" "$build/rmq" audit produce -n 127.0.0.1:9876 -t FenceTopic -o "$rec/$phase.log" \
        -c 2 -r 100 -s 128 --timeout 2000 --id "$phase" --stop-file "$tmp/stop-$phase" "$@" \
        >"$tmp/produce-$phase.out" 2>&1 &
    prod=$!
    pids+=($prod)
}
stop_produce() { touch "$tmp/stop-$1"; wait "$prod" || true; }
acks() { grep -c '^A ' "$rec/$1.log" 2>/dev/null || true; }

# Phase 1: linked
produce p1
sleep "$secs"
stop_produce p1
[ "$(acks p1)" -gt 0 ] || { cat "$tmp/produce-p1.out"; fail "no acknowledged send while linked"; }
echo "phase 1 (linked): $(acks p1) acknowledged"

# Phase 2: M cut from C
produce p2
sleep 1
# On a loaded machine M can miss a lease renewal while linked and fence
# itself for a moment (writes refused, then the lease is back): the
# figures below are of the first fence and election after the cut.
fences_before=$(grep -c "fenced, writes refused" "$tmp/m.err" || true)
elects_before=$(grep -c "elected broker [23] " "$tmp/ctl.err" || true)
[ "$fences_before" -eq 0 ] || echo "phase 1 (linked): M fenced itself $fences_before times (a lease renewal late on a loaded machine)"
cut_ms=$(date -u +%s%3N)
ip -n "$nm" link set "$vmc" down
wait_nth() {   # wait_nth FILE PATTERN N: until FILE holds N lines matching PATTERN
    for _ in $(seq 300); do [ "$(grep -c -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ] && return 0; sleep 0.1; done
    return 1
}
wait_nth "$tmp/m.err" "fenced, writes refused" $((fences_before + 1)) || { tail -20 "$tmp/m.err"; fail "M never fenced itself"; }
wait_nth "$tmp/ctl.err" "elected broker [23] " $((elects_before + 1)) || { tail -20 "$tmp/ctl.err"; fail "no new master elected"; }
fence_line=$(grep "fenced, writes refused" "$tmp/m.err" | sed -n "$((fences_before + 1))p")
elect_line=$(grep "elected broker [23] " "$tmp/ctl.err" | sed -n "$((elects_before + 1))p")
new_id=$(echo "$elect_line" | sed -E 's/.*elected broker ([23]) .*/\1/')
fence_ms=$(( $(line_ms "$fence_line") - cut_ms ))
elect_ms=$(( $(line_ms "$elect_line") - cut_ms ))
echo "phase 2 (cut): M fenced ${fence_ms} ms after the cut (masterLeaseTimeoutMills 1500); broker $new_id elected ${elect_ms} ms after it"
[ "$fence_ms" -lt "$elect_ms" ] || fail "M fenced itself (${fence_ms} ms) after the new master was elected (${elect_ms} ms)"
new_dir=""
for b in s2 s3; do
    grep -q "role: master of bs-fence at epoch 2" "$tmp/$b.err" 2>/dev/null && new_dir="$tmp/$b" && new_name=$b
done
for _ in $(seq 300); do
    [ -n "$new_dir" ] && break
    sleep 0.1
    for b in s2 s3; do
        grep -q "role: master of bs-fence at epoch 2" "$tmp/$b.err" 2>/dev/null && new_dir="$tmp/$b" && new_name=$b
    done
done
[ -n "$new_dir" ] || fail "no broker of H says it is the master of epoch 2"
new_port=$(grep -o 'listenPort = [0-9]*' "$tmp/$new_name.lua" | grep -o '[0-9]*$')
new_host="$hm_h:$new_port"
# sends resume on the new master
before=$(grep -c " $new_host\$" "$rec/p2.log" || true)
for _ in $(seq 300); do
    [ "$(grep -c " $new_host\$" "$rec/p2.log" || true)" -gt "$((before + 20))" ] && break; sleep 0.1
done
[ "$(grep -c " $new_host\$" "$rec/p2.log" || true)" -gt "$((before + 20))" ] || { tail -5 "$rec/p2.log"; fail "sends did not resume on the new master $new_host"; }
stop_produce p2
old_after=$(awk -v n="$new_host" -v o="$hm_m:10911" '
    $1 == "A" && $7 == n { seen = 1 } $1 == "A" && $7 == o && seen { c++ } END { print c + 0 }' "$rec/p2.log")
echo "phase 2 (cut): $(acks p2) acknowledged ($(grep -c " $hm_m:10911\$" "$rec/p2.log" || true) by M, then $(grep -c " $new_host\$" "$rec/p2.log" || true) by the new master $new_host); acknowledged by M after the new master's first: $old_after"
[ "$old_after" -eq 0 ] || fail "M acknowledged $old_after sends after the new master began (split brain)"

# Phase 3: healed
ip -n "$nm" link set "$vmc" up
ip -n "$nc" link set "$vcm" up
wait_for "$tmp/m.err" "role: slave of .* at epoch 2" || { tail -20 "$tmp/m.err"; fail "M did not rejoin as a slave"; }
dropped=$(grep -o "holds [0-9]* bytes past the last epoch" "$tmp/m.err" | head -1 || true)
echo "phase 3 (healed): M rejoined as a slave of epoch 2${dropped:+ (its log ${dropped}: dropped)}"
produce p3
sleep "$secs"
stop_produce p3
echo "phase 3 (healed): $(acks p3) acknowledged"

# One history: M's commit log ends byte for byte the new master's.
same_logs() {
    local f
    for f in $( (ls "$tmp/m/commitlog"; ls "$new_dir/commitlog") | sort -u); do
        local a="$tmp/m/commitlog/$f" b="$new_dir/commitlog/$f"
        [ -f "$a" ] || a=/dev/zero
        [ -f "$b" ] || b=/dev/zero
        cmp -s -n 1048576 "$a" "$b" || return 1
    done
}
for _ in $(seq 600); do same_logs && break; sleep 0.1; done
same_logs || fail "M's commit log did not become the new master's within 60 s"
echo "one history: M's commit log files are byte for byte the new master's"

# Everything acknowledged, in every phase, is delivered.
ip netns exec "$nh" "$build/rmq" audit consume -n 127.0.0.1:9876 -t FenceTopic -g FenceAudit \
    -o "$rec/received.log" --stop-file "$tmp/stop-consume" >"$tmp/consume.out" 2>&1 &
cons=$!
pids+=($cons)
for _ in $(seq 900); do
    "$build/rmq" audit check "$rec"/p1.log "$rec"/p2.log "$rec"/p3.log "$rec/received.log" >/dev/null 2>&1 && break
    sleep 0.1
done
touch "$tmp/stop-consume"
wait "$cons" || true
out=$("$build/rmq" audit check "$rec"/p1.log "$rec"/p2.log "$rec"/p3.log "$rec/received.log" 2>&1) || true
echo "audit check (every phase): $out"
echo "$out" | grep -q " lost=0 " || fail "acknowledged messages lost"
echo "$out" | grep -q " moved=0" || fail "messages delivered elsewhere than acknowledged"
echo "netns-fence: OK"
