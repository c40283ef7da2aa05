#!/usr/bin/env bash
# Installs what rmq needs (Debian 12 packages) and builds it.
# Sourced by run.sh and test.sh; usable alone: scripts/setup.sh [BUILD_DIR] [CMAKE ARGS...]
set -euo pipefail

RMQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Build and test dependencies, all Debian packages.  pkg-config finds Lua,
# libuv and libdeflate (the store's CRC-32) for CMake; lua-busted runs the
# specs; lua-socket is the backpressure spec's client that never reads;
# lua-check (luacheck) lints the Lua before the specs run (.luacheckrc);
# libmicrohttpd serves the Prometheus endpoint, and prometheus brings
# promtool, which the metrics spec checks its output with; chromium is the
# browser the web console spec drives (headless, with playwright-core
# from npm: spec/interop/chromium); libedit-dev is `rmq repl`'s line
# editor and tmux the terminal its spec types into; libssl-dev (libcrypto's
# HMAC-SHA1) signs and checks ACL requests and is TLS on the remoting
# ports, openssl the CLI the TLS spec makes its certificates with, and
# libyaml-dev reads plain_acl.yml.  libjemalloc-dev is rmq-server's
# allocator (it gives memory freed after a flood back to the system,
# docs/memory.md).  The package spec builds the Debian
# package (dpkg-dev's dpkg-buildpackage, debhelper), installs it into a
# scratch root (its postinst runs systemd-sysusers), checks the units
# (systemd-analyze: systemd) and runs lintian on it.  libnghttp2-dev
# (HTTP/2), libprotobuf-c-dev and protobuf-c-compiler (protoc-c, run at
# build time on proto/) are the gRPC port (src/grpc/, docs/grpc.md),
# nghttp2-client's h2load its load in scripts/bench/grpc.lua.  etcd-server
# is the consensus store the controller role keeps its state in; the
# controller specs start their own etcd (docs/controller.md).
# libcmocka-dev is the C unit tests' library (spec/c/, run by ctest from
# scripts/test.sh).
RMQ_PACKAGES=(gcc make cmake pkg-config lua5.4 liblua5.4-dev libuv1-dev
              zlib1g-dev libdeflate-dev libmicrohttpd-dev lua-cjson lua-busted
              lua-socket lua-check prometheus chromium libedit-dev tmux
              libssl-dev libyaml-dev openssl libjemalloc-dev dpkg-dev debhelper
              systemd lintian
              libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler nghttp2-client
              libcmocka-dev etcd-server)

rmq_install_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
    fi
}

# rmq_build DIR [CMAKE ARGS...]: configure once, then build incrementally.
rmq_build() {
    local dir="$1"; shift
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        cmake -S "$RMQ_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >&2
    fi
    cmake --build "$dir" -j"$(nproc)" >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    rmq_install_packages "${RMQ_PACKAGES[@]}"
    rmq_build "${1:-$RMQ_ROOT/build}" "${@:2}"
fi
