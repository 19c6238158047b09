#!/usr/bin/env bash
# Builds the per-module unit-test binaries with ASan+UBSan (build-asan/) and runs them.
# The full suite under sanitizers: STRATA_SANITIZE=1 scripts/test.sh (slower: it also runs
# the golden and end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MODULES=(base kernels model state tiers dist exec sched disagg serve)
TARGETS=(); for m in "${MODULES[@]}"; do TARGETS+=("${m}_test"); done
cmake -S . -B build-asan -G Ninja -DSTRATA_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-asan -j "$(nproc)" "${TARGETS[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for m in "${MODULES[@]}"; do
  echo "[sanitize] ${m}_test"
  "build-asan/src/${m}/${m}_test" --gtest_brief=1
done
echo "[sanitize] all unit tests passed under ASan+UBSan"
