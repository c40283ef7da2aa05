#!/usr/bin/env bash
# fuzz.sh SECONDS: builds the libFuzzer targets with clang into build-fuzz/
# and runs fuzz_codec for SECONDS (default 60), seeded with every captured
# frame in ../shared/fixtures/frames (RMQ_FIXTURES overrides the fixtures
# directory).  Each frame is seeded twice: whole, and as its bare header,
# which the target also wraps in a frame of each serialize type.  New
# inputs collect in build-fuzz/corpus/codec, crashes in build-fuzz/artifacts.
# Exits non-zero when the fuzzer finds a crash.
set -euo pipefail

secs=${1:-60}
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
cmake --build "$out" --target fuzz_codec -j"$(nproc)"

fixtures=${RMQ_FIXTURES:-$root/../shared/fixtures}
seeds=$out/seeds/codec
corpus=$out/corpus/codec
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$out/artifacts"
n=0
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

exec "$out/fuzz_codec" -max_total_time="$secs" -dict="$out/codec.dict" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    "$corpus" "$seeds"
