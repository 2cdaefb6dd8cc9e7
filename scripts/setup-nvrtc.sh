#!/usr/bin/env bash
# Installs NVRTC (NVIDIA's runtime CUDA compiler, libnvrtc.so.12) without a GPU, a driver or the
# CUDA toolkit: the nvidia-cuda-nvrtc-cu12 Python wheel in a virtualenv. With its lib folder on
# LD_LIBRARY_PATH, the NVRTC test (kernels/tests/nvrtc.rs) compiles every CUDA kernel to PTX.
# libcuda (the driver) is never needed for that. Idempotent; needs root (or sudo) only to
# install python3-venv.
#
# Prints the wheel's lib folder (the only line on stdout), e.g.
#   export LD_LIBRARY_PATH="$(scripts/setup-nvrtc.sh)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
#
# The wheel version is pinned together with cudarc's CUDA-version feature in
# kernels/Cargo.toml (cuda-12080 <-> 12.8.x): cudarc resolves NVRTC symbols of that version.
set -euo pipefail

NVRTC_WHEEL_VERSION="12.8.93"
VENV="${ADGAUGE_NVRTC_VENV:-$HOME/.cache/adgauge-nvrtc-venv}"

log() { echo "setup-nvrtc: $*" >&2; }

lib_dir() {
    # site-packages/nvidia/cuda_nvrtc/lib inside the venv (python3.X varies).
    local d
    for d in "$VENV"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
        if [ -e "$d/libnvrtc.so.12" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

installed_version() {
    "$VENV/bin/python" -m pip show nvidia-cuda-nvrtc-cu12 2>/dev/null | sed -n 's/^Version: //p'
}

if [ -x "$VENV/bin/python" ] && [ "$(installed_version)" = "$NVRTC_WHEEL_VERSION" ] && lib_dir >/dev/null; then
    log "nvidia-cuda-nvrtc-cu12 $NVRTC_WHEEL_VERSION already in $VENV"
    lib_dir
    exit 0
fi

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null; then
        log "python3 lacks venv/ensurepip and there is no apt-get: install python3-venv by hand"
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >&2
    $SUDO apt-get install -y -q --no-install-recommends python3-venv >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating the virtualenv $VENV"
    python3 -m venv "$VENV" >&2
fi
log "installing nvidia-cuda-nvrtc-cu12==$NVRTC_WHEEL_VERSION"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==$NVRTC_WHEEL_VERSION" >&2

if ! lib_dir >/dev/null; then
    log "the wheel is installed but libnvrtc.so.12 was not found under $VENV"
    exit 1
fi
lib_dir
