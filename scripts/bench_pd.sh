#!/usr/bin/env bash
# Measures prefill/decode disaggregation on this machine: colocated vs 1P1D vs 2P1D (all
# behind one URL: the server itself, or `strata router`), replaying the Mooncake head-50
# slice with `strata bench serve`. Usage: scripts/bench_pd.sh [MODEL_DIR] (default
# models/deepseek-v41-tiny; BLOCK_TOKENS=N sets --block-tokens, default 16). Writes bench-pd-{colocated,1p1d,2p1d}.json in the current
# directory and prints each report. Needs a build (scripts/build.sh).
set -euo pipefail
OUT_DIR=$PWD
cd "$(dirname "$0")/.."
S=build/src/tools/strata
M=${1:-models/deepseek-v41-tiny}
TRACE=testdata/traces/mooncake_conversation_head50.jsonl
BLOCK=${BLOCK_TOKENS:-16}  # tokens per 512-token trace block: 16 fits all 50 requests in 512
BENCH=(--trace "mooncake:$TRACE" --num-requests 50 --block-tokens "$BLOCK" --time-scale 0.02
       --length-scale 0.05 --no-progress)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
start() {  # start PORT ARGS...: a strata process, waits until /health answers
  local port=$1; shift
  "$S" "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.1; done
  echo "bench_pd: $* did not come up" >&2; return 1
}
run() {  # run NAME URL
  echo "== $1"
  "$S" bench serve --url "$2" "${BENCH[@]}" --out "$OUT_DIR/bench-pd-$1.json"
}
start 8301 serve --model "$M" --port 8301
run colocated http://127.0.0.1:8301
cleanup; pids=()
start 8311 serve --model "$M" --port 8311 --disaggregation-mode prefill
start 8312 serve --model "$M" --port 8312 --disaggregation-mode decode
start 8310 router --prefill http://127.0.0.1:8311 --decode http://127.0.0.1:8312 --port 8310
run 1p1d http://127.0.0.1:8310
cleanup; pids=()
start 8321 serve --model "$M" --port 8321 --disaggregation-mode prefill
start 8322 serve --model "$M" --port 8322 --disaggregation-mode prefill
start 8323 serve --model "$M" --port 8323 --disaggregation-mode decode
start 8320 router --prefill http://127.0.0.1:8321,http://127.0.0.1:8322 --decode http://127.0.0.1:8323 --port 8320
run 2p1d http://127.0.0.1:8320
