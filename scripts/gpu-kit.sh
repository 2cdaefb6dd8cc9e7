#!/usr/bin/env bash
# The GPU kit (docs/gpu.md): everything a CUDA measurement needs, packed here (Rust, no GPU) so
# that a GPU machine with an NVIDIA driver but no Rust, no CUDA toolkit and no network turns a
# few minutes into checked results.
#
#   scripts/gpu-kit.sh build           here: builds the release binary and the conformance and
#                                      NVRTC test binaries, packs them with the pinned NVRTC
#                                      libraries and the ADBench inputs into gpu-kit/ (ignored by
#                                      git, xz-compressed), prints its size and the carry list
#   scripts/gpu-kit.sh run             on the GPU machine, from the repository root: the steps
#                                      below, results in $OUT (at most 8 files), under 8 minutes
#   scripts/gpu-kit.sh run --dry-run   here: the same steps on OpenCL (PoCL) at tiny sizes, so
#                                      that CI keeps the kit working (harness/tests/it/gpu_kit.rs)
#
# `run`'s steps, each under its own `timeout` (a step that fails or runs out of time is recorded
# and the kit goes on): the environment (nvidia-smi: driver, clocks), `adgauge backends`; then, side
# by side, the conformance suite's CUDA tests with ADGAUGE_REQUIRE=cuda, the NVRTC test, `adgauge
# check --backend cuda` and the eval cases of every histogram operator and rule against the CPU
# device's answers (scripts/gpu_kit.py evals); then, one at a time, the device-to-device copy
# bandwidth (`adgauge backends --bandwidth`) and the timing suites (suites/gpu.yaml,
# gpu-large.yaml, gpu-classic.yaml); last the summary. Files in $OUT: summary.md, env.txt,
# checks.log, evals.txt, timing.log, timing.jsonl, results.tar.xz (the runs' CSV and Parquet
# files, for `adgauge report`).
#
# Environment: OUT (default ./gpu-kit-out); GPU_KIT_DIR (the kit, default ./gpu-kit);
# GPU_KIT_BUDGET_S (run's wall-time budget: 450 s; dry run 240 s, of which it needs 10 to 70);
# ADGAUGE_BIN, GPU_KIT_CONFORMANCE, GPU_KIT_NVRTC_TEST (binaries to use instead of the kit's; a
# dry run without them and without a kit records the conformance and NVRTC steps as skipped);
# ADGAUGE_ADBENCH_DIR (the evals' ADBench files: default the kit's, else
# ../shared/datasets/adbench); CARGO_TARGET_DIR (build).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIT_DIR="${GPU_KIT_DIR:-$ROOT/gpu-kit}"
HELPER="$ROOT/scripts/gpu_kit.py"
# The device tool's carry limit: the working tree and the carried kit together.
CARRY_LIMIT=$((64 << 20))
# The ADBench files the evals read (scripts/gpu_kit.py evals), relative to the ADBench folder.
ADBENCH_FILES="gmm/1k/gmm_d2_K5.txt gmm/1k/gmm_d10_K25.txt lstm/lstm_l2_c1024.txt ba/test.txt"

