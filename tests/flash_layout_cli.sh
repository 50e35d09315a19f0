#!/usr/bin/env bash
# flash_layout_cli.sh TIERLLM MODELS_DIR - the flash layout (model/flash_layout.h,
# exec/flash_write.h): `convert --layout flash` leaves its input byte-identical and `info`
# describes the site tensors; with the scalar reference kernels the F32 and F16 files at
# sparsity 0 give the original's logits bit for bit (the runs hold the same weights and
# the column product sums them in the row product's order); with the fast kernels they
# agree to float rounding; the NumPy reference reading the site tensors agrees at 0 and
# 0.5; the Q8_0 file, re-quantized along its runs, stays within +0.5% perplexity on the
# held-out story; streamed sites (a small budget) read only their needed runs and give the
# resident logits bit for bit, at every read-through gap; a file converted twice, a layout
# version this engine does not know and KV recompute are refused with a message.
set -u
bin=$1; models=$2
here=$(dirname "$0")
py=/usr/bin/python3
. "$here/cli_lib.sh"
calib=$here/data/calib_stories.txt
heldout=$here/data/heldout_story.txt
f32=$models/stories260K.gguf
q8=$models/tinyllamas-stories-260k-q8_0.gguf
sum_before=$(sha256sum "$f32" "$q8")
tokens=1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337
same_logits() { # same_logits A B: the two logit files, bit for bit
    cmp -s "$1" "$2"
}
close_logits() { # close_logits A B TOL: max |a-b| / max |a| per row at most TOL
    $py - "$1" "$2" "$3" <<'P'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); b = np.fromfile(sys.argv[2], dtype=np.float32)
if a.size != b.size or a.size == 0: sys.exit("sizes %d %d" % (a.size, b.size))
a = a.reshape(-1, 512); b = b.reshape(-1, 512)
err = float(np.max(np.max(np.abs(a - b), axis=1) / np.max(np.abs(a), axis=1)))
print("max rel err %.3g" % err)
sys.exit(0 if np.all(np.isfinite(b)) and err <= float(sys.argv[3]) else 1)
P
}

