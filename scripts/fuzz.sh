#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET]: builds the libFuzzer targets with clang into
# build-fuzz/ and runs each for SECONDS (default 60), or only TARGET:
#
#   codec   the RemotingCommand decoder (fuzz/fuzz_codec.c), seeded with
#           every captured frame in ../shared/fixtures/frames, each twice:
#           whole, and as its bare header, which the target also wraps in
#           a frame of each serialize type;
#   record  the commit log record parser of crash recovery
#           (fuzz/fuzz_record.c), seeded with records cut from the
#           fixture stores' commit logs by fuzz/seeds.lua;
#   bodies  the JSON and compressed bodies the control plane decodes
#           (fuzz/fuzz_bodies.c running fuzz/bodies.lua: REGISTER_BROKER,
#           HEART_BEAT, topic and subscription group configs), seeded with
#           those frames' bodies and the fixture stores' config files;
#   heartbeat  the C HeartbeatData reader and the client registry it feeds
#           (fuzz/fuzz_heartbeat.c), seeded with the same bodies;
#   sql92   the SQL92 filter compiler and evaluator (fuzz/fuzz_sql92.c),
#           seeded with expressions written here;
#   grpc    the gRPC port's input side (fuzz/fuzz_grpc.c): HTTP/2 frames
#           (src/grpc/h2.c) and HPACK (src/grpc/hpack.c), gRPC message
#           framing and gzip, and every
#           MessagingService request through protobuf-c, seeded with a
#           client's first calls written here (HPACK literals, no Huffman).
#
# RMQ_FIXTURES overrides the fixtures directory; RMQ_FUZZ_TIMEOUT the
# seconds one record/bodies input may take (default 1: slower is a
# finding).  New inputs collect in build-fuzz/corpus/TARGET, crashes in
# build-fuzz/artifacts (codec: crash-*; the others: TARGET-crash-*,
# TARGET-timeout-*, ...); reproduce one with build-fuzz/fuzz_TARGET FILE.
# Exits non-zero when a fuzzer finds a crash (the other targets still run).
set -euo pipefail

secs=${1:-60}
only=${2:-}
case "$only" in
    "" | codec | record | bodies | heartbeat | sql92 | grpc) ;;
    *) echo "usage: scripts/fuzz.sh [SECONDS] [codec|record|bodies|heartbeat|sql92|grpc]" >&2; exit 2 ;;
esac
targets=${only:-codec record bodies heartbeat sql92 grpc}
timeout=${RMQ_FUZZ_TIMEOUT:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build-fuzz

# Can clang link a libFuzzer target?  Install what is missing (Debian 12).
probe() {
    local tmp rc
    tmp=$(mktemp -d)
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)' \
        '{ (void)d; (void)n; return 0; }' >"$tmp/p.c"
    rc=0
    clang -fsanitize=fuzzer,address,undefined "$tmp/p.c" -o "$tmp/p" \
        >/dev/null 2>&1 || rc=1
    rm -rf "$tmp"
    return $rc
}
if ! command -v clang >/dev/null 2>&1 || ! probe; then
    echo "fuzz.sh: installing clang and libclang-rt-14-dev" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev
    probe || { echo "fuzz.sh: clang still cannot link a fuzzer" >&2; exit 1; }
fi

cmake -S . -B "$out" -DCMAKE_C_COMPILER=clang -DRMQ_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
build_args=()
for t in $targets; do
    build_args+=(--target "fuzz_$t")
done
cmake --build "$out" "${build_args[@]}" -j"$(nproc)"

fixtures=${RMQ_FIXTURES:-$root/../shared/fixtures}
mkdir -p "$out/artifacts"

