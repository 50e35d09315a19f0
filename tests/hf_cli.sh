#!/usr/bin/env bash
# hf_cli.sh TIERLLM MODELS_DIR - Hugging Face folders (format/hf_folder.h): the same weights
# as a GGUF and as a folder (one file or shards; f32, f16, bf16; Llama, Qwen2, Mistral's
# window, OPT, a tied classifier) give the same logits to float rounding, streamed or resident;
# hostile or unsupported folders are refused with a message naming what is wrong.
# Folders are written from synthetic GGUFs by tests/ref/make_hf_folder.py (NumPy).
set -u
bin=$1; models=$2
here=$(dirname "$0")
py=/usr/bin/python3
. "$(dirname "$0")/cli_lib.sh"
need_profile "$bin" # the streamed runs below plan at budgets too small to measure one
shape="--vocab 300 --embd 128 --ff 320 --layers 2 --heads 8 --kv-heads 2 --ctx 256 --seed 7"
tokens=1,17,200,31,5,299,260,261,262,100,45,46,47,48,49,50,51,52,53,54
# same_logits DESCRIPTION GGUF FOLDER [engine args]: the same logits, bit for bit (a Llama
# folder's rotate-half q and k are rotated as NEOX and stored as the GGUF's pairs)
same_logits() {
    local what=$1 gguf=$2 dir=$3; shift 3
    "$bin" logits -m "$gguf" --tokens $tokens -o "$tmp/a.f32" "$@" 2>"$tmp/err" ||
        { fail "$what: gguf: $(head -c 300 "$tmp/err")"; return; }
    "$bin" logits -m "$dir" --tokens $tokens -o "$tmp/b.f32" "$@" 2>"$tmp/err" ||
        { fail "$what: folder: $(head -c 300 "$tmp/err")"; return; }
    $py - "$tmp/a.f32" "$tmp/b.f32" "$what" <<'P' || fails=$((fails + 1))
import sys
import numpy as np
a, b = (np.fromfile(p, "<f4").astype(np.float64) for p in sys.argv[1:3])
rel = np.abs(a - b).max() / np.abs(a).max() if a.size == b.size else np.inf
print("%s: folder vs GGUF logits max rel %.3g" % (sys.argv[3], rel))
if not (a.size == b.size and a.size > 0 and np.array_equal(a, b)):
    print("FAIL: %s" % sys.argv[3])
    sys.exit(1)
P
}
# folder NAME SYNTH_FLAGS MAKE_FLAGS: a GGUF and the folder made from it
folder() {
    local name=$1 sflags=$2 mflags=$3
    # shellcheck disable=SC2086
    "$bin" synth $shape $sflags -o "$tmp/$name.gguf" >/dev/null || fail "synth $name"
    # shellcheck disable=SC2086
    $py "$here/ref/make_hf_folder.py" "$tmp/$name.gguf" "$tmp/$name" $mflags ||
        fail "make_hf_folder $name"
}

folder llama "--type f32" ""
same_logits "llama f32, one file" "$tmp/llama.gguf" "$tmp/llama"
expect_rc 0 "info on a folder" "$bin" info -m "$tmp/llama"
grep -q "^architecture: *llama" "$tmp/out" && grep -q "F32 1.55 MiB" "$tmp/out" ||
    fail "info on a folder: $(cat "$tmp/out")"
