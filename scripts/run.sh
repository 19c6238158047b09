#!/usr/bin/env bash
# Sets up dependencies, builds, and runs the main job on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
./build/src/tools/strata generate --prompt "${1:-Once upon a time}" --max-tokens 128 --temperature 0
