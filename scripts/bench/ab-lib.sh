# Shared by scripts/bench/ceiling.sh and scripts/bench/vs-java.sh (sourced,
# not run): start servers, drive one with `rmq bench produce --broker`, and
# read the server's CPU from /proc/PID/stat around the run.
#
# Every process started here is recorded in $AB_TMP/pids and stopped by
# that PID (only while its /proc/PID/cmdline still names $AB_TMP or the
# binary we started) by ab_cleanup.

AB_TMP=$(mktemp -d /tmp/rmq-ab.XXXXXX)
AB_CLK_TCK=$(getconf CLK_TCK)

ab_cleanup() {
    if [ -f "$AB_TMP/pids" ]; then
        while read -r pid what; do
            if grep -qsF "$what" "/proc/$pid/cmdline"; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        done < "$AB_TMP/pids"
    fi
    if [ "${RMQ_KEEP_TMP:-0}" = 1 ]; then
        echo "kept $AB_TMP" >&2
    else
        rm -rf "$AB_TMP"
    fi
}

# ab_record PID WORD: remember PID (WORD: a string its cmdline holds).
ab_record() { echo "$1 $2" >> "$AB_TMP/pids"; }

# ab_stop PID: SIGTERM, then SIGKILL after 30 s.
ab_stop() {
    local pid=$1 i
    kill "$pid" 2>/dev/null || return 0
    for i in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

# ab_wait_line FILE REGEX SECONDS: waits until FILE holds a line matching
# REGEX; prints it.
ab_wait_line() {
    local file=$1 re=$2 secs=$3 i line
    for i in $(seq $((secs * 10))); do
        line=$(grep -m1 -E "$re" "$file" 2>/dev/null || true)
        if [ -n "$line" ]; then echo "$line"; return 0; fi
        sleep 0.1
    done
    return 1
}

# ab_start_rmq BUILD DIR EXTRA_CONF: a standalone rmq-server on ephemeral
# ports, a fresh store under DIR; sets AB_PID and AB_ADDR (the broker).
ab_start_rmq() {
    local build=$1 dir=$2 extra=${3:-}
    rm -rf "$dir"; mkdir -p "$dir"
    cat > "$dir/conf.lua" <<EOF
return {
    role = "standalone", logLevel = "warn",
    bindAddress = "127.0.0.1", listenPort = 0, namesrvListenPort = 0,
    brokerName = "broker-a", brokerClusterName = "DefaultCluster",
    storePathRootDir = "$dir/store", kvConfigPath = "$dir/kvConfig.json",
    autoCreateTopicEnable = true,
    $extra
}
EOF
    HOME="$dir" "$build/rmq-server" "$dir/conf.lua" > "$dir/stdout" 2> "$dir/stderr" &
    AB_PID=$!
    ab_record "$AB_PID" "$dir/conf.lua"
    local line
    if ! line=$(ab_wait_line "$dir/stdout" 'READY' 60); then
        echo "rmq-server did not start:" >&2; cat "$dir/stderr" >&2; return 1
    fi
    AB_ADDR=$(sed -n 's/.* broker=\([^ ]*\).*/\1/p' <<< "$line")
}

# ab_start_ceiling BUILD DIR THREADS: sets AB_PID and AB_ADDR.
ab_start_ceiling() {
    local build=$1 dir=$2 threads=$3
    mkdir -p "$dir"
    "$build/rmq-ceiling-server" "$threads" > "$dir/ceiling.out" 2>&1 &
    AB_PID=$!
    ab_record "$AB_PID" "rmq-ceiling-server"
    local line
    line=$(ab_wait_line "$dir/ceiling.out" 'READY' 10) || { cat "$dir/ceiling.out" >&2; return 1; }
    AB_ADDR=$(sed -n 's/.* broker=\([^ ]*\).*/\1/p' <<< "$line")
}

# ab_cpu_ticks PID: utime + stime of the whole process (all threads).
ab_cpu_ticks() {
    # Fields 14 and 15; the command name (field 2) may hold spaces, so
    # count from after its closing parenthesis.
    local rest
    rest=$(sed 's/^.*) //' "/proc/$1/stat")
    awk '{ print $12 + $13 }' <<< "$rest"
}

ab_load() { cut -d' ' -f1 /proc/loadavg; }

# ab_thread_stats PID: "NAME TICKS SLEEPS PREEMPTED RUN_NS WAIT_NS" per
# thread of PID: utime + stime, voluntary and involuntary context
# switches (/proc/PID/task/TID/status), time on a CPU and time runnable
# but waiting for one (schedstat).  Threads of one name, e.g. two
# workers, are summed by the reader.
ab_thread_stats() {
    local t name rest ticks sw ss
    for t in /proc/"$1"/task/*; do
        name=$(tr ' ' _ < "$t/comm" 2>/dev/null) || continue
        rest=$(sed 's/^.*) //' "$t/stat" 2>/dev/null) || continue
        ticks=$(awk '{ print $12 + $13 }' <<< "$rest")
        sw=$(awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
                  END { print v + 0, n + 0 }' "$t/status" 2>/dev/null) || continue
        ss=$(awk '{ print $1, $2 }' "$t/schedstat" 2>/dev/null) || ss="0 0"
        echo "$name $ticks $sw $ss"
    done
}

# ab_produce RMQ PID ADDR SIZE CONC SECONDS [EXTRA ARGS]: one run of the
# generator against ADDR; prints "TPS CPU_US_PER_MSG LOAD1 SENT"
# (CPU_US_PER_MSG: the server's utime+stime delta over the run / sent).
# Fails when the generator reports a failed send (busy replies are
# reported on stderr and left out of the message count).
ab_produce() {
    local rmq=$1 pid=$2 addr=$3 size=$4 conc=$5 secs=$6; shift 6
    local load t0 t1 out line total tps failed
    load=$(ab_load)
    t0=$(ab_cpu_ticks "$pid")
    local json=() w0 w1
    if [ -n "${AB_THREADS:-}" ]; then
        ab_thread_stats "$pid" > "$AB_TMP/threads.0"
        json=(--json)   # the generator's own CPU and switches
    fi
    w0=$(date +%s%N)
    # The generator exits non-zero on busy replies too (flow control on
    # an overloaded machine): judged from its [Complete] line instead.
    out=$("$rmq" bench produce -n 127.0.0.1:1 -t BenchTopic --broker "$addr" \
          -s "$size" -c "$conc" -d "$secs" "${json[@]}" "$@" 2>&1) || true
    w1=$(date +%s%N)
    t1=$(ab_cpu_ticks "$pid")
    [ -z "${AB_THREADS:-}" ] || ab_thread_stats "$pid" > "$AB_TMP/threads.1"
    line=$(grep '^\[Complete\]' <<< "$out" || true)
    total=$(sed -n 's/.*Send Total: \([0-9]*\).*/\1/p' <<< "$line")
    tps=$(sed -n 's/.*Send TPS: \([0-9]*\).*/\1/p' <<< "$line")
    failed=$(sed -n 's/.*Send Failed: \([0-9]*\).*/\1/p' <<< "$line")
    busy=$(sed -n 's/.*Send Busy: \([0-9]*\).*/\1/p' <<< "$line")
    busy=${busy:-0}
    if [ -z "$total" ] || [ "$failed" != 0 ] || [ "$total" -le "$busy" ]; then
        echo "bench produce failed or had failures:" >&2; echo "$out" >&2; return 1
    fi
    if [ -n "${AB_THREADS:-}" ]; then
        # Per thread name: CPU us a stored message, the busiest first;
        # then, per 1000 messages, its sleeps and preemptions, and the
        # share of the run it spent on a CPU and runnable but waiting
        # for one (the caller prints $AB_TMP/threads.line after its row).
        # The generator's own figures come from its --json summary.
        local gen
        gen=$(grep -o '"cpu_s":[0-9.e+-]*\|"sleeps":[0-9]*\|"preempted":[0-9]*' <<< "$out" |
              tr ':' ' ' | tr -d '"' | awk '{ v[$1] = $2 } END { print v["cpu_s"] + 0, v["sleeps"] + 0, v["preempted"] + 0 }')
        awk -v hz="$AB_CLK_TCK" -v n="$((total - busy))" -v wall="$((w1 - w0))" -v gen="$gen" '
            FNR == NR { t0[$1] += $2; v0[$1] += $3; p0[$1] += $4; r0[$1] += $5; q0[$1] += $6; next }
            { t1[$1] += $2; v1[$1] += $3; p1[$1] += $4; r1[$1] += $5; q1[$1] += $6 }
            END {
                for (k in t1) {
                    d = (t1[k] - t0[k]) * 1e6 / hz / n
                    if (d > 0)
                        printf "%.2f %s %.1f %.1f %.0f %.0f\n", d, k, (v1[k] - v0[k]) * 1000 / n,
                               (p1[k] - p0[k]) * 1000 / n, (r1[k] - r0[k]) * 100 / wall, (q1[k] - q0[k]) * 100 / wall
                }
                split(gen, g, " ")
                if (g[1] > 0)
                    printf "%.2f generator %.1f %.1f %.0f -\n", g[1] * 1e6 / n, g[2] * 1000 / n, g[3] * 1000 / n, g[1] * 1e11 / wall
            }' "$AB_TMP/threads.0" "$AB_TMP/threads.1" | sort -rn > "$AB_TMP/threads.tab"
        awk '$2 != "generator" { printf "%s%s %s", (n++ ? ", " : "  threads (us/msg): "), $2, $1 } END { print "" }' \
            "$AB_TMP/threads.tab" > "$AB_TMP/threads.line"
        awk '{ printf "%s%s %s/%s %s%%/%s%s", (NR > 1 ? ", " : "  per 1000 msgs sleeps/preempted, % of the run on CPU/waiting: "),
                      $2, $3, $4, $5, $6, ($6 == "-" ? "" : "%") } END { print "" }' \
            "$AB_TMP/threads.tab" >> "$AB_TMP/threads.line"
        awk '$2 == "generator" { printf "  generator (us/msg): %s\n", $1 }' "$AB_TMP/threads.tab" >> "$AB_TMP/threads.line"
    fi
    [ "$busy" = 0 ] || echo "note: $busy busy replies (flow control) in a run at load $load" >&2
    # CPU per message stored: busy replies are not counted as messages.
    awk -v tps="$tps" -v d=$((t1 - t0)) -v hz="$AB_CLK_TCK" -v n="$((total - busy))" -v l="$load" \
        'BEGIN { printf "%d %.2f %s %d\n", tps, d * 1e6 / hz / n, l, n }'
}