log() { echo "gpu-kit: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# ---------------------------------------------------------------------------------------- build

build() {
    cd "$ROOT" || die "cannot enter $ROOT"
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    command -v python3 >/dev/null || die "python3 is needed to read cargo's JSON messages"
    local stage
    stage="$(mktemp -d "${TMPDIR:-/tmp}/adgauge-gpu-kit-build.XXXXXX")" || die "mktemp failed"
    # shellcheck disable=SC2064 # expand now: the folder is this call's
    trap "rm -rf '$stage'" EXIT
    mkdir -p "$KIT_DIR" "$stage/kit/bin" "$stage/kit/adbench" "$stage/nvrtc/lib"

    log "building the release binary and the test binaries (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    cargo build --release -p adgauge --message-format=json-render-diagnostics >"$stage/cargo-bin.json" ||
        die "cargo build --release -p adgauge failed"
    cargo test --release -p adgauge-backends --test conformance --no-run \
        --message-format=json-render-diagnostics >"$stage/cargo-tests.json" ||
        die "cargo test --release -p adgauge-backends --no-run failed"
    cargo test --release -p adgauge-kernels --test nvrtc --no-run \
        --message-format=json-render-diagnostics >>"$stage/cargo-tests.json" ||
        die "cargo test --release -p adgauge-kernels --no-run failed"
    # shellcheck disable=SC2015 # either failing dies
    python3 "$HELPER" artifacts "$stage/cargo-bin.json" adgauge >"$stage/artifacts" &&
        python3 "$HELPER" artifacts "$stage/cargo-tests.json" conformance nvrtc >>"$stage/artifacts" ||
        die "cargo's messages name no executable for adgauge, conformance or nvrtc"
    local name path
    while IFS=$'\t' read -r name path; do
        cp "$path" "$stage/kit/bin/$name" || die "cannot copy $path"
    done <"$stage/artifacts"
    for name in adgauge conformance nvrtc; do
        [ -x "$stage/kit/bin/$name" ] || die "cargo reported no executable '$name'"
    done

    local adbench="${ADGAUGE_ADBENCH_DIR:-$ROOT/../shared/datasets/adbench}" f
    for f in $ADBENCH_FILES; do
        if [ -f "$adbench/$f" ]; then
            mkdir -p "$stage/kit/adbench/$(dirname "$f")"
            cp "$adbench/$f" "$stage/kit/adbench/$f"
        else
            log "warning: $adbench/$f is missing: the kit's evals will skip it"
        fi
    done

    {
        echo "adgauge GPU kit, built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "rustc: $(rustc --version 2>/dev/null)"
        echo "built on: $(uname -srm), $(ldd --version 2>/dev/null | head -1)"
        (cd "$stage/kit" && find bin adbench -type f -exec sha256sum {} +)
    } >"$stage/kit/MANIFEST"

    # NVRTC (about 100 MB, 30 MB packed, a minute of xz): packed again only when the pinned
    # wheel changes.
    local nvrtc_lib wheel
    nvrtc_lib="$(scripts/setup-nvrtc.sh)" || die "scripts/setup-nvrtc.sh failed"
    wheel="$(sed -n 's/^NVRTC_WHEEL_VERSION="\(.*\)"/\1/p' scripts/setup-nvrtc.sh)"
    # The wheel's version and what is packed of it (change the second part with the packing).
    local stamp="$wheel: libnvrtc.so.12, libnvrtc-builtins.so.12.*, libnvrtc.so link"
    if [ -f "$KIT_DIR/nvrtc.tar.xz" ] && [ "$(cat "$KIT_DIR/nvrtc.version" 2>/dev/null)" = "$stamp" ]; then
        log "NVRTC $wheel already packed in $KIT_DIR/nvrtc.tar.xz"
    else
        log "packing NVRTC $wheel from $nvrtc_lib"
        cp "$nvrtc_lib"/libnvrtc.so.12 "$stage/nvrtc/lib/" || die "no libnvrtc.so.12 in $nvrtc_lib"
        cp "$nvrtc_lib"/libnvrtc-builtins.so.12.* "$stage/nvrtc/lib/" || die "no libnvrtc-builtins in $nvrtc_lib"
        rm -f "$stage/nvrtc/lib/"*.alt.*
        # cudarc tries `libnvrtc.so` first: without this link it could load the machine's own
        # NVRTC of another major version, found through ld.so.cache, instead of the kit's.
        ln -s libnvrtc.so.12 "$stage/nvrtc/lib/libnvrtc.so"
        XZ_OPT="-6 -T0" tar -C "$stage/nvrtc" -cJf "$KIT_DIR/nvrtc.tar.xz.tmp" lib || die "tar failed"
        mv "$KIT_DIR/nvrtc.tar.xz.tmp" "$KIT_DIR/nvrtc.tar.xz"
        echo "$stamp" >"$KIT_DIR/nvrtc.version"
    fi
    echo "nvidia-cuda-nvrtc-cu12 $wheel" >>"$stage/kit/MANIFEST"

    XZ_OPT="-6 -T0" tar -C "$stage/kit" -cJf "$KIT_DIR/kit.tar.xz.tmp" . || die "tar failed"
    mv "$KIT_DIR/kit.tar.xz.tmp" "$KIT_DIR/kit.tar.xz"
    cp "$stage/kit/MANIFEST" "$KIT_DIR/MANIFEST"

    local kit_bytes tree_bytes rel
    kit_bytes="$(du -cb "$KIT_DIR"/* | tail -1 | cut -f1)"
    tree_bytes="$( (git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null) | awk '/\ttotal$/ {t += $1} END {print t + 0}')"
    rel="${KIT_DIR#"$ROOT"/}"
    log "$(cat "$KIT_DIR/MANIFEST" | head -2 | tr '\n' ' ')"
    echo "kit: $KIT_DIR, $kit_bytes bytes ($((kit_bytes >> 20)) MiB); with the working tree ($tree_bytes bytes): $(((kit_bytes + tree_bytes) >> 20)) MiB of the device tool's 64 MiB"
    if [ $((kit_bytes + tree_bytes)) -gt "$CARRY_LIMIT" ]; then
        die "the kit and the working tree exceed the 64 MiB carry limit"
    fi
    if [ "$rel" = "$KIT_DIR" ]; then
        log "warning: $KIT_DIR is outside the repository: the device tool carries only paths inside it"
    fi
    echo "carry: [\"$rel\"]"
    echo "command: bash scripts/gpu-kit.sh run"
}

# ------------------------------------------------------------------------------------------ run

# step NAME LIMIT_S LOG CMD...: runs CMD under `timeout` (a shell function of this script runs
# as it is: it bounds its own commands) with its output appended to LOG, and records
# "NAME<TAB>status<TAB>exit<TAB>seconds<TAB>note" in $WORK/steps.
step() {
    local name="$1" limit="$2" logfile="$3"
    shift 3
    local t0=$SECONDS rc status
    {
        echo "=== $name: $*"
        echo "=== time limit ${limit} s, started $(date -u +%H:%M:%S)"
    } >>"$logfile"
    if [ "$limit" -le 0 ]; then
        echo "=== $name: skipped, the kit's time budget is spent" >>"$logfile"
        printf '%s\tskipped\t-\t0\tthe time budget was spent\n' "$name" >>"$WORK/steps"
        return 0
    fi
    if [ "$(type -t "$1")" = function ]; then
        "$@" >>"$logfile" 2>&1
    else
        timeout --kill-after=10 "$limit" "$@" >>"$logfile" 2>&1
    fi
    rc=$?
    case $rc in
        0) status=ok ;;
        124 | 137) status=TIMEOUT ;;
        *) status=FAILED ;;
    esac
    echo "=== $name: $status (exit $rc) after $((SECONDS - t0)) s" >>"$logfile"
    printf '%s\t%s\t%s\t%s\t\n' "$name" "$status" "$rc" "$((SECONDS - t0))" >>"$WORK/steps"
}

