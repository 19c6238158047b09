#!/usr/bin/env bash
# Sets up dependencies, builds, and runs the whole test suite with CTest.
# STRATA_SANITIZE=1 scripts/test.sh runs it under ASan+UBSan instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
if [[ "${STRATA_SANITIZE:-0}" == 1 ]]; then DIR=build-asan; else DIR=build; fi
ctest --test-dir "$DIR" --output-on-failure -j "$(nproc)" --timeout 1500
