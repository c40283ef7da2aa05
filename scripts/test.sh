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
#   extra arguments go to busted (e.g. a spec path, --filter=...) and
#   then one busted runs just those
#
# With no extra arguments the C unit tests run first (ctest over
# spec/c/, their cases counted in the summary), then the spec files run in RMQ_TEST_JOBS busted
# processes at once (default: cores + 1; the specs mostly wait on the
# servers they start), split by spec/durations.txt (seconds per file,
# longest first onto the least loaded shard).  Each shard has its own
# RMQ_TEST_TMP and HOME; a failed shard's output is shown in full, a
# passing one's summary only.  RMQ_UPDATE_DURATIONS=1 rewrites
# spec/durations.txt from the run.
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

# Specs make their stores under this run's own directory (spec/support/
# tmp.lua); a run leaves ~1.6 GB there.  It is removed at the end, unless
# RMQ_KEEP_TMP=1 (to look at a failed spec's store and logs).  Runs side
# by side (two clones on one machine) never touch each other's.
run_root=$(mktemp -d /tmp/rmq-specs.XXXXXX)
# Servers the specs start inherit this: leaks and UB in them fail loudly.
export RMQ_BUILD="$build"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# busted_in DIR LOG ARGS...: one busted, its temp files under DIR
# (RMQ_TEST_TMP; RMQ_TEST_ROOT is the run's root above every shard's).
# Nothing a spec starts writes into the user's home (a NameServer's
# default kvConfigPath is ~/namesrv/kvConfig.json, a broker's store
# ~/store): HOME is DIR/home.  spec/support/server.lua gives each server
# its own temp dir as HOME too, for a plain busted run.
busted_in() {
    local dir="$1" log="$2"; shift 2
    mkdir -p "$dir/home"
    RMQ_TEST_TMP="$dir" RMQ_TEST_ROOT="$run_root" HOME="$dir/home" RMQ_SPEC_TIMES="$run_root/times.txt" \
        env "${lua_env[@]}" lua5.4 /usr/bin/busted --cpath="./$build/?.so" \
        -o spec/support/timing_output.lua "$@" >>"$log" 2>&1
}

# The busted summary of LOG: "passed failed pending", or nothing.
summary_of() {
    grep -E '^[0-9]+ success(es)? / [0-9]+ failures? / [0-9]+ errors?' "$1" | tail -1 |
        sed -E 's#^([0-9]+) success(es)? / ([0-9]+) failures? / ([0-9]+) errors? / ([0-9]+) pending.*#\1 \3 \4 \5#'
}

passed=0 failed=$lint_failed pending=0 status=0
count_log() {   # count_log LOG: adds its summary; 1 when it had none
    local s
    s=$(summary_of "$1")
    if [ -z "$s" ]; then
        failed=$((failed + 1))
        return 1
    fi
    set -- $s
    passed=$((passed + $1)) failed=$((failed + $2 + $3)) pending=$((pending + $4))
}

# The C unit tests (spec/c/, cmocka, built by CMake), with the whole
# suite only: their cases count in the summary line; a test program that
# dies without cmocka's report counts as one failure.
c_tests() {
    local log="$run_root/ctest.log" cp cf exe_failed cm_failed
    ctest --test-dir "$build" -j"$(nproc)" -V >"$log" 2>&1
    local rc=$?
    cp=$(grep -E '^[0-9]+: \[  PASSED  \] [0-9]+ test' "$log" | awk '{ s += $5 } END { print s + 0 }')
    cf=$(grep -E '^[0-9]+: \[  FAILED  \] [0-9]+ test\(s\), listed below' "$log" | awk '{ s += $5 } END { print s + 0 }')
    cm_failed=$(grep -cE '^[0-9]+: \[  FAILED  \] [0-9]+ test\(s\), listed below' "$log")
    exe_failed=$(sed -nE 's/.* tests passed, ([0-9]+) tests failed out of.*/\1/p' "$log" | tail -1)
    exe_failed=${exe_failed:-0}
    [ "$exe_failed" -gt "$cm_failed" ] && cf=$((cf + exe_failed - cm_failed))
    if [ "$rc" -ne 0 ] || [ "$cf" -gt 0 ]; then
        cat "$log"
        status=1
        [ "$cf" -gt 0 ] || cf=1
    fi
    # Cases a test skips on this host (e.g. test_sendbatch where the
    # kernel refuses io_uring) are said, not counted as passed.
    local cs
    cs=$(grep -E '^[0-9]+: \[  SKIPPED \] [0-9]+ test' "$log" | awk '{ s += $5 } END { print s + 0 }')
    if [ "$cs" -gt 0 ]; then
        echo "C unit tests (ctest): $cp passed, $cf failed, $cs skipped on this host:"
        grep -E '^[0-9]+: \[  SKIPPED \] [a-z_]' "$log" | sed 's/^[0-9]*: *//' | sort -u || true
    else
        echo "C unit tests (ctest): $cp passed, $cf failed"
    fi
    passed=$((passed + cp)) failed=$((failed + cf)) pending=$((pending + cs))
}

