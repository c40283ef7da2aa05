#!/usr/bin/env bash
# Builds the Debian package (debian/, debhelper, dpkg-buildpackage) from
# this tree's files, as they are (committed or not):
#
#   scripts/package.sh [OUT_DIR]      default: build-deb/
#
# OUT_DIR/src is a copy of the tree (dpkg-buildpackage writes its results
# beside the source: OUT_DIR, never outside the worktree) with
# debian/changelog and .tarball-version carrying the version from git
# (cmake/version.cmake: the latest tag, or 0.0.0+gREV).  The copy keeps
# its build directory between runs and files keep their times, so a
# second run rebuilds only what changed.  The specs run from the source
# tree, not here (DEB_BUILD_OPTIONS=nocheck).  Prints the .deb's path.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/build-deb}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
src="$out/src"

read -r version rev < <(cmake -DROOT="$root" -DOUT="$out/version.c" -DPRINT=1 \
                              -P "$root/cmake/version.cmake" 2>&1)

# The copy: everything git knows or would add (not build dirs, not
# node_modules), with the files' times; what the tree no longer has goes.
mkdir -p "$src"
find "$src" -mindepth 1 -maxdepth 1 ! -name 'obj-*' ! -name debian -exec rm -rf {} +
rm -rf "$src/debian"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$src" -xf -
echo "$version $rev" > "$src/.tarball-version"
cat > "$src/debian/changelog" <<END
rmq ($version) unstable; urgency=medium

  * Built from git revision $rev.

 -- rmq developers <rmq@packages.invalid>  $(date -R)
END

rm -f "$out"/rmq_*.deb "$out"/rmq-dbgsym_*.deb "$out"/rmq_*.buildinfo "$out"/rmq_*.changes
(cd "$src" && DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" \
    dpkg-buildpackage -b -nc -us -uc -j"$(nproc)" >"$out/build.log" 2>&1) || {
    tail -40 "$out/build.log" >&2
    echo "package: dpkg-buildpackage failed; the whole log: $out/build.log" >&2
    exit 1
}
ls "$out"/rmq_"$version"_*.deb
