#!/usr/bin/env bash
# neurons.sh [REPS] [TOKENS] [QUALITY_TOKENS] - LLM in a Flash on a ReLU model (bench, not a
# test; issue "LLM in a Flash, the missing half"): a ReLU-fied Llama-2-7B shape, Q8_0,
# synthetic (`synth --act relu --ffn-sparsity 0.95`: 95% of the FFN's neurons zero per token,
# which ones depending on the input), and its flash-layout conversion (`convert --layout
# flash`: the FFN stored by neuron - gate row, up row, down column in one run - with a rank-128
# predictor fitted on tests/data/calib_stories.txt), batch 1 at --mem-budget 4G:
#   D   the row-major file, dense: whole layers streamed through the ring
#   N   the neuron file with the planner's neuron window: the predicted neurons the window
#       does not hold are read, at their layer's turn
#   N0  the neuron file without a window: every predicted neuron read
# Each `run -n TOKENS` (default 32) in turn, REPS rounds (default 3), the disk's rate (dd,
# O_DIRECT, 1 MiB) before each round; medians of decode tok/s and MiB read per token, N's FFN
# line (neurons predicted, window hit rate measured and predicted). Then, once:
#   - FFN bytes per token: N's per-pass runs read against the dense FFN (every neuron run);
#   - recall: N with --measure-recall on the held-out story's opening (text the predictor
#     was not fitted on): the share of the active neurons' output mass predicted;
#   - greedy tokens: QUALITY_TOKENS (default 256) from D (at a 12G budget: every weight
#     resident, the same tokens as streamed, faster) and from N, compared position by
#     position.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
reps=${1:-3}; ntok=${2:-32}; qtok=${3:-256}
bin=build/tierllm
dir=${TIERLLM_BENCH_DIR:-/tmp/tierllm-bench}
mkdir -p "$dir"
m=$dir/llama2-7b-relu-q8_0.gguf
n=$dir/llama2-7b-relu-q8_0-neurons.gguf
[ -f "$m" ] || "$bin" synth --preset llama2-7b --type q8_0 --act relu --ffn-sparsity 0.95 \
    -o "$m" >/dev/null
if [ ! -f "$n" ]; then
    t0=$(date +%s.%N)
    "$bin" convert -m "$m" -o "$n" --calib tests/data/calib_stories.txt --layout flash \
        --sparsity 0 --uniform -c 128 --mem-budget 4G
    echo "convert --layout flash: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 240 tests/data/heldout_story.txt | tr '\n' ' ' >"$tmp/prompt.txt"
one() { # one NAME MODEL ARGS...: decode tok/s, median MiB per decode token
    local name=$1 model=$2; shift 2
    "$bin" run -m "$model" -f "$tmp/prompt.txt" -n "$ntok" --temp 0 --mem-budget 4G --stats \
        "$@" >/dev/null 2>"$tmp/$name.err" || { cat "$tmp/$name.err"; exit 1; }
    echo "$(decode_tps "$tmp/$name.err") $(token_mib "$tmp/$name.err")"
}
declare -a D N N0 DB NB N0B DISK
for r in $(seq "$reps"); do
    DISK+=("$(disk_gbps "$m")")
    read -r t b <<<"$(one d "$m")"; D+=("$t"); DB+=("$b")
    read -r t b <<<"$(one n "$n")"; N+=("$t"); NB+=("$b")
    read -r t b <<<"$(one n0 "$n" --neuron-window 0)"; N0+=("$t"); N0B+=("$b")
    echo "round $r: disk ${DISK[-1]} GB/s | D ${D[-1]} tok/s ${DB[-1]} MiB/token | N ${N[-1]}" \
         "tok/s ${NB[-1]} MiB/token | N0 ${N0[-1]} tok/s ${N0B[-1]} MiB/token"
    grep "FFN by neuron" "$tmp/n.err" | sed 's/^/  N: /' || true
    grep "flash layout" "$tmp/n.err" | sed 's/^/  N: /' || true
    grep "flash layout" "$tmp/n0.err" | sed 's/^/  N0: /' || true
    grep "^policy\|weights resident" "$tmp/n.err" | head -2 | sed 's/^/  N: /' || true
    grep -A12 "^\[plan\] decode" "$tmp/n.err" | grep "  wall\|weight bytes" |
        sed "s/^/  N decode: /" || true
done
# the dense FFN's bytes per token: every layer's neuron runs (32 layers x 11008 neurons x
# 3 x 4096 weights, Q8_0: 34 bytes per 32)
dense_ffn=$(awk 'BEGIN {printf "%.1f", 32 * 11008 * 3 * 4096 / 32 * 34 / 1048576}')
echo "dense FFN per token: $dense_ffn MiB (32 layers x 11008 neurons x 3 x 4096 Q8_0 weights)"
# recall on held-out text
"$bin" run -m "$n" -f "$tmp/prompt.txt" -n 8 --temp 0 --mem-budget 4G --stats \
    --measure-recall >/dev/null 2>"$tmp/recall.err" || { cat "$tmp/recall.err"; exit 1; }
grep "FFN by neuron" "$tmp/recall.err" | sed 's/^/recall run: /'
# greedy tokens, dense against neurons
"$bin" run -m "$m" -f "$tmp/prompt.txt" -n "$qtok" --temp 0 --mem-budget 12G \
    --ids "$tmp/d.ids" >/dev/null 2>"$tmp/dq.err" || { cat "$tmp/dq.err"; exit 1; }
"$bin" run -m "$n" -f "$tmp/prompt.txt" -n "$qtok" --temp 0 --mem-budget 4G --stats \
    --ids "$tmp/n.ids" >/dev/null 2>"$tmp/nq.err" || { cat "$tmp/nq.err"; exit 1; }
grep "decode:" "$tmp/nq.err" | sed 's/^/quality run N: /'
python3 - "${DISK[*]}" "${D[*]}" "${N[*]}" "${N0[*]}" "${DB[*]}" "${NB[*]}" "${N0B[*]}" \
    "$dense_ffn" "$tmp/d.ids" "$tmp/n.ids" <<'P'
import statistics, sys
med = lambda s: statistics.median(map(float, s.split()))
disk, d, n, n0, db, nb, n0b = (med(s) for s in sys.argv[1:8])
dense_ffn = float(sys.argv[8])
a = open(sys.argv[9]).read().split(); b = open(sys.argv[10]).read().split()
same = sum(x == y for x, y in zip(a, b)); first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print("medians: disk %.2f GB/s | D %.3f tok/s %.0f MiB/token | N %.3f tok/s %.0f MiB/token | N0 %.3f tok/s %.0f MiB/token" % (disk, d, db, n, nb, n0, n0b))
print("N/D tok/s %.2fx (target >= 3x) | N0/D %.2fx | bytes read per token (all of them FFN runs when"
      " attention is resident: see the policy lines) %.1f%% of the dense FFN's (target <= 10%%) |"
      " N0 %.1f%%" % (n / d, n0 / d, 100 * nb / dense_ffn, 100 * n0b / dense_ffn))
print("greedy tokens: %d of %d equal (%.1f%%, target >= 95%%), first difference at %d" % (same, len(a), 100.0 * same / max(1, len(a)), first))
P
