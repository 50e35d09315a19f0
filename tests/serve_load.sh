#!/usr/bin/env bash
# serve_load.sh TIERLLM BENCH_SERVE MODELS_DIR - a bounded load test of `tierllm serve` on
# loopback: one light driver process (bench_serve) keeps 32 connections busy with 256
# streaming completions (stories260K, 128-token prompts, 16 generated each); every
# response must arrive complete ([DONE], tokens, status 200), and the server's peak
# resident memory must stay within --mem-budget + 64 MiB.
set -u
bin=$1; driver=$2; models=$3
budget=48
port=$((20000 + $$ % 20000))
"$driver" --tierllm "$bin" --model "$models/stories260K.gguf" --budget $budget --clients 32 \
    --requests 8 --gen 16 --no-batch --max-rss $((budget + 64)) --port $port
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: serve_load (driver exit $rc)"; exit 1; }
echo "serve_load: ok"
