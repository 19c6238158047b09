#!/usr/bin/env bash
# Configures and builds Strata. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# STRATA_SANITIZE=1 builds with ASan+UBSan (default dir build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${STRATA_SANITIZE:-0}" == 1 ]]; then
  BUILD_DIR=${1:-build-asan}; EXTRA=(-DSTRATA_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
else
  BUILD_DIR=${1:-build}; EXTRA=(-DCMAKE_BUILD_TYPE=Release)
fi
shift || true
cmake -S . -B "$BUILD_DIR" -G Ninja "${EXTRA[@]}" "$@" >/dev/null
ninja -C "$BUILD_DIR" -j "$(nproc)"
