#!/usr/bin/env bash
# cli.sh TIERLLM MODELS_DIR - end-to-end checks of the tierllm command line.
set -u
bin=$1; models=$2
. "$(dirname "$0")/cli_lib.sh"
need_profile "$bin" # policy auto at budgets too small to measure one

golden=" Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, r"
for f in stories260K.gguf tinyllamas-stories-260k-q8_0.gguf; do
    out=$("$bin" run -m "$models/$f" -n 40 --temp 0 2>"$tmp/err")
    [ "$out" = "$golden" ] || fail "$f greedy output: '$out'"
    grep -q "prefill: .*tok/s.*decode: .*tok/s" "$tmp/err" || fail "$f: no timing line"
done

# sampling is reproducible for a seed and differs across seeds
m=$models/stories260K.gguf
a=$("$bin" run -m "$m" -p "Once upon a time" -n 30 --seed 5 2>/dev/null)
b=$("$bin" run -m "$m" -p "Once upon a time" -n 30 --seed 5 2>/dev/null)
c=$("$bin" run -m "$m" -p "Once upon a time" -n 30 --seed 6 2>/dev/null)
[ "$a" = "$b" ] || fail "same seed gave different text"
[ "$a" != "$c" ] || fail "different seeds gave the same text"

# usage errors exit 2, runtime errors exit 1 with a message
expect_rc 2 "no model" "$bin" run -p hi
expect_rc 2 "unknown flag" "$bin" run -m "$m" --bogus
expect_rc 2 "bad number" "$bin" run -m "$m" -n abc
expect_rc 2 "unknown command" "$bin" frobnicate
expect_rc 1 "missing file" "$bin" run -m "$tmp/nope.gguf" -n 1
grep -q "error: .*nope.gguf" "$tmp/err" || fail "missing file: no clear message"
long=$(printf 'once upon a time %.0s' $(seq 1 50))
expect_rc 1 "prompt longer than context" "$bin" run -m "$m" -c 16 -p "$long" -n 4
grep -q "context" "$tmp/err" || fail "long prompt: message does not mention the context"
expect_rc 1 "v1 gguf" "$bin" run -m "$models/tinyllamas-stories-260k-f32.gguf" -n 1
grep -q "version 1" "$tmp/err" || fail "v1: message does not name the version"

# synth writes a model that info describes and run generates from
expect_rc 0 "synth" "$bin" synth --embd 64 --ff 128 --layers 2 --heads 4 --kv-heads 2 \
    --vocab 400 --type q4_0 -o "$tmp/s.gguf"
expect_rc 0 "info" "$bin" info -m "$tmp/s.gguf"
grep -q "Q4_0" "$tmp/out" && grep -q "layers: *2" "$tmp/out" || fail "info output: $(cat "$tmp/out")"
grep -q "^tokenizer: *llama (SentencePiece" "$tmp/out" || fail "info tokenizer: $(cat "$tmp/out")"
# a K-quant mix: every type it holds, and a byte-level vocabulary's pre-tokenizer rules
expect_rc 0 "synth q4_k_m" "$bin" synth --vocab 300 --embd 256 --ff 512 --layers 2 --heads 8 \
    --type q4_k_m -o "$tmp/k.gguf"
expect_rc 0 "info q4_k_m" "$bin" info -m "$tmp/k.gguf"
grep -q "Q4_K [0-9.]* MiB  Q6_K" "$tmp/out" || fail "info q4_k_m types: $(cat "$tmp/out")"
# a sliding window with page selection: pages wholly before the window are never chosen,
# and selecting every page gives the exact tokens
expect_rc 0 "synth swa" "$bin" synth --vocab 300 --embd 128 --ff 320 --layers 2 --heads 8 \
    --kv-heads 2 --ctx 512 --seed 3 --swa 40 -o "$tmp/swa.gguf"
expect_rc 0 "swa exact" "$bin" run -m "$tmp/swa.gguf" -p "hello there" -n 200 --temp 0
cp "$tmp/out" "$tmp/swa_exact"
expect_rc 0 "swa select all" "$bin" run -m "$tmp/swa.gguf" -p "hello there" -n 200 --temp 0 \
    --kv-select 1.0
