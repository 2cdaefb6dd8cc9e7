#!/usr/bin/env bash
# Prints the path of adgauge's release binary built at revision REV, building it once per commit:
# the binaries are kept in $ADGAUGE_BASELINE_CACHE (default ~/.cache/adgauge-baselines), one
# directory per commit, and built in a detached worktree with a target directory of their own
# (so the working tree and its build are left alone), aligned as scripts/aligned-build.sh aligns
# the current build. `adgauge compare --baseline bin:PATH` times it against the current build
# (scripts/nightly.sh).
#
#   scripts/build-baseline.sh REV     (a commit, tag or branch of this repository)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/build-baseline.sh REV}"
commit="$(git rev-parse --verify --quiet "$rev^{commit}")" || { echo "build-baseline: '$rev' is not a commit of this repository" >&2; exit 2; }
cache="${ADGAUGE_BASELINE_CACHE:-$HOME/.cache/adgauge-baselines}"
bin="$cache/$commit/aligned/adgauge"
aligned_build="$PWD/scripts/aligned-build.sh"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache/$commit/aligned"
tree="$(mktemp -d)"
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git worktree add --detach --quiet "$tree" "$commit"
built="$(cd "$tree" && CARGO_TARGET_DIR="$cache/target" "$aligned_build")"
cp "$built" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin"
