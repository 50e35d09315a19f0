#!/usr/bin/env bash
# neuron_cli.sh TIERLLM MODELS_DIR - a ReLU FFN in the flash layout, stored by neuron with a
# predictor of the active neurons (model/neurons.h, exec/neuron_calib.h): `convert --layout
# flash` of a ReLU-fied Llama leaves its input as it was and `info` shows the neuron runs and
# the predictor; without the predictor the file gives the row-major file's logits bit for
# bit under the scalar reference kernels (the runs hold the same weights, the products sum
# in the same order); with it the NumPy reference (the same predictor, float64) agrees;
# streamed with a neuron window of every k tried, or none, the logits are the resident
# ones bit for bit and the memory peak stays within the budget; on held-out text the
# predictor holds at least 99% of the active neurons' output mass; a Q8_0 model agrees with
# NumPy; damaged predictor keys and a missing predictor tensor are refused with a message.
set -u
bin=$1; models=$2
here=$(dirname "$0")
py=/usr/bin/python3
. "$here/cli_lib.sh"
need_profile "$bin" # the streamed runs below plan at budgets too small to measure one
[ -d "$models" ] || fail "models folder $models missing"
calib=$here/data/calib_stories.txt
tokens=1,40,7,26,37,43,38,28,26,37,29,31,42,39,31,42,33,40,39,26,33
by_neuron() { # by_neuron NAME TYPE LAYERS: a ReLU-fied model $tmp/NAME.gguf, and by neuron
    "$bin" synth --embd 256 --ff 1024 --layers "$3" --heads 4 --kv-heads 2 --ctx 256 \
        --vocab 512 --act relu --ffn-sparsity 0.9 --type "$2" -o "$tmp/$1.gguf" >/dev/null 2>&1 ||
        fail "synth relu $2"
    expect_rc 0 "convert $2 by neuron" "$bin" convert -m "$tmp/$1.gguf" -o "$tmp/${1}n.gguf" \
        --calib "$calib" --sparsity 0 --uniform --layout flash -c 128
}

"$bin" synth --embd 256 --ff 1024 --layers 4 --heads 4 --kv-heads 2 --ctx 256 --vocab 512 \
    --act relu --ffn-sparsity 0.9 -o "$tmp/relu.gguf" >/dev/null 2>&1 || fail "synth relu"
sum_before=$(sha256sum "$tmp/relu.gguf")
expect_rc 0 "convert by neuron" "$bin" convert -m "$tmp/relu.gguf" -o "$tmp/n.gguf" \
    --calib "$calib" --sparsity 0 --uniform --layout flash -c 128
grep -q "^neuron predictors: rank 128" "$tmp/err" && grep -q "^neuron window" "$tmp/err" ||
    fail "convert report: $(cat "$tmp/err")"
[ "$(sha256sum "$tmp/relu.gguf")" = "$sum_before" ] || fail "convert modified its input"
expect_rc 0 "info" "$bin" info -m "$tmp/n.gguf"
grep -q "^layout: *flash v2: .*the FFN by neuron" "$tmp/out" &&
    grep -q "ffn_neurons *F32, 1024 runs of 768 (gate row + up row + down column" "$tmp/out" &&
    grep -q "predictor of the active neurons, rank 128" "$tmp/out" &&
    ! grep -q "ffn_down.cols" "$tmp/out" || fail "info: $(cat "$tmp/out")"

# the predictor off: every neuron through the runs, bit for bit with the rows
expect_rc 0 "logits rows" "$bin" logits -m "$tmp/relu.gguf" --tokens $tokens --reference \
    -o "$tmp/rows.f32"
expect_rc 0 "logits neurons, all" "$bin" logits -m "$tmp/n.gguf" --tokens $tokens --reference \
    --no-predictor -o "$tmp/all.f32"
cmp -s "$tmp/rows.f32" "$tmp/all.f32" || fail "every neuron by run differs from the rows"
# the predictor on: NumPy's float64 evaluation of the same file
for extra in "" "--no-predictor"; do
    $py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/n.gguf" \
        --tokens $tokens --tol 1e-4 ${extra:+--engine-arg=$extra} ||
        fail "neurons ${extra:-predicted} against NumPy"
done

# resident, then streamed with a window of each k (and none): the same logits bit for bit,
# the peak within the budget
expect_rc 0 "logits resident" "$bin" logits -m "$tmp/n.gguf" --tokens $tokens -o "$tmp/res.f32"
for k in 0 1 4 16 -1; do
    expect_rc 0 "logits window $k" "$bin" logits -m "$tmp/n.gguf" --tokens $tokens \
        --mem-budget 16M --neuron-window $k -o "$tmp/w.f32"
    cmp -s "$tmp/res.f32" "$tmp/w.f32" || fail "window $k: logits differ from resident"
    expect_rc 0 "run window $k" "$bin" run -m "$tmp/n.gguf" -p "hello there" -n 24 --temp 0 \
        --mem-budget 16M --neuron-window $k --stats
    line=$(grep '^\[stats\] budget' "$tmp/err")
    peak=$(echo "$line" | sed -n 's/.*budget \([0-9.]*\) MiB (peak \([0-9.]*\) MiB).*/\2/p')
    $py -c "import sys; sys.exit(0 if 0 < float('${peak:-0}') <= 16.0 else 1)" ||
        fail "window $k: peak ${peak:-none} MiB over the 16 MiB budget"
    stats=$(grep '^\[stats\] FFN by neuron' "$tmp/err")
    case $k in
        0) echo "$stats" | grep -q "window" && fail "window 0 has a window: $stats" ;;
        -1) echo "$stats" | grep -q "window k=[0-9]*, [0-9]* slots" ||
                fail "the planner chose no window at 16 MiB: $stats" ;;
        *) echo "$stats" | grep -q "window k=$k, [0-9]* slots per layer: hit rate [1-9]" ||
               fail "window $k: $stats" ;;
    esac
    echo "window $k: $stats (peak $peak MiB)"