cmp -s "$tmp/out" "$tmp/swa_exact" || fail "sliding window: selecting every page changed the tokens"
# and with its KV in tiers on disk (pages before the window neither prefetched nor read)
expect_rc 0 "swa tiers" "$bin" run -m "$tmp/swa.gguf" -p "hello there" -n 200 --temp 0 \
    --kv-window 32 --kv-cache 0 --spill-dir "$tmp"
cmp -s "$tmp/out" "$tmp/swa_exact" || fail "sliding window: KV in tiers changed the tokens"
expect_rc 0 "info deepseek" "$bin" info -m "$models/tokenizers/ggml-vocab-deepseek-coder.gguf"
grep -q "pre-tokenizer 'deepseek-coder': deepseek-coder rules" "$tmp/out" ||
    fail "info pre-tokenizer: $(cat "$tmp/out")"
expect_rc 0 "run synthetic" "$bin" run -m "$tmp/s.gguf" -p "hello world" -n 8
expect_rc 1 "synth bad shape" "$bin" synth --embd 60 --type q8_0 -o "$tmp/bad.gguf"
[ ! -e "$tmp/bad.gguf" ] || fail "a failed synth left a file behind"

# run -f: a prompt file over the 16 MiB limit (/dev/zero never ends), a directory, a NUL
# byte and a read error are refused with a message saying which, and quickly. A 2 GiB
# address space limit keeps a regression that reads /dev/zero from taking the machine's
# memory (not in sanitizer builds, which cannot start under it: there only the timeout)
vlimit=2097152
(ulimit -v $vlimit; exec "$bin" run --help) >/dev/null 2>&1 || vlimit=unlimited
(ulimit -v $vlimit; exec timeout 20 "$bin" run -m "$m" -f /dev/zero -n 1) >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "^error: prompt file /dev/zero is larger than the limit of 16 MiB" \
    "$tmp/err" || fail "run -f /dev/zero: exit $rc: $(head -c 300 "$tmp/err")"
expect_rc 1 "run -f a directory" "$bin" run -m "$m" -f "$tmp" -n 1
grep -q "^error: .*prompt file $tmp: Is a directory" "$tmp/err" ||
    fail "run -f a directory: $(cat "$tmp/err")"
printf 'Once upon\0 a time' >"$tmp/nul.txt"
expect_rc 1 "run -f with a NUL byte" "$bin" run -m "$m" -f "$tmp/nul.txt" -n 1
grep -q "^error: prompt file .*nul.txt contains a NUL byte at offset 9" "$tmp/err" ||
    fail "run -f with a NUL byte: $(cat "$tmp/err")"
expect_rc 1 "run -f a read error" "$bin" run -m "$m" -f /proc/self/mem -n 1
grep -q "^error: cannot read prompt file /proc/self/mem: Input/output error" "$tmp/err" ||
    fail "run -f a read error: $(cat "$tmp/err")"
printf 'Once upon a time' >"$tmp/p.txt"
out=$("$bin" run -m "$m" -f "$tmp/p.txt" -n 8 --temp 0 2>"$tmp/err")
[ "${out#Once upon a time}" != "$out" ] || fail "run -f a prompt file: '$out' $(cat "$tmp/err")"

# KV tiers: the same greedy text whatever the placement; the spill directory stays empty
mkdir "$tmp/spill"
ref=$("$bin" run -m "$m" -p "Once upon a time" -n 200 --temp 0 -c 256 --kv-window -1 2>/dev/null)
for kv in "--kv-window 32 --kv-cache 0" "--kv-window 16 --kv-sinks 0 --kv-cache 40K"; do
    out=$("$bin" run -m "$m" -p "Once upon a time" -n 200 --temp 0 -c 256 $kv \
          --spill-dir "$tmp/spill" --stats 2>"$tmp/err")
    [ -n "$ref" ] && [ "$out" = "$ref" ] || fail "run $kv: the text differs from the KV in memory"
    grep -q "KV in tiers: 16-position pages" "$tmp/err" || fail "run $kv: no KV tier stats"
