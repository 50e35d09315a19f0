#!/bin/sh
# run_fuzz.sh [SECONDS] - builds fuzz_gguf in build-fuzz (clang, libFuzzer, ASan, UBSan),
# makes a seed corpus from ../shared/models (metadata-only copies cut to fit -max_len,
# plus tiny complete synthetic models) and fuzzes for SECONDS (default 60). Exits
# non-zero if the fuzzer finds a crash, leak, timeout or out-of-memory; the input is
# left in build-fuzz/artifacts/. Inputs the fuzzer finds accumulate in build-fuzz/corpus.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=$root/build-fuzz
models=${TL_MODELS_DIR:-$root/../shared/models}
max_len=65536
jobs=${TL_FUZZ_BUILD_JOBS:-2}

CC=${CC:-clang} cmake -S "$root" -B "$bdir" -DTL_FUZZ=ON -DTL_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Release > "$bdir.cmake.log" 2>&1 || { cat "$bdir.cmake.log"; exit 1; }
cmake --build "$bdir" -j "$jobs" --target fuzz_gguf tierllm_cli > "$bdir.build.log" 2>&1 ||
    { tail -40 "$bdir.build.log"; exit 1; }

seeds=$bdir/seeds
rm -rf "$seeds"
mkdir -p "$seeds" "$bdir/corpus" "$bdir/artifacts"
set --
for f in "$models"/*.gguf "$models"/tokenizers/*.gguf; do [ -f "$f" ] && set -- "$@" "$f"; done
if [ $# -gt 0 ]; then python3 "$root/fuzz/make_seeds.py" "$seeds" "$max_len" "$@"; fi
cli=$bdir/tierllm
shape="--vocab 260 --layers 1 --heads 4 --kv-heads 2 --ctx 16"
synth() { ASAN_OPTIONS=detect_leaks=0 "$cli" synth $shape "$@" > /dev/null; }
for t in f32 f16 bf16; do synth --embd 16 --ff 16 --type $t -o "$seeds/synth-$t.gguf"; done
for t in q8_0 q4_0; do synth --embd 32 --ff 32 --type $t -o "$seeds/synth-$t.gguf"; done
synth --embd 16 --ff 16 --tied -o "$seeds/synth-tied.gguf"
echo "fuzz_gguf: $(ls "$seeds" | wc -l) seeds, $(ls "$bdir/corpus" | wc -l) corpus inputs, ${secs}s"

"$bdir/fuzz_gguf" "$bdir/corpus" "$seeds" -dict="$root/fuzz/gguf.dict" \
    -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -max_total_time="$secs" \
    -print_final_stats=1 -artifact_prefix="$bdir/artifacts/" 2> "$bdir/fuzz.log" || rc=$?
if [ "${rc:-0}" -ne 0 ]; then
    tail -60 "$bdir/fuzz.log"
    echo "fuzz_gguf FAILED (exit $rc); reproduce with: $bdir/fuzz_gguf ARTIFACT"
    exit "$rc"
fi
grep -E "^(#[0-9]+.*DONE|stat::|Done )" "$bdir/fuzz.log" | tail -12
