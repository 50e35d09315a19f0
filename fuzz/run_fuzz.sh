#!/bin/sh
# run_fuzz.sh [SECONDS] [TARGET...] - builds the libFuzzer targets in build-fuzz (clang,
# libFuzzer, ASan, UBSan) and fuzzes the TARGETs (default: gguf jsonl safetensors) in
# turn. SECONDS (default 120) is the budget of the whole run, split evenly between the
# targets (at least 1 s each), so adding a target does not lengthen a run.
#   gguf:  the GGUF reader; seeds from ../shared/models (metadata-only copies cut to fit
#          -max_len, plus tiny complete synthetic models)
#   jsonl: the JSONL input of `tierllm batch`; seeds in fuzz/jsonl_seeds
#   safetensors: the safetensors reader; seeds made here: the shared Hugging Face
#          model's header with its data shrunk to fit -max_len, and small files of each
#          dtype and shape rank
# Exits non-zero if a fuzzer finds a crash, leak, timeout or out-of-memory; the input is
# left in build-fuzz/artifacts-TARGET/. Inputs the fuzzers find accumulate in
# build-fuzz/corpus-TARGET (the GGUF one in build-fuzz/corpus, as before).
set -eu
secs=${1:-120}
[ $# -gt 0 ] && shift
targets=${*:-gguf jsonl safetensors}
# shellcheck disable=SC2086
set -- $targets
each=$((secs / $#))
[ "$each" -ge 1 ] || each=1
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=$root/build-fuzz
models=${TL_MODELS_DIR:-$root/../shared/models}
jobs=${TL_FUZZ_BUILD_JOBS:-2}

CC=${CC:-clang} cmake -S "$root" -B "$bdir" -DTL_FUZZ=ON -DTL_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Release > "$bdir.cmake.log" 2>&1 || { cat "$bdir.cmake.log"; exit 1; }
build_targets=tierllm_cli
for t in $targets; do build_targets="$build_targets fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$bdir" -j "$jobs" --target $build_targets > "$bdir.build.log" 2>&1 ||
    { tail -40 "$bdir.build.log"; exit 1; }

gguf_seeds() {
    max_len=65536
    seeds=$bdir/seeds
    rm -rf "$seeds"
    mkdir -p "$seeds"
    set --
    for f in "$models"/*.gguf "$models"/tokenizers/*.gguf; do [ -f "$f" ] && set -- "$@" "$f"; done
    if [ $# -gt 0 ]; then python3 "$root/fuzz/make_seeds.py" "$seeds" "$max_len" "$@"; fi
    cli=$bdir/tierllm
    shape="--vocab 260 --layers 1 --heads 4 --kv-heads 2 --ctx 16"
    synth() { ASAN_OPTIONS=detect_leaks=0 "$cli" synth $shape "$@" > /dev/null; }
    # (the loop variable is not `t`: functions share the caller's variables)
    for ty in f32 f16 bf16; do synth --embd 16 --ff 16 --type $ty -o "$seeds/synth-$ty.gguf"; done
    for ty in q8_0 q4_0; do synth --embd 32 --ff 32 --type $ty -o "$seeds/synth-$ty.gguf"; done
    synth --embd 16 --ff 16 --tied -o "$seeds/synth-tied.gguf"
}

# Seeds are written at fuzz time (model files are never committed): every file is a
# valid safetensors file of at most 16 KiB.
safetensors_seeds() {
    seeds=$bdir/seeds-safetensors
    rm -rf "$seeds"
    mkdir -p "$seeds"
    python3 - "$seeds" "$models/hf" <<'PY'
import json, os, struct, sys
out, hf = sys.argv[1], sys.argv[2]
SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1}

def write(name, tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape)], laid out contiguously in this order"""
    hdr, at = {}, 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for tname, dt, shape in tensors:
        n = SIZE[dt]
        for d in shape:
            n *= d
        hdr[tname] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes((i * 7) & 255 for i in range(at)))

write("empty.safetensors", [], pad=False)
write("meta-only.safetensors", [], {"format": "pt"})
write("dtypes.safetensors", [("a.f32", "F32", [2, 3]), ("b.f16.0d", "F16", []),
      ("c.bf16.4d", "BF16", [1, 2, 1, 3]), ("d.empty", "F32", [0, 4]),
      ("e.f16", "F16", [5])], {"format": "pt", "note": "unicod\u00e9"})
write("unsupported.safetensors", [("q", "I8", [8]), ("w", "F32", [2])])
# the shared model's tensors, in its order, with every dimension capped at 4
path = os.path.join(hf, "fake-gpt2-random", "model.safetensors")
if os.path.exists(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    meta = hdr.pop("__metadata__", None)
    ts = sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
    write("gpt2-shrunk.safetensors",
          [(k, v["dtype"], [min(d, 4) for d in v["shape"]]) for k, v in ts], meta)
PY
}

for t in $targets; do
    case $t in
    gguf) gguf_seeds; corpus=$bdir/corpus; seeds=$bdir/seeds; max_len=65536 ;;
    jsonl) corpus=$bdir/corpus-jsonl; seeds=$root/fuzz/jsonl_seeds; max_len=4096 ;;
    safetensors) safetensors_seeds; corpus=$bdir/corpus-safetensors; max_len=16384 ;;
    *) echo "unknown fuzz target $t (gguf, jsonl, safetensors)"; exit 2 ;;
    esac
    art=$bdir/artifacts-$t
    [ "$t" = gguf ] && art=$bdir/artifacts
    mkdir -p "$corpus" "$art"
    echo "fuzz_$t: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus inputs, ${each}s"
    rc=0
    "$bdir/fuzz_$t" "$corpus" "$seeds" -dict="$root/fuzz/$t.dict" \
        -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -max_total_time="$each" \
        -print_final_stats=1 -artifact_prefix="$art/" 2> "$bdir/fuzz-$t.log" || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -60 "$bdir/fuzz-$t.log"
        echo "fuzz_$t FAILED (exit $rc); reproduce with: $bdir/fuzz_$t ARTIFACT"
        exit "$rc"
    fi
    grep -E "^(#[0-9]+.*DONE|stat::|Done )" "$bdir/fuzz-$t.log" | tail -12
done