# ab_start_java JAVA_DIR DIR FLUSH: a RocketMQ 4.9.8 NameServer and broker
# from JAVA_DIR (a distribution with bin/mqnamesrv and bin/mqbroker, or a
# class-dir build with a `jrun CLASS ARGS` launcher as /work/java has),
# store under DIR, flushDiskType FLUSH; sets AB_PID (the broker) and
# AB_ADDR.  Ports: a random base (the broker also takes base-2 and base+1).
ab_start_java() {
    local jdir=$1 dir=$2 flush=$3
    rm -rf "$dir"; mkdir -p "$dir/home"
    local base=$((20000 + RANDOM % 20000)) ns
    ns=$((base + 10))
    cat > "$dir/ns.properties" <<EOF2
listenPort=$ns
kvConfigPath=$dir/kv.json
EOF2
    cat > "$dir/broker.properties" <<EOF2
brokerClusterName=DefaultCluster
brokerName=broker-j
brokerId=0
namesrvAddr=127.0.0.1:$ns
listenPort=$base
brokerIP1=127.0.0.1
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
autoCreateTopicEnable=true
flushDiskType=$flush
EOF2
    local ns_cmd br_cmd
    if [ -x "$jdir/bin/mqbroker" ]; then
        export ROCKETMQ_HOME="$jdir"
        ns_cmd=("$jdir/bin/mqnamesrv" -c "$dir/ns.properties")
        br_cmd=("$jdir/bin/mqbroker" -c "$dir/broker.properties")
    elif [ -x "$jdir/jrun" ]; then
        ns_cmd=("$jdir/jrun" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/ns.properties")
        br_cmd=("$jdir/jrun" org.apache.rocketmq.broker.BrokerStartup -c "$dir/broker.properties")
    else
        echo "$jdir: neither bin/mqbroker nor jrun" >&2; return 1
    fi
    JHOME="$dir/home" "${ns_cmd[@]}" > "$dir/ns.out" 2>&1 &
    ab_record $! "$dir/ns.properties"
    ab_wait_line "$dir/ns.out" 'boot success' 120 > /dev/null || { cat "$dir/ns.out" >&2; return 1; }
    JHOME="$dir/home" "${br_cmd[@]}" > "$dir/broker.out" 2>&1 &
    AB_PID=$!
    ab_record "$AB_PID" "$dir/broker.properties"
    ab_wait_line "$dir/broker.out" 'boot success' 120 > /dev/null || { cat "$dir/broker.out" >&2; return 1; }
    # bin/mqbroker runs java under one or two shells (mqbroker,
    # runbroker.sh): the broker's CPU is the java descendant's.
    local p=$AB_PID kid i
    for i in 1 2 3; do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = java ] && break
        kid=$(pgrep -P "$p" | head -1 || true)
        [ -n "$kid" ] || break
        p=$kid
    done
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = java ]; then AB_PID=$p; fi
    AB_ADDR=127.0.0.1:$base
}
