#!/usr/bin/env bash
# Makes a virtualenv with the external AD tools' Python packages, pinned (CPU only), and prints
# its python. Used by suites/tools.yaml and suites/tools-quick.yaml through
# $ADGAUGE_TOOLS_PYTHON:
#
#   export ADGAUGE_TOOLS_PYTHON="$(scripts/setup-tools.sh)"
#   adgauge run --suite suites/tools.yaml
#
# The venv lives in $ADGAUGE_TOOLS_VENV (default ~/.cache/adgauge-tools-venv). PyTorch comes
# from its CPU-only index when that is reachable; otherwise from PyPI, whose Linux wheel is the
# CUDA build and pulls NVIDIA's libraries (a few GB): the adapter still runs it on the CPU.
set -euo pipefail
VENV="${ADGAUGE_TOOLS_VENV:-$HOME/.cache/adgauge-tools-venv}"
PY="${PYTHON:-python3}"
JAX_VERSION="0.10.2"     # jax and jaxlib are released in lockstep
NUMPY_VERSION="2.4.6"
TORCH_VERSION="2.15.0"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" >&2
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install --quiet --upgrade pip >&2
"${PIP[@]}" install --quiet "jax==${JAX_VERSION}" "jaxlib==${JAX_VERSION}" "numpy==${NUMPY_VERSION}" >&2
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${TORCH_VERSION}')" 2>/dev/null; then
    # One quick try at the CPU index (no retries), then PyPI.
    if ! "${PIP[@]}" install --quiet --timeout 10 --retries 0 --index-url "$TORCH_CPU_INDEX" \
        "torch==${TORCH_VERSION}" >&2 2>/dev/null; then
        echo "setup-tools: the PyTorch CPU index is not reachable; installing torch from PyPI" >&2
        "${PIP[@]}" install --quiet "torch==${TORCH_VERSION}" "numpy==${NUMPY_VERSION}" >&2
    fi
fi
"$VENV/bin/python" -c 'import jax, numpy, torch; print("jax", jax.__version__, "numpy", numpy.__version__, "torch", torch.__version__)' >&2
echo "$VENV/bin/python"
