#!/usr/bin/env bash
# What the metrics cost on the hot path: the same revision (HEAD) built
# twice and measured in one run by scripts/bench/hotpath.sh, "base" with
# metrics off (the bench's standalone conf has no metricsExporterType)
# and "current" with metricsExporterType = "PROM" (and the endpoint on
# an ephemeral port).  hotpath.sh prints callgrind Ir per request (send
# 1 KiB, pull 1 / 32, route) and `rmq bench produce` TPS, rounds
# alternating off and on; the current/base ratio is the cost (issue 14
# aims for send TPS within 3 %).  No scrape runs during the measurement:
# this is what recording costs (the collectors run only when scraped).
#
#   scripts/bench/metrics_cost.sh [hotpath.sh options but --base and
#                                  --current-conf, e.g. --tps-rounds 5]
#
# Commit first: the base is HEAD as committed, the current the working
# tree; with uncommitted changes the two differ by more than the conf.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
exec "$here/hotpath.sh" --base HEAD \
    --current-conf 'metricsExporterType = "PROM", metricsPromExporterPort = 0' "$@"