done
[ -z "$(ls -A "$tmp/spill")" ] || fail "a spill file was left in --spill-dir"
# policy auto with a context whose KV cache does not fit: the planner puts it in tiers
# (plan shows the tiers and the predicted hit rate) and the text is the in-memory one
"$bin" synth --embd 128 --ff 256 --layers 4 --heads 4 --kv-heads 4 --ctx 4096 \
    -o "$tmp/long.gguf" >/dev/null 2>&1 || fail "synth a 4096-position model"
printf 'hello world %.0s' $(seq 1 100) >"$tmp/long.txt"
ref=$("$bin" run -m "$tmp/long.gguf" -c 4096 -f "$tmp/long.txt" -n 32 --temp 0 --kv-window -1 \
      2>/dev/null)
out=$("$bin" run -m "$tmp/long.gguf" -c 4096 -f "$tmp/long.txt" -n 32 --temp 0 \
      --mem-budget 13M 2>"$tmp/err")
[ -n "$ref" ] && [ "$out" = "$ref" ] || fail "policy auto over KV tiers: the text differs"
grep -q "^policy auto: .*" "$tmp/err" && grep -q "KV in tiers: 16-position pages" "$tmp/err" ||
    fail "policy auto did not plan KV tiers: $(cat "$tmp/err")"
"$bin" plan -m "$tmp/long.gguf" --mem-budget 13M --prompt-len 2000 --gen-len 64 --num-seqs 1 \
    -c 4096 >"$tmp/plan.txt" 2>&1 || fail "plan with KV tiers: $(cat "$tmp/plan.txt")"
grep -q "KV in tiers" "$tmp/plan.txt" && grep -q "cache hit rate" "$tmp/plan.txt" ||
    fail "plan does not show the KV tiers: $(cat "$tmp/plan.txt")"
expect_rc 1 "plan below the tiers' minimum" "$bin" plan -m "$tmp/long.gguf" --mem-budget 8M \
    --prompt-len 2000 --gen-len 64 --num-seqs 1 -c 4096
grep -q "with the KV cache in tiers (a 256-position window) the minimum is" "$tmp/err" ||
    fail "plan below the tiers' minimum: $(cat "$tmp/err")"
out=$("$bin" run -m "$tmp/long.gguf" -c 4096 -f "$tmp/long.txt" -n 32 --temp 0 --kv-window 64 \
      --kv-cache 0 --io-order by-need --kv-recompute 4 --mem-budget 20M 2>"$tmp/err")
[ "$out" = "$ref" ] || fail "--io-order by-need --kv-recompute 4: the text differs: $(cat "$tmp/err")"
# OPT (learned positions, no RoPE): KV in tiers with recomputed layers and streamed weights
# give the in-memory text; a context past its learned positions is a clear error
"$bin" synth --arch opt --embd 256 --ff 1024 --layers 12 --heads 4 --ctx 1024 --type q8_0 \
    -o "$tmp/opt.gguf" >/dev/null 2>&1 || fail "synth an OPT model"
ref=$("$bin" run -m "$tmp/opt.gguf" -c 1024 -f "$tmp/long.txt" -n 32 --temp 0 --kv-window -1 \
      2>/dev/null)
out=$("$bin" run -m "$tmp/opt.gguf" -c 1024 -f "$tmp/long.txt" -n 32 --temp 0 --kv-window 64 \
      --kv-cache 0 --kv-recompute 2 --mem-budget 19M --spill-dir "$tmp/spill" --stats 2>"$tmp/err")
[ -n "$ref" ] && [ "$out" = "$ref" ] || fail "OPT with KV tiers and recompute: the text differs: $(cat "$tmp/err")"
grep -q "token 5: disk [1-9]" "$tmp/err" || fail "OPT at 19M did not stream its weights: $(cat "$tmp/err")"
expect_rc 1 "OPT context past its positions" "$bin" run -m "$tmp/opt.gguf" -c 2048 -p hi
grep -q "longer than the 1024 positions this model has learned embeddings for" "$tmp/err" ||
    fail "OPT context past its positions: $(cat "$tmp/err")"
# batch on a 32-position OPT: the default context stops at 32, so a long generation ends
# with "length" beside a short one (no lost block); a longer -c is refused up front
"$bin" synth --arch opt --embd 64 --ff 128 --layers 2 --heads 4 --ctx 32 -o "$tmp/o32.gguf" \
    >/dev/null 2>&1 || fail "synth a 32-position OPT"