seed_codec() {
    local seeds=$out/seeds/codec n=0 f base i seed hlen b64
    rm -rf "$seeds"
    mkdir -p "$seeds" "$out/corpus/codec"
    for f in "$fixtures"/frames/*.jsonl; do
        [ -e "$f" ] || { echo "fuzz.sh: no fixtures under $fixtures" >&2; exit 1; }
        base=$(basename "$f" .jsonl)
        i=0
        while IFS= read -r b64; do
            i=$((i + 1))
            seed=$seeds/$base-$i
            printf '%s' "$b64" | base64 -d >"$seed.frame"
            # Bytes 5..7 are the header length; the header starts at byte 8.
            hlen=$(od -An -tu1 -j5 -N3 "$seed.frame" |
                awk '{ print $1 * 65536 + $2 * 256 + $3 }')
            tail -c +9 "$seed.frame" | head -c "$hlen" >"$seed.hdr"
            n=$((n + 1))
        done < <(grep -o '"raw_b64": *"[^"]*"' "$f" | sed 's/.*: *"//; s/"$//')
    done
    echo "fuzz.sh: $n fixture frames seeded"

    # Tokens the mutator would take long to invent.
    cat >"$out/codec.dict" <<'EOF'
"\"code\":"
"\"extFields\":{"
"\"flag\":"
"\"language\":"
"\"opaque\":"
"\"remark\":"
"\"serializeTypeCurrentRPC\":\"JSON\""
"\"version\":"
"\"JAVA\""
"\"NODE_JS\""
"true"
"false"
"null"
"\\u"
"\\uD83D\\uDE00"
"\\uDBFF"
"-2147483648"
"2147483648"
"1.5e-3"
"[{\"a\":[]}]"
"\x00\x00\x00\x00"
"\xff\xff\xff\xff"
"\x01\x00\x00"
EOF
}

# record and bodies: cut from the fixtures by fuzz/seeds.lua (once).
seeded=
seed_lua() {
    [ -z "$seeded" ] || return 0
    seeded=1
    [ -d "$fixtures/store" ] || { echo "fuzz.sh: no fixtures under $fixtures" >&2; exit 1; }
    rm -rf "$out/seeds/record" "$out/seeds/bodies"
    mkdir -p "$out/seeds/record" "$out/seeds/bodies" "$out/corpus/record" \
        "$out/corpus/bodies"
    lua5.4 fuzz/seeds.lua "$fixtures" "$out/seeds"
    cat >"$out/record.dict" <<'EOF'
"\xda\xa3\x20\xa7"
"\xcb\xd4\x31\x94"
"\x00\x00\x00\x5b"
"\x00\x00\x00\x10"
"\x00\x00\x00\x20"
"\x00\x00\x00\x30"
"\x7f\xff"
"\x80\x00"
"\x7f"
"\xff\xff\xff\xff"
"TAGS\x01"
"KEYS\x01"
"UNIQ_KEY\x01"
"DELAY\x01"
"\x02"
"SCHEDULE_TOPIC_XXXX"
"\xf0\x9f\x98\x80"
"\xed\xa0\x80"
"\xc3\xa9"
EOF
    cat >"$out/bodies.dict" <<'EOF'
"\"topicConfigSerializeWrapper\":{"
"\"topicConfigTable\":{"
"\"dataVersion\":{\"counter\":1,\"timestamp\":2}"
"\"stateVersion\":"
"\"filterServerList\":["
"\"topicName\":"
"\"readQueueNums\":"
"\"writeQueueNums\":"
"\"perm\":"
"\"topicSysFlag\":"
"\"topicFilterType\":\"MULTI_TAG\""
"\"order\":true"
"\"clientID\":"
"\"consumerDataSet\":[{"
"\"producerDataSet\":[{"
"\"groupName\":\"g\""
"\"subscriptionDataSet\":[{"
"\"topic\":\"t\""
"\"subString\":\"a || b\""
"\"subVersion\":"
"\"expressionType\":\"TAG\""
"\"classFilterMode\":"
"\"retryQueueNums\":"
"\"brokerId\":"
"\"consumeEnable\":"
"\"subscriptionGroupTable\":{"
" SINGLE_TAG"
" 8 8 6 MULTI_TAG"
"\x00\x00\x00\x01"
"\xff\xff\xff\xff"
"{0:"
",1:"
"null"
"true"
"NaN"
"Infinity"
"-Infinity"
"1e400"
"0x10"
"4294967296"
"2147483648"
"-1"
"9223372036854775808"
"1.5"
"\\u0000"
"\\ud800"
"||"
"*"
EOF
}

status=0
for t in $targets; do
    case $t in
        codec)
            seed_codec
            args=(-dict="$out/codec.dict" -artifact_prefix="$out/artifacts/"
                  "$out/corpus/codec" "$out/seeds/codec")
            ;;
        record)
            seed_lua
            args=(-dict="$out/record.dict" -max_len=131072 -timeout="$timeout"
                  -artifact_prefix="$out/artifacts/record-"
                  "$out/corpus/record" "$out/seeds/record")
            ;;
        bodies)
            seed_lua
            args=(-dict="$out/bodies.dict" -max_len=65536 -timeout="$timeout"
                  -rss_limit_mb=2048 -artifact_prefix="$out/artifacts/bodies-"
                  "$out/corpus/bodies" "$out/seeds/bodies")
            ;;
        heartbeat)
            seed_lua
            mkdir -p "$out/corpus/heartbeat"
            args=(-dict="$out/bodies.dict" -max_len=65536 -timeout="$timeout"
                  -rss_limit_mb=2048 -artifact_prefix="$out/artifacts/heartbeat-"
                  "$out/corpus/heartbeat" "$out/seeds/bodies")
            ;;
        sql92)
            seeds=$out/seeds/sql92
            rm -rf "$seeds"
            mkdir -p "$seeds" "$out/corpus/sql92"
            i=0
            for e in "a > 1" "a BETWEEN 0 AND 3 AND TAGS IN ('A', 'B')" "b IS NOT NULL OR NOT (c = 'x''y')" \
                     "a NOT BETWEEN -1.5e3 AND .5 OR d NOT IN ('q')" "(a = TRUE) = (b <> 2147483648L)" \
                     "x > 1 -- c
AND /* b */ y IS NULL"; do
                i=$((i + 1))
                printf '\0%s\0a\0011\002TAGS\001A\002b\001x' "$e" >"$seeds/s$i"
            done
            printf '%s\n' '"AND"' '"OR"' '"NOT"' '"BETWEEN"' '"IN"' '"IS"' '"NULL"' '"TRUE"' \
                '"FALSE"' '"<>"' '">="' '"<="' "\"''\"" '"("' '")"' '"1.5E10"' '"2147483648"' \
                '"\x00"' '"\x01"' '"\x02"' >"$out/sql92.dict"
            args=(-dict="$out/sql92.dict" -max_len=4096 -timeout="$timeout"
                  -artifact_prefix="$out/artifacts/sql92-" "$out/corpus/sql92" "$seeds")
            ;;
        grpc)
            rm -rf "$out/seeds/grpc"
            mkdir -p "$out/seeds/grpc" "$out/corpus/grpc"
            lua5.4 fuzz/grpc_seeds.lua "$out/seeds/grpc"
            printf '%s\n' '":path"' '":method"' '"POST"' '"content-type"' '"application/grpc"' \
                '"grpc-timeout"' '"grpc-encoding"' '"gzip"' '"te"' '"trailers"' \
                '"/apache.rocketmq.v2.MessagingService/"' '"SendMessage"' '"Telemetry"' \
                '"\x00\x00\x00\x04\x00\x00\x00\x00\x00"' '"\x00\x00\x08\x06\x00\x00\x00\x00\x00"' \
                '"\x00\x00\x04\x03\x00\x00\x00\x00\x01"' '"\x00\x00\x04\x08\x00\x00\x00\x00\x00"' \
                '"\x01\x00\x00\x00"' '"\x1f\x8b\x08"' '"\xff\xff\xff\x7f"' >"$out/grpc.dict"
            args=(-dict="$out/grpc.dict" -max_len=16384 -timeout="$timeout"
                  -artifact_prefix="$out/artifacts/grpc-" "$out/corpus/grpc" "$out/seeds/grpc")
            ;;
    esac
    echo "fuzz.sh: fuzz_$t for ${secs}s" >&2
    rc=0
    "$out/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 "${args[@]}" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "fuzz.sh: fuzz_$t found a crash (exit $rc); see $out/artifacts" >&2
        status=1
    fi
done
exit $status
