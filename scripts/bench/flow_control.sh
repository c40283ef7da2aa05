#!/usr/bin/env bash
# Send TPS and latency with the store slowed, with and without flow
# control: see scripts/bench/flow_control.lua for what is measured.
#
#   scripts/bench/flow_control.sh [SECONDS [PUT_DELAY_MS [SENDERS]]]   (10 50 64)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"
build="${RMQ_BUILD:-build}"
rmq_build "$build" >/dev/null
RMQ_BUILD="$build" lua5.4 scripts/bench/flow_control.lua "$@"
