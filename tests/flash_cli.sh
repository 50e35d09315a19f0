#!/usr/bin/env bash
# flash_cli.sh TIERLLM MODELS_DIR - activation sparsity (model/sparsity.h, exec/convert.h):
# `convert --calib` writes a new file and leaves its input byte-identical; at sparsity 0 the
# converted F32 and Q8_0 stories260K give the original's logits bit for bit; at 0.5 the
# engine agrees with the NumPy reference reading the same thresholds and allocation; the
# default chosen from the curve is not dense, and the held-out story's perplexity there is
# within 3% of dense; perplexity rises with sparsity; the weight bytes skipped track the
# sparsity asked for; convert runs with its weights streamed; bad input is refused with a
# message: an unknown architecture, a folder, an already-converted file, too little
# calibration text, the input as output, a full disk (the file size limit), a sparsity of 1.
set -u
bin=$1; models=$2
here=$(dirname "$0")
py=/usr/bin/python3
. "$here/cli_lib.sh"
need_profile "$bin" # the streamed runs below plan at budgets too small to measure one
calib=$here/data/calib_stories.txt
heldout=$here/data/heldout_story.txt
f32=$models/stories260K.gguf
q8=$models/tinyllamas-stories-260k-q8_0.gguf
sum_before=$(sha256sum "$f32" "$q8")

# convert: the default from the quality curve; every tensor copied
expect_rc 0 "convert f32" "$bin" convert -m "$f32" -o "$tmp/f32s.gguf" --calib "$calib"
cat "$tmp/err"
grep -q "^default sparsity 0\.\(0[1-9]\|[1-9][0-9]\) (from the curve)" "$tmp/err" ||
    fail "convert: no default chosen, or a dense one"
expect_rc 0 "convert q8_0, sparsity given" "$bin" convert -m "$q8" -o "$tmp/q8s.gguf" \
    --calib "$calib" --sparsity 0.5
grep -q "^default sparsity 0.50 (given)" "$tmp/err" || fail "convert q8_0: $(cat "$tmp/err")"
[ "$(sha256sum "$f32" "$q8")" = "$sum_before" ] || fail "convert modified its input"
expect_rc 0 "info on a converted file" "$bin" info -m "$tmp/f32s.gguf"
grep -q "^sparsity: .*calibrated on [0-9]* tokens" "$tmp/out" || fail "info: $(cat "$tmp/out")"

# sparsity 0: the original's logits, bit for bit (the tensors are the same bytes)
tokens=1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337
for pair in "$f32:$tmp/f32s.gguf" "$q8:$tmp/q8s.gguf"; do
    "$bin" logits -m "${pair%%:*}" --tokens $tokens -o "$tmp/a.f32" 2>/dev/null &&
        "$bin" logits -m "${pair#*:}" --tokens $tokens -o "$tmp/b.f32" --sparsity 0 2>/dev/null ||
        fail "logits of ${pair#*:}"
    cmp -s "$tmp/a.f32" "$tmp/b.f32" || fail "sparsity 0 changed the logits of ${pair#*:}"
    "$bin" logits -m "${pair#*:}" --tokens $tokens -o "$tmp/c.f32" --sparsity 0.5 2>/dev/null ||
        fail "logits at 0.5 of ${pair#*:}"
    cmp -s "$tmp/a.f32" "$tmp/c.f32" && fail "sparsity 0.5 did not change the logits of ${pair#*:}"
done

# the NumPy reference, thresholding the same inputs by the same table
$py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/f32s.gguf" --tokens $tokens \
    --tol 1e-4 --sparsity 0.5 || fail "f32 at sparsity 0.5 against NumPy"
# (Q8_0: the reference emulates the activation rounding and must agree as for any Q8_0
# model; its second check, against exact activations, is not made: an activation that
# rounding moves across a threshold is zeroed in one and kept in the other, which moves a
# model this small far more than rounding does, so a bound there would not test rounding)
$py "$here/ref/compare_logits.py" --tierllm "$bin" --model "$tmp/q8s.gguf" --tokens $tokens \
    --tol 1e-4 --sparsity 0.4 --no-act-check || fail "q8_0 at sparsity 0.4 against NumPy"