# unpack ARCHIVE DIR: extracts a .tar.xz, with python3's lzma where tar has no xz.
unpack() {
    tar -C "$2" -xJf "$1" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"
}

# pack ARCHIVE DIR NAME: the .tar.xz of DIR/NAME, with python3's lzma where tar has no xz.
pack() {
    tar -C "$2" -cJf "$1" "$3" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "w:xz").add(sys.argv[2], arcname=sys.argv[3])' \
            "$1" "$2/$3" "$3"
}

# skip NAME REASON: records a step that could not run here.
skip() {
    printf '%s\tskipped\t-\t0\t%s\n' "$1" "$2" >>"$WORK/steps"
}

# limit WANTED: WANTED seconds, or what is left of the budget (less a reserve for the summary).
limit() {
    local left=$((BUDGET - (SECONDS - START) - 25))
    if [ "$left" -lt "$1" ]; then echo "$((left > 0 ? left : 0))"; else echo "$1"; fi
}

environment() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -a)"
    echo "cpus: $(nproc)"
    grep -m1 'model name' /proc/cpuinfo 2>/dev/null
    grep -E '^(MemTotal|MemAvailable)' /proc/meminfo 2>/dev/null
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "--- kit"
    cat "$KIT/MANIFEST" 2>/dev/null || echo "(no kit manifest: binaries from the environment)"
    echo "adgauge: $ADGAUGE ($(timeout 10 "$ADGAUGE" --version 2>&1))"
    echo "--- NVIDIA driver"
    cat /proc/driver/nvidia/version 2>/dev/null || echo "(no /proc/driver/nvidia/version)"
    if command -v nvidia-smi >/dev/null; then
        timeout 20 nvidia-smi
        timeout 20 nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu,persistence_mode,compute_mode --format=csv
        timeout 20 nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,MEMORY,ECC
    else
        echo "nvidia-smi: not found (no NVIDIA driver here)"
    fi
    echo "--- libraries"
    timeout 10 ldd "$ADGAUGE" 2>&1
    timeout 10 ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libOpenCL' || echo "(ldconfig lists no libcuda, libnvrtc or libOpenCL)"
    if [ -d "$KIT/lib" ]; then ls -l "$KIT/lib"; else echo "(no NVRTC in the kit)"; fi
}