jobs_n=${RMQ_TEST_JOBS:-$(($(nproc) + 1))}
if [ $# -gt 0 ] || [ "$jobs_n" -le 1 ]; then
    # Just what was asked for, in one busted, its output as it comes.
    log="$run_root/busted.log"
    : >"$log"
    busted_in "$run_root/1" "$log" "$@" &
    bpid=$!
    tail -n +1 --pid=$bpid -f "$log" 2>/dev/null
    wait $bpid
    status=$?
    count_log "$log" || true
else
    c_tests
    # The shards: every spec file, heaviest first onto the shard with the
    # least work so far (a file spec/durations.txt does not know yet
    # counts 30 s; without the file, every one does).
    durations=spec/durations.txt
    [ -f "$durations" ] || durations=/dev/null
    mapfile -t shard_files < <(
        find spec -name '*_spec.lua' -not -path '*/node_modules/*' | sort |
        awk -v n="$jobs_n" '
            FILENAME == ARGV[1] { d[$2] = $1; next }
            { f[++m] = $0; w[m] = ($0 in d) ? d[$0] : 30 }
            END {
                for (i = 1; i <= m; i++) o[i] = i
                for (i = 2; i <= m; i++)      # insertion sort, heaviest first
                    for (j = i; j > 1 && w[o[j]] > w[o[j - 1]]; j--) {
                        t = o[j]; o[j] = o[j - 1]; o[j - 1] = t
                    }
                for (k = 1; k <= n; k++) load[k] = 0
                for (i = 1; i <= m; i++) {
                    b = 1
                    for (k = 2; k <= n; k++) if (load[k] < load[b]) b = k
                    load[b] += w[o[i]]; s[b] = s[b] " " f[o[i]]
                }
                for (k = 1; k <= n; k++) printf "%d%s\n", load[k], s[k]
            }' "$durations" -)
    declare -A shard_of=()
    for k in "${!shard_files[@]}"; do
        read -r est files <<<"${shard_files[$k]}"
        [ -n "$files" ] || continue
        # shellcheck disable=SC2086
        echo "shard $((k + 1)): $(wc -w <<<"$files") files, ~${est} s by spec/durations.txt"
        busted_in "$run_root/$((k + 1))" "$run_root/shard$((k + 1)).log" $files &
        shard_of[$!]=$((k + 1))
    done
    started=$(date +%s)
    while [ ${#shard_of[@]} -gt 0 ]; do
        wait -n -p done_pid "${!shard_of[@]}"
        rc=$?
        k=${shard_of[$done_pid]}
        unset "shard_of[$done_pid]"
        log="$run_root/shard$k.log"
        s=$(summary_of "$log")
        if [ "$rc" -ne 0 ] || [ -z "$s" ]; then
            status=1
            echo "==== shard $k failed (exit $rc) after $(($(date +%s) - started)) s; its output:"
            cat "$log"
            echo "==== end of shard $k"
        else
            echo "shard $k: $(grep -E '^[0-9]+ success' "$log" | tail -1) (done at $(($(date +%s) - started)) s)"
        fi
        count_log "$log" || true
    done
    if [ "${RMQ_UPDATE_DURATIONS:-0}" = 1 ] && [ -s "$run_root/times.txt" ]; then
        sort -k1,1nr "$run_root/times.txt" > spec/durations.txt
    fi
fi

# No process a spec started may outlive the run: one leaked controller
# went unnoticed for five full runs.  Everything a spec starts inherits
# RMQ_TEST_ROOT=$run_root (busted_in), so this run's leftovers are found
# by their environment, never another run's.  They are listed, ended by
# PID, and counted as one failure.  A few seconds' grace first: a stop
# that a spec asked for may still be finishing.
leftovers() {
    local p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = "$$" ] && continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "RMQ_TEST_ROOT=$run_root" && echo "$pid"
    done
}
left=$(leftovers)
for _ in 1 2 3 4 5; do
    [ -z "$left" ] && break
    sleep 1
    left=$(leftovers)
done
if [ -n "$left" ]; then
    echo "processes started by specs still running after the run (ended now):"
    # shellcheck disable=SC2086
    ps -o pid=,args= -p $(tr '\n' ',' <<<"$left" | sed 's/,$//') || true
    # shellcheck disable=SC2086
    kill -9 $left 2>/dev/null || true
    failed=$((failed + 1))
fi

if [ "${RMQ_KEEP_TMP:-0}" != 1 ]; then
    rm -rf "$run_root"
else
    echo "spec files kept in $run_root" >&2
fi

if [ "$pending" -gt 0 ]; then
    # Specs that need ../shared/fixtures, in a clone without them
    # (spec/support/fixtures.lua gate; CI=true makes them fail instead),
    # and C test cases this host cannot run (said above).
    echo "$passed passed, $failed failed, $pending skipped"
else
    echo "$passed passed, $failed failed"
fi
if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ]; then
    exit 1
fi
exit 0
