#!/usr/bin/env bash
# Send throughput over plaintext and over TLS in the same run: one
# standalone server (NameServer + broker) in tls.server.mode permissive
# with a certificate made here (openssl, EC P-256, in a temp dir removed
# at the end), then `rmq bench produce -s SIZE -c CONCURRENCY -d SECONDS`
# alternately plaintext and with --tls (TLS 1.3, what OpenSSL and the
# client agree on), ROUNDS rounds each; prints each round's line and the
# medians with the TLS/plaintext ratio.  The client runs on the same
# machine, so its encryption competes with the server's for the cores.
# Then the cost of a connection: CONNECTS sequential connections, each
# one request (GET_BROKER_CLUSTER_INFO) and close, plaintext and TLS
# (the handshake: ECDHE + an ECDSA P-256 signature).
#
#   scripts/bench/tls.sh [SECONDS [SIZE [CONCURRENCY [ROUNDS [CONNECTS]]]]]   (10 1024 64 3 500)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"
build="${RMQ_BUILD:-build}"
rmq_build "$build" >/dev/null
secs="${1:-10}" size="${2:-1024}" conc="${3:-64}" rounds="${4:-3}" connects="${5:-500}"

dir=$(mktemp -d /tmp/rmq-bench-tls.XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 1 -subj "/CN=rmq bench" 2>/dev/null
"$build/rmq-server" conf/standalone.lua --listenPort=0 --namesrvListenPort=0 \
    --bindAddress=127.0.0.1 --storePathRootDir="$dir/store" --kvConfigPath="$dir/kv.json" \
    --metricsExporterType=DISABLE --mappedFileSizeCommitLog=268435456 \
    --tls.server.mode=permissive --tls.server.certPath="$dir/cert.pem" \
    --tls.server.keyPath="$dir/key.pem" >"$dir/out" 2>"$dir/err" &
pid=$!
for _ in $(seq 200); do grep -q READY "$dir/out" && break; sleep 0.05; done
grep -q READY "$dir/out" || { cat "$dir/err" >&2; exit 1; }
ns=$(sed -n 's/.*listen=\([0-9.:]*\).*/\1/p' "$dir/out")

echo "rmq bench produce -s $size -c $conc -d $secs, $rounds rounds each, server $(nproc) cores"
plain=() tls=()
tps_of() { sed -n 's/.*Send TPS: \([0-9]*\).*/\1/p' | tail -1; }
for r in $(seq "$rounds"); do
    line=$("$build/rmq" bench produce -n "$ns" -t BenchTls -s "$size" -c "$conc" -d "$secs" | tail -1)
    echo "plaintext round $r: $line"
    plain+=("$(echo "$line" | tps_of)")
    line=$("$build/rmq" --tls bench produce -n "$ns" -t BenchTls -s "$size" -c "$conc" -d "$secs" | tail -1)
    echo "tls       round $r: $line"
    tls+=("$(echo "$line" | tps_of)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${plain[@]}") mt=$(median "${tls[@]}")
echo "median send TPS: plaintext $mp, tls $mt, tls/plaintext $(awk -v a="$mt" -v b="$mp" 'BEGIN {printf "%.2f", a / b}')"

RMQ_BUILD="$build" lua5.4 - "$ns" "$connects" <<'LUA'
local build = os.getenv("RMQ_BUILD") or "build"
package.cpath = "./" .. build .. "/?.so;" .. package.cpath
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local core = require("rmq.core")
local net = require("rmq.net")
local addr, n = arg[1], tonumber(arg[2])
local function run(tls)
    local t0 = core.mono_ms()
    for _ = 1, n do
        local c = assert(net.connect(addr, { tls = tls }))
        assert(c:call({ code = 106 }, 5000))
        c:close()
    end
    return n * 1000 / math.max(1, core.mono_ms() - t0)
end
local plain, tls = run(false), run(true)
print(("connect + 1 request + close, %d in a row: plaintext %.0f/s, tls %.0f/s"):format(n, plain, tls))
LUA
