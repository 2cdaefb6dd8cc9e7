#!/usr/bin/env bash
# Makes a virtualenv with the external AD tools' Python packages, pinned (CPU only), and prints
# its python. Used by suites/tools.yaml through $ADGAUGE_TOOLS_PYTHON:
#
#   export ADGAUGE_TOOLS_PYTHON="$(scripts/setup-tools.sh)"
#   adgauge run --suite suites/tools.yaml
#
# The venv lives in $ADGAUGE_TOOLS_VENV (default ~/.cache/adgauge-tools-venv).
set -euo pipefail
VENV="${ADGAUGE_TOOLS_VENV:-$HOME/.cache/adgauge-tools-venv}"
PY="${PYTHON:-python3}"
JAX_VERSION="0.10.2"     # jax and jaxlib are released in lockstep
NUMPY_VERSION="2.4.6"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" >&2
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet "jax==${JAX_VERSION}" "jaxlib==${JAX_VERSION}" "numpy==${NUMPY_VERSION}" >&2
"$VENV/bin/python" -c 'import jax, numpy; print("jax", jax.__version__, "numpy", numpy.__version__)' >&2
echo "$VENV/bin/python"
