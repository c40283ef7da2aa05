#!/usr/bin/env bash
# Runs rmq-server: installs what is missing, builds, starts CONF
# (default conf/standalone.lua).  Extra arguments go to rmq-server,
# e.g. scripts/run.sh conf/namesrv.lua --listenPort=19876
set -euo pipefail
source "$(dirname "$0")/setup.sh"
rmq_install_packages "${RMQ_PACKAGES[@]}"
rmq_build "$RMQ_ROOT/build"
conf="${1:-$RMQ_ROOT/conf/standalone.lua}"
[ $# -gt 0 ] && shift
exec "$RMQ_ROOT/build/rmq-server" "$conf" "$@"
