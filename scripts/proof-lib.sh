# Shared by scripts/chaos.sh, partition.sh and soak.sh (sourced, not run).
#
#   proof_server_env           array: env prefix for servers (a sanitized
#                              build's servers check themselves as the
#                              specs' do: RMQ_SERVER_ASAN_OPTIONS)
#   proof_ready OUT ERR N WHO [PID]
#                              waits (<= 30 s, or until PID exits) until
#                              OUT holds more than N READY lines; else
#                              prints WHO's log tail and returns 1
#   proof_base                 sets $base: a random port below the kernel's
#                              ephemeral range with room for 10 above it
#   proof_drain BUILD ACKED RECEIVED
#                              after the producer stopped: waits until the
#                              consumer delivered every acknowledged
#                              message, or 60 s passed with no new delivery
#   proof_field LINE NAME      the number N of NAME=N in an audit or STATS line

proof_server_env=()
if [ -n "${RMQ_SERVER_ASAN_OPTIONS:-}" ]; then
    proof_server_env=(env "ASAN_OPTIONS=$RMQ_SERVER_ASAN_OPTIONS")
fi

proof_ready() {
    local out="$1" err="$2" before="${3:-0}" who="$4" pid="${5:-}"
    for _ in $(seq 300); do
        [ "$(grep -c READY "$out" 2>/dev/null || true)" -gt "$before" ] && return 0
        [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "$who printed no READY line; its log:"
    tail -20 "$err"
    return 1
}

proof_base() {
    local low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    base=$(( 10000 + (RANDOM * 32768 + RANDOM) % (low - 10000 - 10) ))
}

proof_drain() {
    local build="$1" acked="$2" received="$3" last_n=-1 idle=0 line n
    while :; do
        line=$("$build/rmq" audit check --max-lost-listed 0 "$acked" "$received" 2>/dev/null || true)
        case "$line" in *" lost=0 "*) break ;; esac
        n=$(grep -c '^R ' "$received" 2>/dev/null || true)
        if [ "$n" = "$last_n" ]; then idle=$((idle + 1)); else idle=0; last_n=$n; fi
        [ "$idle" -ge 60 ] && break
        sleep 1
    done
    sleep 1   # deliveries still in flight (duplicates) land before the books close
}

proof_field() {
    echo "$1" | sed -nE "s/(^|.* )$2=([0-9.]+).*/\\2/p"
}
