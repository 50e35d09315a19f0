#!/bin/sh
# run_fuzz.sh [SECONDS] [TARGET...] - builds the libFuzzer targets in build-fuzz (clang,
# libFuzzer, ASan, UBSan) and fuzzes each TARGET (default: gguf jsonl) for SECONDS
# (default 60) in turn.
#   gguf:  the GGUF reader; seeds from ../shared/models (metadata-only copies cut to fit
#          -max_len, plus tiny complete synthetic models)
#   jsonl: the JSONL input of `tierllm batch`; seeds in fuzz/jsonl_seeds
# Exits non-zero if a fuzzer finds a crash, leak, timeout or out-of-memory; the input is
# left in build-fuzz/artifacts-TARGET/. Inputs the fuzzers find accumulate in
# build-fuzz/corpus-TARGET (the GGUF one in build-fuzz/corpus, as before).
set -eu
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-gguf jsonl}
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

for t in $targets; do
    case $t in
    gguf) gguf_seeds; corpus=$bdir/corpus; seeds=$bdir/seeds; max_len=65536 ;;
    jsonl) corpus=$bdir/corpus-jsonl; seeds=$root/fuzz/jsonl_seeds; max_len=4096 ;;
    *) echo "unknown fuzz target $t (gguf, jsonl)"; exit 2 ;;
    esac
    art=$bdir/artifacts-$t
    [ "$t" = gguf ] && art=$bdir/artifacts
    mkdir -p "$corpus" "$art"
    echo "fuzz_$t: $(ls "$seeds" | wc -l) seeds, $(ls "$corpus" | wc -l) corpus inputs, ${secs}s"
    rc=0
    "$bdir/fuzz_$t" "$corpus" "$seeds" -dict="$root/fuzz/$t.dict" \
        -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -max_total_time="$secs" \
        -print_final_stats=1 -artifact_prefix="$art/" 2> "$bdir/fuzz-$t.log" || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -60 "$bdir/fuzz-$t.log"
        echo "fuzz_$t FAILED (exit $rc); reproduce with: $bdir/fuzz_$t ARTIFACT"
        exit "$rc"
    fi
    grep -E "^(#[0-9]+.*DONE|stat::|Done )" "$bdir/fuzz-$t.log" | tail -12
done