done

# recall on text the predictor was not fitted on (the held-out story's opening)
head -c 350 "$here/data/heldout_story.txt" >"$tmp/heldout.txt"
expect_rc 0 "measure recall" "$bin" run -m "$tmp/n.gguf" -f "$tmp/heldout.txt" -n 8 \
    --temp 0 --stats --measure-recall
recall=$(sed -n 's/.*output mass \([0-9.]*\)% (calibration.*/\1/p' "$tmp/err")
echo "held-out recall of the active neurons' output mass: ${recall:-none}%"
$py -c "import sys; sys.exit(0 if float('${recall:-0}') >= 99.0 else 1)" ||
    fail "held-out recall ${recall:-none}% under 99%"

# Q8_0: gate/up rows and down columns re-quantized along the runs, NumPy reads the same
by_neuron q8 q8_0 2
$py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/q8n.gguf" --tokens $tokens ||
    fail "q8_0 neurons against NumPy"

# a K-quant mix gives layers neuron runs of different types (Q6_K down on some): no window
# (its slots are of one size), the streamed logits still the resident ones
by_neuron mix q4_k_m 4
expect_rc 0 "info q4_k_m" "$bin" info -m "$tmp/mixn.gguf" --tensors
[ "$(grep -c "ffn_neurons" "$tmp/out")" -ge 2 ] && grep "ffn_neurons" "$tmp/out" | grep -q Q6_K &&
    grep "ffn_neurons" "$tmp/out" | grep -q Q4_K || fail "q4_k_m neuron runs: $(grep ffn_neurons "$tmp/out")"
expect_rc 0 "logits q4_k_m resident" "$bin" logits -m "$tmp/mixn.gguf" --tokens $tokens \
    -o "$tmp/mres.f32"
expect_rc 0 "logits q4_k_m streamed" "$bin" logits -m "$tmp/mixn.gguf" --tokens $tokens \
    --mem-budget 5M --neuron-window 2 -o "$tmp/mstr.f32"
cmp -s "$tmp/mres.f32" "$tmp/mstr.f32" || fail "q4_k_m: streamed logits differ from resident"
expect_rc 0 "run q4_k_m streamed" "$bin" run -m "$tmp/mixn.gguf" -p "hello there" -n 8 \
    --temp 0 --mem-budget 5M --neuron-window 2 --stats
grep -q '^\[stats\] budget.*streamed [1-9]' "$tmp/err" ||
    fail "q4_k_m: nothing streamed at 5M: $(grep 'budget' "$tmp/err")"
grep '^\[stats\] FFN by neuron' "$tmp/err" | grep -q "window" &&
    fail "q4_k_m: a window over runs of different sizes: $(grep 'FFN by' "$tmp/err")"

# damaged files: a rank outside 1..n_embd, a missing predictor tensor
$py - "$tmp/n.gguf" "$tmp/rank0.gguf" "$tmp/nopred.gguf" "$tmp/v1.gguf" <<'P' ||
import struct, sys
data = open(sys.argv[1], "rb").read()
def with_u32(key, value):                       # after the key: its type, then the u32
    at = data.index(key) + len(key) + 4
    return data[:at] + struct.pack("<I", value) + data[at + 4:]
open(sys.argv[2], "wb").write(with_u32(b"tierllm.neurons.rank", 0))
open(sys.argv[3], "wb").write(data.replace(b"blk.1.ffn_pred_u", b"blk.1.ffn_pred_x", 1))
open(sys.argv[4], "wb").write(with_u32(b"tierllm.layout.version", 1))
P
    fail "write damaged files"
expect_err "rank 0" "tierllm.neurons.rank 0 is outside" "$bin" run -m "$tmp/rank0.gguf" -p hi -n 2
expect_err "no predictor tensor" "blk.1.ffn_pred_u" "$bin" run -m "$tmp/nopred.gguf" -p hi -n 2
expect_err "neuron keys in a version-1 file" "flash layout version 1 with the neuron" \
    "$bin" run -m "$tmp/v1.gguf" -p hi -n 2
# the predictors' calibration rows must fit the budget convert is given
expect_err "convert at a tiny budget" "budget" "$bin" convert -m "$tmp/relu.gguf" \
    -o "$tmp/tiny.gguf" --calib "$calib" --sparsity 0 --uniform --layout flash -c 128 \
    --mem-budget 1M
[ ! -e "$tmp/tiny.gguf" ] || fail "a refused convert left an output"

[ "$fails" -eq 0 ] && echo "neuron_cli: ok" || echo "neuron_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
