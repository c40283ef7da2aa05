#!/usr/bin/env bash
# `rmq admin` startup-to-answer time: a standalone rmq-server (NameServer
# and broker in one process, on ephemeral ports, a temp store), then N
# runs of `build/rmq admin clusterList` and `topicList` (process start,
# Lua load, one NameServer request and one runtime-info request per
# broker, the table printed, exit), each timed on its own.  Prints the
# mean, median, min and max in ms; Apache mqadmin takes 4-5 s for the
# same (a JVM start).
#
#   scripts/bench/admin_startup.sh [RUNS (default 50)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
runs="${1:-50}"
build="${RMQ_BUILD:-$root/build}"
dir=$(mktemp -d /tmp/rmq-admin-bench.XXXXXX)
"$build/rmq-server" "$root/conf/standalone.lua" --namesrvListenPort=0 --listenPort=0 \
    --storePathRootDir="$dir/store" --kvConfigPath="$dir/kv.json" \
    --mappedFileSizeCommitLog=1048576 --metricsExporterType=DISABLE >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do
    grep -q READY "$dir/out" && break
    sleep 0.05
done
ns=$(sed -n 's/.*READY .*listen=\([0-9.:]*\).*/\1/p' "$dir/out")
[ -n "$ns" ] || { echo "server did not start" >&2; cat "$dir/err" >&2; exit 1; }
"$build/rmq" admin clusterList -n "$ns" >/dev/null   # warm the page cache
for cmd in clusterList topicList; do
    times=()
    for _ in $(seq "$runs"); do
        t0=$(date +%s%N)
        "$build/rmq" admin "$cmd" -n "$ns" >/dev/null
        t1=$(date +%s%N)
        times+=($(( (t1 - t0) / 1000 )))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v cmd="$cmd" -v runs="$runs" '
        { v[NR] = $1; s += $1 }
        END { printf "rmq admin %-12s runs=%d mean=%.1f ms median=%.1f ms min=%.1f ms max=%.1f ms\n",
                     cmd, runs, s / NR / 1000, v[int((NR + 1) / 2)] / 1000, v[1] / 1000, v[NR] / 1000 }'
done
