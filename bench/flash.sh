#!/usr/bin/env bash
# flash.sh [REPS] [TOKENS] [SPARSITY] - LLM in a Flash's selective reads (bench, not a test;
# issue "LLM in a Flash, the missing half"). A Llama-2-7B-shape Q8_0 synthetic model
# (6.7 GiB, cached in $TIERLLM_BENCH_DIR or /tmp/tierllm-bench) and its flash-layout
# conversion (`convert --layout flash`, calibrated on tests/data/calib_stories.txt, every
# matrix input at the same sparsity), batch 1 at --mem-budget 4G:
#   D   the row-major file, dense: whole layers streamed through the ring, read ahead
#   F0  the flash file at sparsity 0: every run read, at each matrix input's turn
#   FS  the flash file at SPARSITY (default 0.5): only the runs of non-zero inputs
# Each `run -n TOKENS` (default 16) in turn, REPS rounds (default 3); the disk's rate in the
# same minutes (dd, O_DIRECT, 1 MiB blocks over the model file) before each round. Prints
# each round and the medians: decode tok/s, MiB read per token, the flash line of --stats
# (runs needed / read / reads / GB/s from start to last wait, compute waited), and FS/D,
# FS/F0, bytes FS/D.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
reps=${1:-3}; ntok=${2:-16}; sp=${3:-0.5}
bin=build/tierllm
dir=${TIERLLM_BENCH_DIR:-/tmp/tierllm-bench}
mkdir -p "$dir"
m=$dir/llama2-7b-q8_0.gguf
f=$dir/llama2-7b-q8_0-flash.gguf
[ -f "$m" ] || "$bin" synth --preset llama2-7b --type q8_0 -o "$m" >/dev/null
if [ ! -f "$f" ]; then
    t0=$(date +%s.%N)
    "$bin" convert -m "$m" -o "$f" --calib tests/data/calib_stories.txt --layout flash \
        --sparsity "$sp" --uniform -c 128 --mem-budget 4G
    echo "convert --layout flash: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
prompt="Once upon a time there was a little dog who liked to run in the park"
one() { # one NAME MODEL SPARSITY: decode tok/s, MiB per token, the flash stats line
    "$bin" run -m "$2" -p "$prompt" -n "$ntok" --temp 0 --mem-budget 4G --sparsity "$3" \
        --stats >/dev/null 2>"$tmp/$1.err" || { cat "$tmp/$1.err"; exit 1; }
    echo "$(decode_tps "$tmp/$1.err") $(token_mib "$tmp/$1.err")"
}
declare -a D F0 FS DB F0B FSB DISK
for r in $(seq "$reps"); do
    DISK+=("$(disk_gbps "$m")")
    read -r t b <<<"$(one d "$m" 0)"; D+=("$t"); DB+=("$b")
    read -r t b <<<"$(one f0 "$f" 0)"; F0+=("$t"); F0B+=("$b")
    read -r t b <<<"$(one fs "$f" "$sp")"; FS+=("$t"); FSB+=("$b")
    echo "round $r: disk ${DISK[-1]} GB/s | D ${D[-1]} tok/s ${DB[-1]} MiB/token | F0 ${F0[-1]}" \
         "tok/s ${F0B[-1]} MiB/token | F$sp ${FS[-1]} tok/s ${FSB[-1]} MiB/token"
    grep "flash layout" "$tmp/f0.err" | sed 's/^/  F0: /' || true
    grep "flash layout" "$tmp/fs.err" | sed "s/^/  F$sp: /" || true
    grep -A12 "^\[plan\] decode" "$tmp/fs.err" | grep "  wall\|weight bytes" |
        sed "s/^/  F$sp decode: /" || true
done
python3 - "${DISK[*]}" "${D[*]}" "${F0[*]}" "${FS[*]}" "${DB[*]}" "${F0B[*]}" "${FSB[*]}" "$sp" <<'P'
import statistics, sys
med = lambda s: statistics.median(map(float, s.split()))
disk, d, f0, fs, db, f0b, fsb = (med(s) for s in sys.argv[1:8])
sp = sys.argv[8]
print(f"median: disk {disk:.2f} GB/s | D {d:.3f} tok/s {db:.0f} MiB/token | F0 {f0:.3f} tok/s "
      f"{f0b:.0f} MiB/token | F{sp} {fs:.3f} tok/s {fsb:.0f} MiB/token")
print(f"F{sp}/D tok/s {fs / d:.2f} (target >= 1.5) | F{sp}/F0 {fs / f0:.2f} | bytes F{sp}/D "
      f"{fsb / db:.2f} (target <= 0.60) | D at the disk bound: {db * 1048576 * d / 1e9 / disk:.2f}")
P
