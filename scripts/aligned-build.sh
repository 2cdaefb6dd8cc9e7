#!/usr/bin/env bash
# Builds adgauge's release binary, in the current directory's checkout, with every function and
# every block not reached by falling through aligned to 64 bytes, and prints the binary's path.
# `adgauge compare` times two such builds: without the alignment, where a loop starts relative to
# a 64-byte line moves with unrelated code, and two builds of one source that differed only by a
# slowdown planted in `+`'s primal fold also differed by 1.12-1.18x on the f64 JVPs the plant does
# not run; aligned, they differed on the planted fold alone (docs/gate.md).
#
#   scripts/aligned-build.sh [CARGO BUILD ARGS...]
#
# The build goes to $CARGO_TARGET_DIR/aligned (default target/aligned), apart from the plain
# build, whose cache the different flags would otherwise invalidate.
set -euo pipefail
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=6"
target="${CARGO_TARGET_DIR:-target}/aligned"
CARGO_TARGET_DIR="$target" cargo build --release --quiet "$@" >&2
echo "$target/release/adgauge"
