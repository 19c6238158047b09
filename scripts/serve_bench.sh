#!/usr/bin/env bash
# Main job (issue 5): build, start `strata serve` on the embedded default model
# (models/stories260K) on a free loopback port, show a short generated text, replay a slice
# of the Mooncake conversation trace against it with `strata bench serve`, print the
# report, and stop the server. Usage: scripts/serve_bench.sh [BUILD_DIR]
# Outputs: bench-mooncake.json and bench-mooncake.svg in the current directory, and the
# validation ladder's validate-matrix/report.html and matrix.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
bash scripts/setup.sh
echo "[build] building $BUILD_DIR (a first build takes 15-35 minutes on 2 cores, a rebuild seconds; output quiet)"
bash scripts/build.sh "$BUILD_DIR" >/dev/null
STRATA="$BUILD_DIR/src/tools/strata"
LOG=$(mktemp)
"$STRATA" serve --host 127.0.0.1 --port 0 --kv-cache-tokens 16384 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -INT $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$LOG" && break
  sleep 0.1
done
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$LOG" | head -1)
[[ -n "$URL" ]] || { cat "$LOG"; echo "server did not start" >&2; exit 1; }
echo "[serve] $URL (live dashboard of its state: $URL/dashboard)"
echo "[serve] POST /v1/completions {\"prompt\": \"Once upon a time\", \"max_tokens\": 64}:"
curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0}'
echo
TRACE=${TRACE:-../shared/data/traces/mooncake/conversation_trace.jsonl}
[[ -f "$TRACE" ]] || TRACE=testdata/traces/mooncake_conversation_head50.jsonl
echo "[bench] trace $TRACE"
"$STRATA" bench serve --url "$URL" --trace "mooncake:$TRACE" --num-requests "${NUM_REQUESTS:-200}" \
  --block-tokens 16 --time-scale "${TIME_SCALE:-0.02}" --length-scale 0.05 \
  --goodput ttft:500 tpot:50 --out bench-mooncake.json --plot bench-mooncake.svg
echo "[serve] the dashboard was live at $URL/dashboard while the trace ran"
# The validation ladder on the same model (docs/validation-matrix.md): each step starts and
# stops its own servers (PD router, a redis-server pool, mpirun for DCP and PP; the EP step is
# recorded as not applicable: this Llama model has no routed experts).
echo "[validate] strata validate matrix --model models/stories260K --out validate-matrix"
"$STRATA" validate matrix --model models/stories260K --out validate-matrix --load-requests 8
echo "[validate] report: $(pwd)/validate-matrix/report.html (records: validate-matrix/matrix.json)"
