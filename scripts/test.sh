#!/usr/bin/env bash
# Installs what is missing, builds, lints the Lua (luacheck, .luacheckrc)
# and runs every busted spec under spec/.
# The last line is "N passed, M failed" (busted errors count as failed,
# and so does a luacheck warning, as one failure; the specs run anyway),
# with ", K skipped" when specs that need ../shared/fixtures were left out
# because the clone has none beside it (with CI=true they fail instead);
# the exit status is non-zero on any failure or error.
#
#   scripts/test.sh            the normal build (build/)
#   scripts/test.sh --asan     an ASan+UBSan build (build-asan/): the specs
#                              start sanitized servers and load a
#                              sanitized rmq.so into lua5.4
#   extra arguments go to busted (e.g. a spec path, --filter=...)
set -uo pipefail
source "$(dirname "$0")/setup.sh"
# setup.sh runs with -e; here a failing busted must still reach the
# summary line below.
set +e
cd "$RMQ_ROOT"

build=build
cmake_args=()
lua_env=()
if [ "${1:-}" = "--asan" ]; then
    shift
    build=build-asan
    cmake_args=(-DRMQ_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
    # lua5.4 itself is not instrumented: the runtime must be loaded first.
    lua_env=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)"
             ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
    # The servers the specs start are fully instrumented: leaks count.
    export RMQ_SERVER_ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
fi

rmq_install_packages "${RMQ_PACKAGES[@]}" || exit 1
# The interop specs drive rmq with ali-ons, a third-party RocketMQ client
# (npm), and the web console with playwright-core (npm) and Debian's
# chromium, and the gRPC specs with RocketMQ 5's Node.js SDK
# (rocketmq-client-nodejs).  Node comes from Debian when the machine has none.
command -v npm >/dev/null 2>&1 || rmq_install_packages nodejs npm || exit 1
for d in spec/interop/ali_ons spec/interop/chromium spec/interop/grpc_node; do
    if [ ! -d "$d/node_modules" ]; then
        npm ci --prefix "$d" --no-audit --no-fund --loglevel=error >&2 || exit 1
    fi
done
rmq_build "$build" "${cmake_args[@]}" || { echo "0 passed, 1 failed"; exit 1; }

# Every .lua of the tree (.luacheckrc: Lua 5.4, no globals, busted's in
# spec/); -q prints only the files with warnings and the total.
lint_failed=0
luacheck -q --no-color . || lint_failed=1

log=$(mktemp)
# Specs make their stores under this run's own directory (spec/support/
# tmp.lua); a run leaves ~1.6 GB there.  It is removed at the end, unless
# RMQ_KEEP_TMP=1 (to look at a failed spec's store and logs).  Runs side
# by side (two clones on one machine) never touch each other's.
RMQ_TEST_TMP=$(mktemp -d /tmp/rmq-specs.XXXXXX)
export RMQ_TEST_TMP
# Nothing a spec starts writes into the user's home (a NameServer's
# default kvConfigPath is ~/namesrv/kvConfig.json, a broker's store
# ~/store): HOME is this run's own.  spec/support/server.lua gives each
# server its own temp dir as HOME too, for a plain busted run.
mkdir -p "$RMQ_TEST_TMP/home"
export HOME="$RMQ_TEST_TMP/home"
# Servers the specs start inherit this: leaks and UB in them fail loudly.
export RMQ_BUILD="$build"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
env "${lua_env[@]}" lua5.4 /usr/bin/busted --cpath="./$build/?.so" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

if [ "${RMQ_KEEP_TMP:-0}" != 1 ]; then
    rm -rf "$RMQ_TEST_TMP"
else
    echo "spec files kept in $RMQ_TEST_TMP" >&2
fi

summary=$(grep -E '^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' "$log" | tail -1)
rm -f "$log"
if [ -z "$summary" ]; then
    echo "0 passed, $((1 + lint_failed)) failed"
    exit 1
fi
passed=$(echo "$summary" | sed -E 's#^([0-9]+) success.*#\1#')
failures=$(echo "$summary" | sed -E 's#.* ([0-9]+) failures? / .*#\1#')
errors=$(echo "$summary" | sed -E 's#.* ([0-9]+) errors? .*#\1#')
failed=$((failures + errors + lint_failed))
pending=$(echo "$summary" | sed -nE 's#.* ([0-9]+) pending.*#\1#p')
if [ "${pending:-0}" -gt 0 ]; then
    # Specs that need ../shared/fixtures, in a clone without them
    # (spec/support/fixtures.lua gate); CI=true makes them fail instead.
    echo "$passed passed, $failed failed, $pending skipped"
else
    echo "$passed passed, $failed failed"
fi
if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ]; then
    exit 1
fi
exit 0
