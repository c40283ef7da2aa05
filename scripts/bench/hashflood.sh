#!/usr/bin/env bash
# Hash flooding, before and after, in the same run (issue 21 item 3):
# callgrind instructions per request of a send and a route lookup to a
# topic whose name collides in Java's String.hashCode with 8,192 others
# (made of "Aa"/"BB" pairs, all auto-created by sends from one client),
# next to the same requests to an ordinary topic of the same name length.
#
#   scripts/bench/hashflood.sh [--base REV] [--names N] [--requests R]
#
# "base" is REV (default: `git merge-base HEAD main`, or HEAD^1 on main)
# built in a temporary git worktree (RMQ_BASE_BUILD=DIR: a build of it
# made already); "current" is the working tree built
# into build/.  Each build serves a standalone conf, workers = 1: first
# natively, while a client auto-creates the ordinary topic and the N
# colliding ones (default 8192) by sending one message to each and waits
# until the NameServer routes the last of them; then the same store again
# under valgrind --tool=callgrind (the tables filled at start-up and by
# the first registration), where the client runs R requests (default
# 1000) of each phase one at a time; the
# figure is the worker thread's Ir / R (callgrind_control -z / -d around
# the phase).  The colliding topic measured is the last one created: the
# end of the Java chain in a table that walks it.  Every reply is checked
# (code 0); a failure prints no figure.  Takes 10-30 minutes on a loaded
# machine: the base build fills and loads the colliding names in O(n^2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"

base="" names=8192 requests=1000
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base="$2"; shift 2 ;;
        --names) names="$2"; shift 2 ;;
        --requests) requests="$2"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
if [ -z "$base" ]; then
    base=$(git merge-base HEAD main)
    [ "$base" != "$(git rev-parse HEAD)" ] || base=$(git rev-parse HEAD^1)
fi
base_rev=$(git rev-parse --verify "$base^{commit}")

rmq_install_packages "${RMQ_PACKAGES[@]}" valgrind
tmp=$(mktemp -d /tmp/rmq-hashflood.XXXXXX)
cleanup() {
    if [ -f "$tmp/pids" ]; then
        while read -r pid; do
            if grep -qs "$tmp" "/proc/$pid/cmdline"; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        done < "$tmp/pids"
    fi
    git worktree remove --force "$tmp/base" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

current_build="$RMQ_ROOT/${RMQ_BUILD:-build}"
base_build="${RMQ_BASE_BUILD:-}"
if [ -z "$base_build" ]; then
    echo "hashflood: base $(git log -1 --format='%h %s' "$base_rev")" >&2
    git worktree add --detach "$tmp/base" "$base_rev" >&2
    bash "$tmp/base/scripts/setup.sh" "$tmp/base/build" >&2
    base_build="$tmp/base/build"
fi
rmq_build "$current_build"

mkdir "$tmp/work"
env -u RMQ_LUA_DIR lua5.4 scripts/bench/hashflood.lua "$tmp/work" "$base_build" "$current_build" \
    "$names" "$requests"
echo "base: $base_rev$([ "$base" = "$base_rev" ] || echo " ($base)")${RMQ_BASE_BUILD:+ (build $RMQ_BASE_BUILD)}; current: the working tree of $(git rev-parse HEAD)"
echo "  $0 --base $base --names $names --requests $requests"
