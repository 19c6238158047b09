#!/usr/bin/env bash
# The main job: sets up dependencies, builds, starts `strata serve` on the embedded default
# model (models/stories260K), prints a short generated text, replays a slice of the Mooncake
# conversation trace against the server with `strata bench serve`, prints the report, and
# stops the server. See scripts/serve_bench.sh for the knobs (TRACE, NUM_REQUESTS, TIME_SCALE).
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/serve_bench.sh "$@"
