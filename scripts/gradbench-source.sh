#!/usr/bin/env bash
# GradBench's source at the pinned commit, fetched once into $ADGAUGE_GRADBENCH_DIR/src (default
# ~/.cache/adgauge-gradbench/src); prints that directory. Used by scripts/gradbench-interop.sh
# and by the test that drives GradBench's own JAX tool (harness/tests/it/python_tools.rs).
#
# $GRADBENCH_SRC: a URL or git repository (default https://github.com/gradbench/gradbench), or a
# directory holding an export of that commit, for a machine that cannot reach GitHub (its commit
# cannot be verified: the message says where it came from). Exit 2 when it cannot be had.
set -uo pipefail
GRADBENCH_COMMIT="f26651a7bcc120654fa895adecaf371b8cc059c5" # 2026-03-10
GRADBENCH_SRC="${GRADBENCH_SRC:-https://github.com/gradbench/gradbench}"
work="${ADGAUGE_GRADBENCH_DIR:-$HOME/.cache/adgauge-gradbench}"
src="$work/src"
say() { echo "gradbench-source: $*" >&2; }
fail() { say "$*"; exit 2; }

mkdir -p "$work" || fail "cannot make $work"
if [ -f "$GRADBENCH_SRC/crates/gradbench/Cargo.toml" ]; then
  if [ ! -f "$src/.adgauge-copied" ]; then
    rm -rf "$src" && cp -a "$GRADBENCH_SRC" "$src" && touch "$src/.adgauge-copied" \
      || fail "cannot copy $GRADBENCH_SRC"
  fi
  say "GradBench files copied from $GRADBENCH_SRC (stated commit $GRADBENCH_COMMIT)"
else
  if [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$GRADBENCH_COMMIT" ]; then
    rm -rf "$src"
    git init -q "$src" || fail "cannot make $src"
    git -C "$src" fetch -q --depth 1 "$GRADBENCH_SRC" "$GRADBENCH_COMMIT" \
      || fail "cannot fetch $GRADBENCH_COMMIT from $GRADBENCH_SRC (set GRADBENCH_SRC to a clone or an export)"
    git -C "$src" -c advice.detachedHead=false checkout -q FETCH_HEAD || fail "checkout failed"
  fi
  say "GradBench $(git -C "$src" rev-parse HEAD) from $GRADBENCH_SRC"
fi
echo "$src"
