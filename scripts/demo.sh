#!/usr/bin/env bash
# demo.sh - builds tierllm, then runs the real stories260K model (if ../shared/models is
# there) and a synthetic Llama model it writes itself, streaming text with timings.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tierllm_cli >/dev/null
bin=build/tierllm
if [ -f ../shared/models/stories260K.gguf ]; then
    echo "== a real (tiny) trained model: stories260K, greedy"
    $bin run -m ../shared/models/stories260K.gguf -p "Once upon a time" -n 60 --temp 0
fi
model=${TMPDIR:-/tmp}/tierllm-demo-q8_0.gguf
echo "== a synthetic 12-layer, 1024-wide Llama in Q8_0 (random weights: the text is noise)"
[ -f "$model" ] || $bin synth --embd 1024 --ff 2816 --layers 12 --heads 16 --kv-heads 4 \
    --vocab 32000 --type q8_0 -o "$model"
$bin info -m "$model"
$bin run -m "$model" -p "The meaning of life is" -n 32 --temp 0.7 --seed 1
