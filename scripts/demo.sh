#!/usr/bin/env bash
# demo.sh - builds tierllm, then (1) runs the real stories260K model if ../shared/models is
# there, and (2) streams a synthetic TinyLlama-1.1B-shape Q8_0 model (1.1 GiB, random
# weights) under a 400 MiB memory budget, about a third of its size: the planner picks
# the policy (the first time, it measures this machine's profile: 15-40 s), weights
# stream from the SSD with O_DIRECT overlapped with compute, and --stats shows the IO per
# token and the plan's prediction beside the measurement.
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
dir=${TIERLLM_DEMO_DIR:-$HOME/.cache/tierllm}
mkdir -p "$dir"
model=$dir/demo-tinyllama-1.1b-q8_0.gguf
echo "== a synthetic TinyLlama-1.1B-shape model in Q8_0 (random weights: the text is noise)"
[ -f "$model" ] || $bin synth --preset tinyllama-1.1b --type q8_0 -o "$model"
$bin info -m "$model" | grep -E "weights|layers|embedding"
echo "== streamed under --mem-budget 400M (the model is ~2.9x larger than the budget), --policy auto"
$bin run -m "$model" -p "The meaning of life is" -n 12 --temp 0.7 --seed 1 \
    --mem-budget 400M --stats
