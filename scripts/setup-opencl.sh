#!/usr/bin/env bash
# Installs an OpenCL runtime for adgauge's OpenCL device on Debian/Ubuntu: the ICD loader
# (libOpenCL.so.1) and PoCL, a portable OpenCL implementation that runs kernels on the CPU, so the
# OpenCL half of the conformance suite runs on machines without a GPU. Needs root (or sudo).
# adgauge itself builds and runs without any of this: libOpenCL is loaded at run time.
set -euo pipefail

if ! command -v apt-get >/dev/null; then
    echo "setup-opencl: no apt-get; install an OpenCL ICD loader and driver (e.g. PoCL) by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
if [ -e /usr/lib/x86_64-linux-gnu/libOpenCL.so.1 ] || ldconfig -p 2>/dev/null | grep -q 'libOpenCL.so.1'; then
    if ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
        echo "setup-opencl: an OpenCL loader and driver are already installed"
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends pocl-opencl-icd ocl-icd-libopencl1
echo "setup-opencl: installed PoCL; 'adgauge backends' should list opencl as available"