for pair in "f32:$f32" "q8:$q8"; do
    name=${pair%%:*}; src=${pair#*:}
    expect_rc 0 "convert $name rows" "$bin" convert -m "$src" -o "$tmp/${name}r.gguf" \
        --calib "$calib" --sparsity 0.5 --uniform
    expect_rc 0 "convert $name flash" "$bin" convert -m "$src" -o "$tmp/${name}f.gguf" \
        --calib "$calib" --sparsity 0.5 --uniform --layout flash
    grep -q "(flash layout)" "$tmp/err" || fail "convert $name flash: $(cat "$tmp/err")"
done
[ "$(sha256sum "$f32" "$q8")" = "$sum_before" ] || fail "convert modified its input"
expect_rc 0 "info on a flash file" "$bin" info -m "$tmp/f32f.gguf"
grep -q "^layout: *flash v1" "$tmp/out" && grep -q "attn_qkv.cols .*64 runs of 128" "$tmp/out" &&
    grep -q "ffn_down.cols .*172 runs of 64" "$tmp/out" || fail "info: $(cat "$tmp/out")"
expect_rc 0 "info on a flash q8_0 file" "$bin" info -m "$tmp/q8f.gguf"
# gate/up runs of 2 x 172 are no whole number of Q8_0 blocks: F32; the others Q8_0
grep -q "attn_qkv.cols *Q8_0" "$tmp/out" && grep -q "ffn_gate_up.cols *F32" "$tmp/out" ||
    fail "info q8_0: $(cat "$tmp/out")"

# F16: a synthetic model, converted exactly (F16 -> F32 -> F16 along the run is the identity)
"$bin" synth --embd 128 --ff 320 --layers 2 --heads 4 --kv-heads 2 --ctx 256 --type f16 \
    -o "$tmp/f16.gguf" >/dev/null 2>&1 || fail "synth f16"
expect_rc 0 "convert f16 flash" "$bin" convert -m "$tmp/f16.gguf" -o "$tmp/f16f.gguf" \
    --calib "$calib" --sparsity 0.5 --uniform --layout flash -c 128
syn_tokens=1,40,7,26,37,43,38,28,26,37,29,31,42,39,31,42,33,40,39,26,33

# sparsity 0, scalar reference kernels: bit for bit the original's logits
for pair in "$f32:$tmp/f32f.gguf:$tokens" "$tmp/f16.gguf:$tmp/f16f.gguf:$syn_tokens"; do
    IFS=: read -r orig flash toks <<<"$pair"
    "$bin" logits -m "$orig" --tokens "$toks" -o "$tmp/a.f32" --reference 2>/dev/null &&
        "$bin" logits -m "$flash" --tokens "$toks" -o "$tmp/b.f32" --reference --sparsity 0 \
            2>/dev/null || fail "reference logits of $flash"
    same_logits "$tmp/a.f32" "$tmp/b.f32" || fail "$flash at sparsity 0 (reference) differs"
done
# fast kernels: to float rounding at 0; at 0.5 against the row-major file at 0.5
"$bin" logits -m "$f32" --tokens $tokens -o "$tmp/a.f32" 2>/dev/null &&
    "$bin" logits -m "$tmp/f32f.gguf" --tokens $tokens -o "$tmp/b.f32" --sparsity 0 2>/dev/null ||
    fail "fast logits"
close_logits "$tmp/a.f32" "$tmp/b.f32" 1e-5 || fail "flash f32 at 0 (fast) off"
"$bin" logits -m "$tmp/f32r.gguf" --tokens $tokens -o "$tmp/a.f32" --sparsity 0.5 2>/dev/null &&
    "$bin" logits -m "$tmp/f32f.gguf" --tokens $tokens -o "$tmp/b.f32" --sparsity 0.5 2>/dev/null ||
    fail "logits at 0.5"
close_logits "$tmp/a.f32" "$tmp/b.f32" 1e-4 || fail "flash f32 at 0.5 off the rows file at 0.5"

# the NumPy reference rebuilding each matrix from its runs
for s in 0 0.5; do
    $py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/f32f.gguf" \
        --tokens $tokens --tol 1e-4 --sparsity $s || fail "flash f32 at $s against NumPy"
done

# Q8_0 re-quantized along the runs: held-out perplexity within +0.5% of the original's
pr=$("$bin" perplexity -m "$q8" -f "$heldout" 2>/dev/null | sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')
pf=$("$bin" perplexity -m "$tmp/q8f.gguf" -f "$heldout" --sparsity 0 2>/dev/null |
     sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')
echo "q8_0 held-out perplexity: rows $pr, flash $pf"
$py -c "import sys; sys.exit(0 if 0 < $pf <= $pr * 1.005 else 1)" ||
    fail "flash q8_0 perplexity $pf against $pr (over +0.5%)"

# streamed sites: a budget that keeps few weights resident reads only the needed runs
# and computes the resident logits bit for bit, whatever gap is read through
# (runs of 3 and 1 KiB: at half the channels, reads with no gap read through save bytes)
"$bin" synth --embd 1024 --ff 1024 --layers 2 --heads 8 --kv-heads 8 --ctx 512 --vocab 512 --type q8_0 \
    -o "$tmp/syn.gguf" >/dev/null 2>&1 || fail "synth q8_0"
expect_rc 0 "convert synthetic flash" "$bin" convert -m "$tmp/syn.gguf" -o "$tmp/synf.gguf" \
    --calib "$calib" --sparsity 0.5 --uniform --layout flash -c 128
"$bin" logits -m "$tmp/synf.gguf" --tokens $syn_tokens -o "$tmp/res.f32" --sparsity 0.5 \
    2>/dev/null || fail "resident flash logits"
for gap in 0 4K 64K; do
    "$bin" logits -m "$tmp/synf.gguf" --tokens $syn_tokens -o "$tmp/str.f32" --sparsity 0.5 \
            --mem-budget 8M --flash-gap $gap 2>"$tmp/err" ||
        fail "streamed flash logits: $(cat "$tmp/err")"
    same_logits "$tmp/res.f32" "$tmp/str.f32" || fail "streamed (gap $gap) differs from resident"
done
expect_rc 0 "run streamed flash" "$bin" run -m "$tmp/synf.gguf" -p "hello there" -n 6 \
    --sparsity 0.5 --mem-budget 8M --flash-gap 0 --stats --temp 0
line=$(grep "flash layout, per forward pass" "$tmp/err") || fail "no flash stats: $(cat "$tmp/err")"
echo "$line"
read -r need got dense <<<"$(echo "$line" | sed -n 's/.*runs needed \([0-9.]*\) MiB, read \([0-9.]*\) MiB ([0-9]*% of dense \([0-9.]*\) MiB).*/\1 \2 \3/p')"
$py -c "import sys; sys.exit(0 if 0 < $need <= $got < $dense else 1)" ||
    fail "streamed at 0.5: needed $need, read $got, dense $dense MiB"
expect_rc 0 "run streamed flash dense" "$bin" run -m "$tmp/synf.gguf" -p "hello there" -n 6 \
    --sparsity 0 --mem-budget 8M --flash-gap 0 --stats --temp 0
grep -q "flash layout.*read [0-9.]* MiB (10[0-9]% of dense" "$tmp/err" ||
    fail "dense flash run did not read every run: $(grep flash "$tmp/err")"

# a ReLU-fied Llama (synth --act relu): the engine agrees with NumPy, whose count of exact
# zeros into ffn_down is near the share asked for; its flash file (stored by neuron, with a
# predictor: tests/neuron_cli.sh) streams
"$bin" synth --embd 256 --ff 1024 --layers 4 --heads 4 --kv-heads 2 --ctx 256 --vocab 512 \
    --act relu --ffn-sparsity 0.9 -o "$tmp/relu.gguf" >/dev/null 2>&1 || fail "synth relu"
expect_rc 0 "info relu" "$bin" info -m "$tmp/relu.gguf"
grep -q "^feed-forward: *1024 (ReLU-fied" "$tmp/out" || fail "info relu: $(cat "$tmp/out")"
$py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/relu.gguf" \
    --tokens $syn_tokens --tol 1e-4 || fail "relu model against NumPy"
zeros=$($py "$here/ref/llama_ref.py" "$tmp/relu.gguf" --tokens $syn_tokens --out "$tmp/r.f32" 2>&1 |
        sed -n 's/^ffn_mid zeros \([0-9.]*\)/\1/p')
echo "relu model: ffn_mid zeros $zeros (asked 0.9)"
$py -c "import sys; sys.exit(0 if 0.86 <= float('${zeros:-0}') <= 0.94 else 1)" ||
    fail "relu model: share of zeros ${zeros:-none}, asked 0.9"
expect_rc 0 "convert relu flash" "$bin" convert -m "$tmp/relu.gguf" -o "$tmp/reluf.gguf" \
    --calib "$calib" --sparsity 0 --uniform --layout flash -c 128
expect_rc 0 "run relu flash streamed" "$bin" run -m "$tmp/reluf.gguf" -p "hello there" -n 6 \
    --sparsity 0 --mem-budget 8M --flash-gap 0 --stats --temp 0
grep "flash layout" "$tmp/err" && grep "FFN by neuron" "$tmp/err" ||
    fail "relu flash: no flash or neuron stats: $(cat "$tmp/err")"
$py - "$tmp/relu.gguf" "$tmp/relx.gguf" <<'P' || fail "write an unknown activation"
import sys
data = open(sys.argv[1], "rb").read()
at = data.index(b"tierllm.ffn_activation")
open(sys.argv[2], "wb").write(data[:at] + data[at:].replace(b"relu", b"relx", 1))
P
expect_err "an unknown activation" 'tierllm.ffn_activation must be "silu" or "relu"' \
    "$bin" run -m "$tmp/relx.gguf" -p hi -n 2

# refusals
expect_err "convert a flash file" "is already converted" \
    "$bin" convert -m "$tmp/f32f.gguf" -o "$tmp/again.gguf" --calib "$calib"
$py - "$tmp/f32f.gguf" "$tmp/v2.gguf" <<'P' || fail "write a version-3 file"
import sys, struct
data = bytearray(open(sys.argv[1], "rb").read())
key = b"tierllm.layout.version"
at = data.index(key) + len(key)
assert struct.unpack_from("<I", data, at)[0] == 4          # GGUF uint32
struct.pack_into("<I", data, at + 4, 3)
open(sys.argv[2], "wb").write(data)
P
expect_err "layout version 3" "flash layout version 3; this engine reads versions 1 to 2" \
    "$bin" run -m "$tmp/v2.gguf" -p hi -n 2
$py - "$tmp/f32f.gguf" "$tmp" <<'P' || fail "write hostile flash files"
import sys
data = open(sys.argv[1], "rb").read()
def put(name, old, new):
    assert data.count(old) >= 1, old
    open(sys.argv[2] + "/" + name, "wb").write(data.replace(old, new, 1))
put("missing.gguf", b"blk.0.ffn_down.cols", b"blk.0.ffn_down.colz")  # the tensor renamed away
put("badkey.gguf", b"flash", b"flasH")                              # the layout key's value
P
expect_err "a site tensor missing" "missing tensor 'blk.0.ffn_down.cols'" \
    "$bin" run -m "$tmp/missing.gguf" -p hi -n 2
expect_err "an unknown layout" 'tierllm.layout is not "flash"' \
    "$bin" run -m "$tmp/badkey.gguf" -p hi -n 2
expect_err "kv recompute" "flash layout" \
    "$bin" run -m "$tmp/f32f.gguf" -p hi -n 2 --kv-window 32 --kv-recompute 2
[ -z "$(ls "$tmp" | grep -E 'again\.gguf')" ] || fail "a refused convert left a file"

[ "$fails" -eq 0 ] && echo "flash_layout_cli: all passed" || echo "flash_layout_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