folder shards "--type f16 --layers 6" "--shards 3 --dtype f16"
[ -f "$tmp/shards/model.safetensors.index.json" ] || fail "no index written"
same_logits "llama f16, 3 shards" "$tmp/shards.gguf" "$tmp/shards"
folder qwen2 "--type bf16 --arch qwen2 --tied" "--dtype bf16 --shards 2"
same_logits "qwen2 bf16 tied, 2 shards" "$tmp/qwen2.gguf" "$tmp/qwen2"
folder llama3 "--type f32 --rope-freqs" ""
grep -q '"rope_type": "llama3"' "$tmp/llama3/config.json" || fail "llama3 config"
same_logits "llama 3 rope_scaling" "$tmp/llama3.gguf" "$tmp/llama3"
folder mistral "--type f32 --swa 5" ""
grep -q MistralForCausalLM "$tmp/mistral/config.json" || fail "mistral config"
same_logits "mistral sliding window" "$tmp/mistral.gguf" "$tmp/mistral"
# OPT: Hugging Face's names, embed_positions with its two offset rows, biases everywhere;
# GPT-2's vocab.json + merges.txt in place of tokenizer.json (OPT's checkpoints)
folder opt "--type f16 --arch opt --kv-heads 8 --layers 6" "--dtype f16 --shards 2"
grep -q OPTForCausalLM "$tmp/opt/config.json" || fail "opt config"
same_logits "opt f16, 2 shards" "$tmp/opt.gguf" "$tmp/opt"
cat "$tmp"/opt/*.safetensors | grep -a -q '"model.decoder.embed_positions.weight": {"dtype": "F16"' ||
    fail "opt f16: the position table is not F16 (2-byte rows past the offset untested)"
folder optfiles "--type f32 --arch opt --kv-heads 8" "--gpt2-files"
[ -f "$tmp/optfiles/vocab.json" ] && [ ! -f "$tmp/optfiles/tokenizer.json" ] ||
    fail "no vocab.json, or a tokenizer.json, in optfiles"
same_logits "opt f32, vocab.json + merges.txt" "$tmp/optfiles.gguf" "$tmp/optfiles"
expect_rc 0 "info on an OPT folder" "$bin" info -m "$tmp/optfiles"
grep -q "family: OPT" "$tmp/out" && grep -q "gpt2" "$tmp/out" ||
    fail "info on an OPT folder: $(cat "$tmp/out")"
expect_rc 0 "run on an OPT folder, streamed" "$bin" run -m "$tmp/opt" -p "hello" -n 8 --temp 0 \
    --mem-budget 1500K --stats
grep -q "streamed [1-9]" "$tmp/err" || fail "OPT folder run did not stream: $(grep stats "$tmp/err")"
for bad in '"do_layer_norm_before": true/"do_layer_norm_before": false;do_layer_norm_before false' \
           '"word_embed_proj_dim": 128/"word_embed_proj_dim": 64;word_embed_proj_dim 64' \
           '"activation_function": "relu"/"activation_function": "gelu";activation_function .gelu.' \
           '"do_layer_norm_before": true/"do_layer_norm_before": 0;"do_layer_norm_before" must be true or false' \
           '"activation_function": "relu"/"activation_function": 5;"activation_function" must be a string'; do
    cp -r "$tmp/optfiles" "$tmp/optbad"
    sed -i "s/${bad%%;*}/" "$tmp/optbad/config.json"
    expect_err "OPT variant: ${bad##*;}" "${bad##*;}" \
        "$bin" logits -m "$tmp/optbad" --tokens 1 -o "$tmp/x.f32"
    rm -rf "$tmp/optbad"
done
# GPT-2's two files, hostile or missing
cp -r "$tmp/optfiles" "$tmp/optbad"
printf '#version: 0.2\na b c\n' >"$tmp/optbad/merges.txt"
expect_err "a merges.txt line of three pieces" "merges.txt: line 2 is not a merge" \
    "$bin" logits -m "$tmp/optbad" --tokens 1 -o "$tmp/x.f32"
printf '#version: 0.2\n\xff \xfe\n' >"$tmp/optbad/merges.txt"
expect_err "a merges.txt line not UTF-8" "merges.txt: line 2 is not UTF-8" \
    "$bin" logits -m "$tmp/optbad" --tokens 1 -o "$tmp/x.f32"
rm "$tmp/optbad/merges.txt"
expect_err "no tokenizer at all" "no tokenizer.json, and no vocab.json with merges.txt" \
    "$bin" logits -m "$tmp/optbad" --tokens 1 -o "$tmp/x.f32"
rm -rf "$tmp/optbad"
# generation through a folder: weights streamed from the shards give the resident tokens
expect_rc 0 "run on a folder" "$bin" run -m "$tmp/shards" -p "hello" -n 16 --temp 0
cp "$tmp/out" "$tmp/resident"
expect_rc 0 "run on a folder, streamed" "$bin" run -m "$tmp/shards" -p "hello" -n 16 --temp 0 \
    --mem-budget 1200K --stats
grep -q "streamed [1-9]" "$tmp/err" || fail "folder run did not stream: $(grep stats "$tmp/err")"
cmp -s "$tmp/out" "$tmp/resident" || fail "streamed folder run: '$(cat "$tmp/out")' vs '$(cat "$tmp/resident")'"

# refused, with the reason
expect_err "gpt-2 folder" "architecture 'GPT2LMHeadModel' is not supported" \
    "$bin" run -m "$models/hf/fake-gpt2-random" -n 1
cp -r "$tmp/shards" "$tmp/missing" && rm "$tmp/missing/model-00002-of-00003.safetensors"
expect_err "index names a missing file" "model-00002-of-00003.safetensors" \
    "$bin" logits -m "$tmp/missing" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/shards" "$tmp/escape"
sed -i 's/model-00001-of-00003/..\/model-00001-of-00003/' "$tmp/escape/model.safetensors.index.json"
expect_err "index names a file outside the folder" "outside the folder" \
    "$bin" logits -m "$tmp/escape" --tokens 1 -o "$tmp/x.f32"
$py "$here/ref/make_hf_folder.py" "$tmp/llama.gguf" "$tmp/misaligned" --misalign ||
    fail "make misaligned"
expect_err "f32 data not 4-aligned" "not a multiple of its element size" \
    "$bin" logits -m "$tmp/misaligned" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/llama" "$tmp/noconfig" && rm "$tmp/noconfig/config.json"
expect_err "no config.json" "config.json" "$bin" logits -m "$tmp/noconfig" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/llama3" "$tmp/yarn"
sed -i 's/"rope_type": "llama3"/"rope_type": "yarn"/' "$tmp/yarn/config.json"
expect_err "rope_scaling of another kind" "rope_scaling of type 'yarn'" \
    "$bin" logits -m "$tmp/yarn" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/llama" "$tmp/badcfg"
sed -i 's/"hidden_size": 128/"hidden_size": "wide"/' "$tmp/badcfg/config.json"
expect_err "hidden_size not an integer" "hidden_size" \
    "$bin" logits -m "$tmp/badcfg" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/llama" "$tmp/spm"  # tokenizer.json of the SentencePiece kind: test_tokenizer
$py - "$tmp/spm/tokenizer.json" <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"] = {"type": "Whitespace"}  # a word-level split, no byte fallback
json.dump(t, open(sys.argv[1], "w"))
P
expect_err "a tokenizer.json of neither kind" "neither byte-level BPE" \
    "$bin" logits -m "$tmp/spm" --tokens 1 -o "$tmp/x.f32"
cp -r "$tmp/llama" "$tmp/int8"
$py - "$tmp/int8/model.safetensors" <<'P'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n].decode().replace('"F32"', '"I8" ', 1)
open(p, "wb").write(b[:8] + h.encode() + b[8 + n:])
P
expect_rc 1 "an I8 tensor" "$bin" logits -m "$tmp/int8" --tokens 1 -o "$tmp/x.f32"
grep -q "I8" "$tmp/err" || fail "an I8 tensor: $(head -c 300 "$tmp/err")"

echo "hf_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
