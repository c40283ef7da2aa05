#!/usr/bin/env bash
# Replication throughput and lag under sustained `rmq bench produce` load,
# and send TPS with ASYNC_MASTER vs SYNC_MASTER in the same run: see
# scripts/bench/replication.lua for what is measured and printed.
#
#   scripts/bench/replication.sh [SECONDS [SIZE [CONCURRENCY]]]   (10 1024 64)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"
build="${RMQ_BUILD:-build}"
rmq_build "$build" >/dev/null
RMQ_BUILD="$build" lua5.4 scripts/bench/replication.lua "$@"