run() {
    local dry=0
    case "${1:-}" in
        "") ;;
        --dry-run) dry=1 ;;
        *) die "usage: scripts/gpu-kit.sh run [--dry-run]" ;;
    esac
    cd "$ROOT" || die "cannot enter $ROOT"
    START=$SECONDS
    OUT="${OUT:-$ROOT/gpu-kit-out}"
    mkdir -p "$OUT" || die "cannot create $OUT"
    # Appended to below: a rerun into the same folder starts them anew.
    rm -f "$OUT"/{summary.md,env.txt,checks.log,evals.txt,timing.log,timing.jsonl,results.tar.xz}
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/adgauge-gpu-kit.XXXXXX")" || die "mktemp failed"
    # shellcheck disable=SC2064 # expand now
    trap "rm -rf '$WORK'" EXIT
    KIT="$WORK/kit"
    mkdir -p "$KIT" "$WORK/results"
    : >"$WORK/steps"

    local device suites adbench check_args evals_args conformance_filter
    if [ "$dry" = 1 ]; then
        BUDGET="${GPU_KIT_BUDGET_S:-240}"
        device=opencl
        suites="gpu-dry"
        check_args=(--backend opencl --workload hist-add --dtype f32)
        evals_args=(--tiny)
        conformance_filter=opencl::
    else
        BUDGET="${GPU_KIT_BUDGET_S:-450}"
        device=cuda
        suites="gpu gpu-large gpu-classic"
        check_args=(--backend cuda)
        evals_args=()
        conformance_filter=cuda
    fi

    # The kit: binaries, NVRTC, inputs. A dry run may go without it (binaries from ADGAUGE_BIN...).
    if [ -f "$KIT_DIR/kit.tar.xz" ]; then
        unpack "$KIT_DIR/kit.tar.xz" "$KIT" || die "cannot unpack $KIT_DIR/kit.tar.xz"
        if [ -f "$KIT_DIR/nvrtc.tar.xz" ]; then
            unpack "$KIT_DIR/nvrtc.tar.xz" "$KIT" || die "cannot unpack $KIT_DIR/nvrtc.tar.xz"
            export LD_LIBRARY_PATH="$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        fi
    elif [ "$dry" = 0 ]; then
        die "no kit at $KIT_DIR/kit.tar.xz: run 'scripts/gpu-kit.sh build' first (and carry its folder)"
    fi
    # The driver's libcuda where the loader's cache does not list it (some images mount the
    # driver under /usr/local/nvidia).
    if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
        local d
        for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
            [ -e "$d/libcuda.so.1" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
        done
    fi
    ADGAUGE="${ADGAUGE_BIN:-$KIT/bin/adgauge}"
    [ -x "$ADGAUGE" ] || die "no adgauge binary at $ADGAUGE (set ADGAUGE_BIN or build the kit)"
    local conformance="${GPU_KIT_CONFORMANCE:-$KIT/bin/conformance}"
    local nvrtc_test="${GPU_KIT_NVRTC_TEST:-$KIT/bin/nvrtc}"
    if [ -n "${ADGAUGE_ADBENCH_DIR:-}" ]; then
        adbench="$ADGAUGE_ADBENCH_DIR"
    elif [ -d "$KIT/adbench" ]; then
        adbench="$KIT/adbench"
    else
        adbench="$ROOT/../shared/datasets/adbench"
    fi

    log "$([ "$dry" = 1 ] && echo "dry run on OpenCL" || echo "run on CUDA"), budget $BUDGET s, results in $OUT"
    step environment 30 "$OUT/env.txt" environment
    step backends 60 "$WORK/checks-backends.log" "$ADGAUGE" backends

    # Correctness, side by side: each step reads results back and none is timed.
    if [ -x "$conformance" ]; then
        # --include-ignored: the slow tier too (the kernel devices' rules against the CPU and the
        # oracle are in it, `cargo test` leaves them to CI).
        ADGAUGE_REQUIRE="$device" step conformance "$(limit 180)" "$WORK/checks-conformance.log" \
            "$conformance" "$conformance_filter" --include-ignored &
    else
        skip conformance "no conformance test binary ($conformance)"
    fi
    if [ -x "$nvrtc_test" ]; then
        ADGAUGE_REQUIRE=nvrtc step nvrtc "$(limit 120)" "$WORK/checks-nvrtc.log" "$nvrtc_test" &
    else
        skip nvrtc "no NVRTC test binary ($nvrtc_test)"
    fi
    step check "$(limit 180)" "$WORK/checks-check.log" "$ADGAUGE" check "${check_args[@]}" &
    if command -v python3 >/dev/null; then
        step evals "$(limit 180)" "$WORK/evals.log" python3 "$HELPER" evals --adgauge "$ADGAUGE" --device "$device" \
            --inputs "$WORK/inputs" --out "$OUT/evals.txt" --adbench "$adbench" "${evals_args[@]}" &
    else
        skip evals "no python3 to compare the answers"
    fi
    wait
    for f in backends conformance nvrtc check; do
        [ -f "$WORK/checks-$f.log" ] && cat "$WORK/checks-$f.log"
    done >"$OUT/checks.log"
    [ -f "$WORK/evals.log" ] && cat "$WORK/evals.log" >>"$OUT/checks.log"

    # Timing, one thing at a time on the device.
    local bytes=1G
    [ "$dry" = 1 ] && bytes=16M
    # shellcheck disable=SC2016 # $1... are sh -c's arguments
    step bandwidth "$(limit 60)" "$WORK/bandwidth.log" sh -c '"$1" backends --json --bandwidth "$2" >"$3"' \
        sh "$ADGAUGE" "$bytes" "$WORK/bandwidth.json"
    {
        cat "$WORK/bandwidth.log"
        cat "$WORK/bandwidth.json" 2>/dev/null
    } >>"$OUT/timing.log"
    local suite share left_suites
    left_suites=$(echo "$suites" | wc -w)
    for suite in $suites; do
        "$ADGAUGE" run --suite "suites/$suite.yaml" --list >"$WORK/planned-$suite.txt" 2>>"$OUT/timing.log"
        # What is left, shared evenly by the suites still to run.
        share=$(((BUDGET - (SECONDS - START) - 25) / left_suites))
        left_suites=$((left_suites - 1))
        # shellcheck disable=SC2016 # $1... are sh -c's arguments
        step "timing $suite" "$(limit "$share")" "$OUT/timing.log" sh -c '"$1" run --suite "$2" --out "$3" --json --quiet >"$4"' \
            sh "$ADGAUGE" "suites/$suite.yaml" "$WORK/results" "$WORK/timing-$suite.jsonl"
        cat "$WORK/timing-$suite.jsonl" >>"$OUT/timing.jsonl" 2>/dev/null
    done
    if command -v nvidia-smi >/dev/null; then
        # The clocks right after the timing (the environment step saw them idle).
        echo "=== after timing: $(date -u +%H:%M:%S)" >>"$OUT/timing.log"
        timeout 20 nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw \
            --format=csv >>"$OUT/timing.log" 2>&1
    fi
    pack "$OUT/results.tar.xz" "$WORK" results 2>>"$OUT/timing.log"

    # The summary: the steps (here, so that it exists whatever failed), then the helper's tables.
    local failed
    failed=$(awk -F'\t' '$2 == "FAILED" || $2 == "TIMEOUT"' "$WORK/steps" | wc -l)
    {
        echo "# adgauge GPU kit: $([ "$dry" = 1 ] && echo "dry run on OpenCL (not a measurement)" || echo "CUDA run")"
        echo
        if [ -f "$KIT/MANIFEST" ]; then
            echo "$(date -u +%Y-%m-%dT%H:%M:%SZ); $("$ADGAUGE" --version 2>&1); kit of commit $(sed -n 's/^commit: //p' "$KIT/MANIFEST")"
        else
            echo "$(date -u +%Y-%m-%dT%H:%M:%SZ); $("$ADGAUGE" --version 2>&1) ($ADGAUGE); no kit"
        fi
        grep -E "^(cuda|opencl) " "$WORK/checks-backends.log" 2>/dev/null | sed 's/^/    /'
        echo
        echo "| step | status | exit | seconds | note |"
        echo "|---|---|---|---|---|"
        awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$WORK/steps"
        echo
        echo "$failed steps failed or ran out of time; wall time $((SECONDS - START)) s of a $BUDGET s budget."
        echo
        echo '```'
        grep -h -A1 '^name, pci.bus_id' "$OUT/env.txt" 2>/dev/null
        for f in conformance nvrtc; do
            grep -h -E '^test result:|^    [A-Za-z0-9_:]+$' "$WORK/checks-$f.log" 2>/dev/null | head -30 | sed "s/^/$f: /"
        done
        grep -h -E 'cases passed every check|failure\(s\):|^  .*: (.* worst .*|error: .*)$' "$WORK/checks-check.log" 2>/dev/null |
            head -30 | sed 's/^/check: /'
        grep -h -E '^(DIFFERS|error) |^evals on' "$OUT/evals.txt" 2>/dev/null | head -30
        echo '```'
        echo
        if command -v python3 >/dev/null; then
            # shellcheck disable=SC2086 # the suite names are words
            timeout 60 python3 "$HELPER" summary --work "$WORK" --device "$device" --suites $suites
        fi
    } >"$OUT/summary.md" 2>&1
    log "done in $((SECONDS - START)) s: $failed steps failed or timed out; results in $OUT"
    [ "$failed" = 0 ]
}

case "${1:-}" in
    build) build ;;
    run)
        shift
        run "$@"
        ;;
    *) die "usage: scripts/gpu-kit.sh build | run [--dry-run]" ;;
esac
