#!/usr/bin/env bash
# Installs the system packages the build needs (Debian/Ubuntu), only those that are missing.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v ninja >/dev/null || need+=(ninja-build)
command -v clang-format >/dev/null || need+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need+=(libbenchmark-dev)
[ -f /usr/include/hwy/highway.h ] || need+=(libhwy-dev)
# The OpenMP build of OpenBLAS (CPU fused linear cross-entropy; it runs on the caller's OpenMP threads).
ls /usr/lib/*/libopenblas.so >/dev/null 2>&1 || need+=(libopenblas-openmp-dev libopenblas-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "tigon: installing system packages: ${need[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${need[@]}"