# the quality curve on the held-out story: rising with sparsity, the default within 3%
prev=0
for s in 0 0.1 0.25 0.4 0.5 0.6 0.7 default; do
    args=(--sparsity "$s"); [ "$s" = default ] && args=()
    out=$("$bin" perplexity -m "$tmp/f32s.gguf" -f "$heldout" "${args[@]}" 2>"$tmp/err") ||
        { fail "perplexity at $s: $(cat "$tmp/err")"; continue; }
    echo "sparsity $s: $out"
    ppl=$(echo "$out" | sed -n 's/^perplexity \([0-9.]*\) .*/\1/p')
    zeroed=$(echo "$out" | sed -n 's/.*weights skipped \([0-9.]*\)%.*/\1/p')
    case $s in
    0) dense=$ppl; [ "$zeroed" = 0.0 ] || fail "dense run zeroed $zeroed%" ;;
    default) $py -c "import sys; sys.exit(0 if $ppl <= $dense * 1.03 else 1)" ||
                 fail "default sparsity: perplexity $ppl, dense $dense (over +3%)" ;;
    *) $py -c "import sys; sys.exit(0 if $ppl >= $prev * 0.995 and abs($zeroed - 100 * $s) <= 8 else 1)" ||
           fail "sparsity $s: perplexity $ppl after $prev, zeroed $zeroed%" ;;
    esac
    [ "$s" = default ] || prev=$ppl
done
"$bin" perplexity -m "$f32" -f "$heldout" --sparsity 0.5 >/dev/null 2>"$tmp/err" &&
    fail "sparsity on an unconverted file was accepted"
grep -q "needs thresholds calibrated for this model" "$tmp/err" || fail "unconverted: $(cat "$tmp/err")"
: >"$tmp/one.txt" # BOS alone: nothing to score
expect_err "perplexity of an empty text" "perplexity needs at least 2 tokens" \
    "$bin" perplexity -m "$tmp/f32s.gguf" -f "$tmp/one.txt" --sparsity 0
expect_rc 2 "sparsity 1" "$bin" run -m "$tmp/f32s.gguf" -p hi -n 2 --sparsity 1
grep -q "expects a sparsity in \[0, 1)" "$tmp/err" || fail "sparsity 1: $(cat "$tmp/err")"
# run uses the file's default; the text is the model's own at that sparsity
expect_rc 0 "run a converted file" "$bin" run -m "$tmp/f32s.gguf" -p "Once upon a time" -n 24 --temp 0

# weights streamed while convert calibrates and searches: a synthetic Q8_0 model (7.2 MiB)
# at a budget that leaves its weights 2-3 MiB, and the converted file run streamed
"$bin" synth --embd 256 --ff 768 --layers 8 --heads 4 --kv-heads 4 --ctx 512 --type q8_0 \
    -o "$tmp/syn.gguf" >/dev/null 2>&1 || fail "synth"
expect_rc 0 "convert with streamed weights" "$bin" convert -m "$tmp/syn.gguf" -o "$tmp/syns.gguf" \
    --calib "$calib" --mem-budget 10M -c 128 --alloc-tokens 64
expect_rc 0 "run a converted file streamed" "$bin" run -m "$tmp/syns.gguf" -p hello -n 4 \
    --mem-budget 7M --stats
grep -q "streamed [1-9]" "$tmp/err" || fail "the converted file did not stream: $(cat "$tmp/err")"

# refusals, each naming what is wrong; nothing left behind
expect_err "already converted" "is already converted" \
    "$bin" convert -m "$tmp/f32s.gguf" -o "$tmp/again.gguf" --calib "$calib"
head -c 600 "$calib" >"$tmp/short.txt"
expect_err "too little text" "the calibration text is [0-9]* tokens; at least 512 are needed" \
    "$bin" convert -m "$f32" -o "$tmp/x.gguf" --calib "$tmp/short.txt"
cp "$f32" "$tmp/same.gguf"
sum_same=$(sha256sum <"$tmp/same.gguf")
expect_err "output is the input" "is the input file" \
    "$bin" convert -m "$tmp/same.gguf" -o "$tmp/same.gguf" --calib "$calib"
[ "$(sha256sum <"$tmp/same.gguf")" = "$sum_same" ] || fail "convert onto its input changed it"
$py - "$f32" "$tmp/other.gguf" <<'P' || fail "write an unknown-architecture file"
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(data.replace(b"llama", b"gptxx"))
P
expect_err "unknown architecture" "architecture 'gptxx' is not supported" \
    "$bin" convert -m "$tmp/other.gguf" -o "$tmp/x.gguf" --calib "$calib"
expect_err "a folder" "convert reads GGUF files" \
    "$bin" convert -m "$models/hf/fake-gpt2-random" -o "$tmp/x.gguf" --calib "$calib"
(trap '' XFSZ; ulimit -f 256; exec "$bin" convert -m "$f32" -o "$tmp/full.gguf" --calib "$calib" \
    --sparsity 0.4) >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "^error: .*full.gguf" "$tmp/err" ||
    fail "a write past the file size limit: exit $rc, $(cat "$tmp/err")"
[ -z "$(ls "$tmp" | grep -E 'x\.gguf|again\.gguf|full\.gguf')" ] ||
    fail "a refused convert left a file: $(ls "$tmp")"
[ -z "$(ls -A "$tmp" | grep -E '\.tmp-')" ] || fail "temporary files left: $(ls -A "$tmp")"

[ "$fails" -eq 0 ] && echo "flash_cli: all passed" || echo "flash_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
