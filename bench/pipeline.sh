#!/usr/bin/env bash
# pipeline.sh [REPS] - batch throughput of a 2-rank pipeline against one process on the
# same cores (bench, not a test; issue "Beyond one machine"). TinyLlama-1.1B shape Q8_0
# (synthetic, cached in /tmp/tierllm-bench), 64 prompts of ~150 tokens, 32 generated, the
# same batch knobs everywhere (32 sequences per block, 16-bit KV):
#   A  one process, 2 threads, --mem-budget 110% of the model (it fits in one place)
#   B  mpirun -np 2, 1 thread per rank, --mem-budget 55% per rank (together it fits)
#   C  one process, 2 threads, 55% (one machine's share of the memory)
# Runs A, B, C in turn REPS times (default 3) and prints each setting's median generated
# tok/s, B/A and B/C, and B's bubble and its prediction against the measurement (rank 0's
# [plan] lines). Then `run` latency, 64 tokens after a 100-word prompt:
#   D  mpirun -np 2, 1 thread per rank, 55% per rank
#   E  one process, 2 threads, 55%
# with the medians of decode tok/s and time to the first token.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
bin=build/tierllm
dir=${TIERLLM_BENCH_DIR:-/tmp/tierllm-bench}
mkdir -p "$dir"
m=$dir/tinyllama-1.1b-q8_0.gguf
[ -f "$m" ] || "$bin" synth --preset tinyllama-1.1b --type q8_0 -o "$m" >/dev/null
size=$(stat -c %s "$m")
b110=$((size * 110 / 100)); b55=$((size * 55 / 100))
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/p.jsonl" <<'P'
import json, random, sys
random.seed(7)
words = "the a little dog cat ran sun sky big red ball park tree bird sang happy day".split()
with open(sys.argv[1], "w") as f:
    for i in range(64):
        f.write(json.dumps({"prompt": " ".join(random.choice(words) for _ in range(100)),
                            "n_predict": 32}) + "\n")
P
knobs=(--temp 0 --gbs 8 --num-gb 4 --prefill-rows 128 -c 192 --kv-bits 16)
rate() { grep '^batch: [0-9]' "$1" | sed -n 's/.* \([0-9.]*\) generated tok\/s.*/\1/p' | tail -1; }
declare -a A B C
for r in $(seq "$reps"); do
    "$bin" batch -m "$m" -i "$tmp/p.jsonl" -o "$tmp/a.jsonl" --overwrite "${knobs[@]}" -t 2 \
        --mem-budget $b110 2>"$tmp/a.err"
    A+=("$(rate "$tmp/a.err")")
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" batch -m "$m" -i "$tmp/p.jsonl" \
        -o "$tmp/b.jsonl" --overwrite "${knobs[@]}" -t 1 --mem-budget $b55 --pipeline --stats \
        2>"$tmp/b.err"
    B+=("$(rate "$tmp/b.err")")
    "$bin" batch -m "$m" -i "$tmp/p.jsonl" -o "$tmp/c.jsonl" --overwrite "${knobs[@]}" -t 2 \
        --mem-budget $b55 2>"$tmp/c.err"
    C+=("$(rate "$tmp/c.err")")
    echo "round $r: A ${A[-1]}  B ${B[-1]}  C ${C[-1]} generated tok/s"
    grep -o "\[stats\] rank [0-9].*" "$tmp/b.err" || true
    grep "^\[plan\]" "$tmp/b.err" || true
done
python3 - "${A[*]}" "${B[*]}" "${C[*]}" <<'P'
import statistics, sys
a, b, c = (statistics.median(map(float, s.split())) for s in sys.argv[1:4])
print(f"median generated tok/s: A (1 process, 2 threads, 110%) {a:.2f} | B (2 ranks x 1 "
      f"thread, 55% each) {b:.2f} | C (1 process, 2 threads, 55%) {c:.2f}")
print(f"B/A {b / a:.3f} (target >= 0.85) | B/C {b / c:.3f}")
P
python3 - "$tmp/p.jsonl" > "$tmp/prompt.txt" <<'P'
import json, sys
print(json.loads(open(sys.argv[1]).readline())["prompt"], end="")
P
declare -a DD DP ED EP
dec() { sed -n 's/.*decode: [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$1"; }
pre() { sed -n 's/^prefill: [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$1"; }
for r in $(seq "$reps"); do
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" run -m "$m" -f "$tmp/prompt.txt" \
        -n 64 --temp 0 -c 512 -t 1 --mem-budget $b55 --pipeline >"$tmp/d.txt" 2>"$tmp/d.err"
    DD+=("$(dec "$tmp/d.err")"); DP+=("$(pre "$tmp/d.err")")
    "$bin" run -m "$m" -f "$tmp/prompt.txt" -n 64 --temp 0 -c 512 -t 2 --mem-budget $b55 \
        >"$tmp/e.txt" 2>"$tmp/e.err"
    ED+=("$(dec "$tmp/e.err")"); EP+=("$(pre "$tmp/e.err")")
    echo "run round $r: D decode ${DD[-1]} tok/s, prefill ${DP[-1]} s | E decode ${ED[-1]} tok/s, prefill ${EP[-1]} s"
done
python3 - "${DD[*]}" "${DP[*]}" "${ED[*]}" "${EP[*]}" <<'P'
import statistics, sys
dd, dp, ed, ep = (statistics.median(map(float, s.split())) for s in sys.argv[1:5])
print(f"run, median: D (2 ranks x 1 thread, 55% each) decode {dd:.2f} tok/s, prefill {dp:.2f} s | "
      f"E (1 process, 2 threads, 55%) decode {ed:.2f} tok/s, prefill {ep:.2f} s | D/E decode {dd / ed:.3f}")
P
cmp -s "$tmp/d.txt" "$tmp/e.txt" && echo "run text: the pipeline's equals one process's" || echo "run text: DIFFERS"
cmp -s <(python3 -c "import json,sys; [print(json.loads(l)['tokens']) for l in open(sys.argv[1])]" "$tmp/a.jsonl") \
       <(python3 -c "import json,sys; [print(json.loads(l)['tokens']) for l in open(sys.argv[1])]" "$tmp/b.jsonl") &&
    echo "tokens: the pipeline's equal one process's" || echo "tokens: DIFFER"