printf '{"prompt":"hello world","n_predict":40}\n{"prompt":"hi","n_predict":4}\n' >"$tmp/o32.jsonl"
for pol in auto manual; do
    rm -f "$tmp/o32.out"
    expect_rc 0 "batch on a 32-position OPT ($pol)" "$bin" batch -m "$tmp/o32.gguf" \
        -i "$tmp/o32.jsonl" -o "$tmp/o32.out" --ignore-eos --policy $pol
    [ "$(grep -c '"finish_reason": "length"' "$tmp/o32.out")" = 2 ] ||
        fail "batch on a 32-position OPT ($pol): $(cat "$tmp/o32.out" "$tmp/err")"
done
expect_rc 1 "batch past OPT's positions" "$bin" batch -m "$tmp/o32.gguf" -i "$tmp/o32.jsonl" \
    -o "$tmp/o32.bad" -c 100
grep -q "longer than the 32 positions" "$tmp/err" || fail "batch -c 100 on OPT: $(cat "$tmp/err")"
expect_rc 2 "--io-order bad" "$bin" run -m "$m" -p hi --io-order sideways
grep -q "io-order expects kv-first or by-need" "$tmp/err" || fail "--io-order bad: $(cat "$tmp/err")"
expect_rc 2 "--weights-copy bad" "$bin" run -m "$m" -p hi --weights-copy auto
grep -q "weights-copy expects on or off" "$tmp/err" || fail "--weights-copy auto in run: $(cat "$tmp/err")"
expect_rc 2 "--kv-select out of range" "$bin" run -m "$m" -p hi --kv-select 1.5
grep -q "kv-select expects a share" "$tmp/err" || fail "--kv-select 1.5: $(cat "$tmp/err")"
expect_rc 2 "batch --kv-select out of range" "$bin" batch -m "$m" -i /dev/null -o "$tmp/x.jsonl" \
    --kv-select -0.5
grep -q "kv-select expects a share" "$tmp/err" || fail "batch --kv-select -0.5: $(cat "$tmp/err")"
expect_rc 2 "--kv-window with --policy auto" "$bin" run -m "$m" -p hi --kv-window 32 --policy auto
grep -q "need --policy manual" "$tmp/err" || fail "--kv-window --policy auto: $(cat "$tmp/err")"
expect_rc 1 "--spill-dir that does not exist" "$bin" run -m "$m" -p hi -c 256 --kv-window 16 \
    --spill-dir "$tmp/nowhere"
grep -q "error: .*spill" "$tmp/err" || fail "missing --spill-dir: $(cat "$tmp/err")"

# batch with page selection: at a share of 1 every page is read and the text is exact; at
# 0.3 over KV tiers the run completes (its quality is judged by test_kv_select)
printf '{"id": 1, "prompt": "Once upon a time", "n_predict": 150}\n{"id": 2, "prompt": "The cat", "n_predict": 120}\n' >"$tmp/sel.jsonl"
sel=(-m "$m" -i "$tmp/sel.jsonl" --temp 0 --ignore-eos -c 256 --no-progress)
"$bin" batch "${sel[@]}" -o "$tmp/exact.jsonl" 2>"$tmp/err" || fail "batch exact: $(cat "$tmp/err")"
"$bin" batch "${sel[@]}" --kv-select 1 -o "$tmp/s1.jsonl" 2>"$tmp/err" || fail "batch --kv-select 1: $(cat "$tmp/err")"
cmp -s "$tmp/exact.jsonl" "$tmp/s1.jsonl" || fail "batch --kv-select 1 differs from exact attention"
"$bin" batch "${sel[@]}" --kv-select 0.3 --kv-window 32 --kv-sinks 16 --spill-dir "$tmp/spill" \
    -o "$tmp/s3.jsonl" 2>"$tmp/err" && [ "$(wc -l < "$tmp/s3.jsonl")" -eq 2 ] ||
    fail "batch --kv-select 0.3 over tiers: $(cat "$tmp/err")"

echo "$((fails == 0 ? 1 : 0)) passed, $fails failed"
[ "$fails" -eq 0 ]
