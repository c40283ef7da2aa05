#!/usr/bin/env bash
# Large admin replies, before and after (issue 21 item 8): a client's
# send latency (one at a time) against a standalone server holding N
# topics (default 26,000: a 3-4 MB GET_ALL_TOPIC_CONFIG), quiet and while
# L clients (default 2) loop GET_ALL_TOPIC_CONFIG, for a base revision
# and the working tree.
#
#   scripts/bench/admin_replies.sh [--base REV] [--topics N] [--seconds S] [--loopers L]
#
# The topics are written as STORE/config/topics.json before start.  The
# base is REV (default `git merge-base HEAD main`, or HEAD^1 on main)
# built in a temporary worktree (RMQ_BASE_BUILD=DIR uses a build of it
# made already); current is build/.  Both servers run natively, one after
# the other, workers = cores; the clients are this tree's, the looping
# ones in a second process (reading their replies must not slow the
# measuring client: only the server is shared).  Prints p50, p99
# and max per build and phase, the sends answered SYSTEM_BUSY (flow
# control: waited behind the worker's other work), and how many replies
# the loopers got.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
cd "$RMQ_ROOT"

base="" topics=26000 seconds=15 loopers=2
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base="$2"; shift 2 ;;
        --topics) topics="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --loopers) loopers="$2"; shift 2 ;;
        *) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
if [ -z "$base" ]; then
    base=$(git merge-base HEAD main)
    [ "$base" != "$(git rev-parse HEAD)" ] || base=$(git rev-parse HEAD^1)
fi
base_rev=$(git rev-parse --verify "$base^{commit}")

tmp=$(mktemp -d /tmp/rmq-adminreplies.XXXXXX)
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
    echo "admin_replies: base $(git log -1 --format='%h %s' "$base_rev")" >&2
    git worktree add --detach "$tmp/base" "$base_rev" >&2
    bash "$tmp/base/scripts/setup.sh" "$tmp/base/build" >&2
    base_build="$tmp/base/build"
fi
rmq_build "$current_build"
mkdir "$tmp/work"
env -u RMQ_LUA_DIR lua5.4 scripts/bench/admin_replies.lua "$tmp/work" "$base_build" "$current_build" \
    "$topics" "$seconds" "$loopers"
echo "base: $base_rev$([ "$base" = "$base_rev" ] || echo " ($base)")${RMQ_BASE_BUILD:+ (build $RMQ_BASE_BUILD)}; current: the working tree of $(git rev-parse HEAD)"
echo "  $0 --base $base --topics $topics --seconds $seconds --loopers $loopers"
