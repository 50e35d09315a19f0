#!/usr/bin/env bash
# pipeline_cli.sh TIERLLM MODELS_DIR - `run` and `batch` across processes with mpirun on
# loopback (exec/pipeline.h): -np 2 and -np 3 give the same tokens as one process, for
# stories260K with every layer resident and for a synthetic model whose stages stream
# their weights (run) or spill their KV to disk (batch); every rank reports a budget peak
# within its own --mem-budget; batch --stats prints each stage's prediction (with its
# timed link) and the pipeline's beside the measurement; --pipeline-layers auto picks a
# split and keeps the results; rank 1 killed mid-run ends the whole job within seconds
# with a non-zero exit, and the result lines rank 0 had written stay whole; bad splits and
# batch --policy auto with placement flags are refused; run --policy auto plans each rank's
# stage, and batch --policy auto places each rank's KV for the shared block shape.
set -u
bin=$1; models=$2
m=$models/stories260K.gguf
. "$(dirname "$0")/cli_lib.sh"
py=/usr/bin/python3
[ -f "$m" ] || { echo "FAIL: $m is missing"; exit 1; }
command -v mpirun >/dev/null || { echo "FAIL: mpirun is missing (Debian: openmpi-bin)"; exit 1; }
mpi() { np=$1; shift; timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$@"; }
# a fixed profile for every prediction (--stats, auto split): nothing is measured here
$py "$(dirname "$0")/write_profile.py" "$tmp/prof.json"

# every "budget X MiB (peak Y MiB)" in a stats file has Y <= X, and there are n of them
peaks_ok() {
    $py - "$1" "$2" <<'P'
import re, sys
t = open(sys.argv[1]).read()
pairs = [(float(a), float(b)) for a, b in re.findall(r"budget ([0-9.]+) MiB \(peak ([0-9.]+) MiB\)", t)]
assert len(pairs) >= int(sys.argv[2]), pairs
assert all(p <= b for b, p in pairs), pairs
P
}

same_results() {
    $py - "$1" "$2" <<'P'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x["id"] == y["id"] and x["tokens"] == y["tokens"], (x, y)
P
}

# --- run: stories260K, resident -------------------------------------------------------
"$bin" run -m "$m" -p "Once upon a time" -n 48 --temp 0 >"$tmp/one.txt" 2>/dev/null ||
    fail "run alone"
for np in 2 3; do
    mpi $np "$bin" run -m "$m" -p "Once upon a time" -n 48 --temp 0 --pipeline --stats \
        >"$tmp/run$np.txt" 2>"$tmp/run$np.err" || fail "run -np $np: $(tail -3 "$tmp/run$np.err")"
    cmp -s "$tmp/one.txt" "$tmp/run$np.txt" || fail "run -np $np: text differs from one process"
    peaks_ok "$tmp/run$np.err" $np || fail "run -np $np: a rank over its budget or silent"
    [ "$(grep -o '\[stats\] rank [0-9]' "$tmp/run$np.err" | sort -u | wc -l)" = $np ] ||
        fail "run -np $np: not every rank reported"
done

# --- run: a synthetic model whose stages stream -------------------------------------
syn=$tmp/syn12.gguf
"$bin" synth --vocab 2048 --embd 256 --ff 768 --layers 12 --heads 8 --kv-heads 4 --ctx 512 \
    --type q8_0 -o "$syn" >/dev/null 2>&1 || fail "synth"
"$bin" run -m "$syn" -p "alpha beta gamma" -n 32 --temp 0 >"$tmp/syn1.txt" 2>/dev/null ||
    fail "synthetic run alone"
for np in 2 3; do # a budget under each stage's layers, so they stream
    mpi $np "$bin" run -m "$syn" -p "alpha beta gamma" -n 32 --temp 0 --pipeline --stats \
        --mem-budget 5M -c 256 -b 16 >"$tmp/syn$np.txt" 2>"$tmp/syn$np.err" ||
        fail "synthetic run -np $np: $(tail -3 "$tmp/syn$np.err")"
    cmp -s "$tmp/syn1.txt" "$tmp/syn$np.txt" || fail "synthetic run -np $np: text differs"
    peaks_ok "$tmp/syn$np.err" $np || fail "synthetic run -np $np: a rank over its budget"
    grep -q "streamed [1-9][0-9.]* MiB per pass" "$tmp/syn$np.err" ||
        fail "synthetic run -np $np: no stage streamed its weights: $(grep stats "$tmp/syn$np.err")"
done

# --- run --policy auto: each rank plans its own stage at its budget (a fixed profile),
# the ranks agree on the prompt chunk, and the text is one process's
for np in 2 3; do
    mpi $np "$bin" run -m "$syn" -p "alpha beta gamma" -n 32 --temp 0 --pipeline --stats \
        --policy auto --profile "$tmp/prof.json" --mem-budget 5M -c 256 \
        >"$tmp/auto$np.txt" 2>"$tmp/auto$np.err" ||
        fail "run --policy auto -np $np: $(tail -3 "$tmp/auto$np.err")"
    cmp -s "$tmp/syn1.txt" "$tmp/auto$np.txt" || fail "run --policy auto -np $np: text differs"
    peaks_ok "$tmp/auto$np.err" $np || fail "run --policy auto -np $np: a rank over its budget"
    [ "$(grep -c "^policy auto: .*streamed" "$tmp/auto$np.err")" -ge $np ] &&
        grep -q "^policy auto: the ranks take prompt chunks of [0-9]* rows" "$tmp/auto$np.err" ||
        fail "run --policy auto -np $np: not every rank planned: $(grep policy "$tmp/auto$np.err")"
done

# --- batch: stories260K resident, and the synthetic model with KV on disk -------------
$py - "$tmp/p.jsonl" <<'P'
import json, sys
ps = ["Once upon a time", "The little dog", "Lily and Ben went", "A big red ball",
      "The sun was", "Tom had a toy", "She looked at the sky", "In the park there was",
      "One day a cat", "The bird sang", "Mom said", "They played"]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(ps):
        f.write(json.dumps({"prompt": p, "n_predict": 12 + 3 * i}) + "\n")
P
"$bin" batch -m "$m" -i "$tmp/p.jsonl" -o "$tmp/b1.jsonl" --temp 0.8 --gbs 2 --num-gb 3 \
    2>/dev/null || fail "batch alone"
"$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/s1.jsonl" --temp 0 --gbs 2 --num-gb 3 \
    -c 128 --kv-mem 30 --prefill-rows 16 2>/dev/null || fail "synthetic batch alone"
for np in 2 3; do
    mpi $np "$bin" batch -m "$m" -i "$tmp/p.jsonl" -o "$tmp/b$np.jsonl" --temp 0.8 --gbs 2 \
        --num-gb 3 --pipeline --stats --profile "$tmp/prof.json" 2>"$tmp/b$np.err" ||
        fail "batch -np $np: $(tail -3 "$tmp/b$np.err")"
    same_results "$tmp/b1.jsonl" "$tmp/b$np.jsonl" || fail "batch -np $np: results differ"
    mpi $np "$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/s$np.jsonl" --temp 0 --gbs 2 \
        --num-gb 3 -c 128 --kv-mem 30 --prefill-rows 16 --mem-budget 8M --pipeline --stats \
        --profile "$tmp/prof.json" 2>"$tmp/s$np.err" || fail "synthetic batch -np $np: $(tail -3 "$tmp/s$np.err")"
    same_results "$tmp/s1.jsonl" "$tmp/s$np.jsonl" || fail "synthetic batch -np $np: results differ"
    peaks_ok "$tmp/s$np.err" $((np - 1)) || fail "synthetic batch -np $np: a rank over its budget"
    grep -q "^\[plan\] pipeline: predicted .* measured .* (error " "$tmp/s$np.err" ||
        fail "synthetic batch -np $np: no pipeline prediction beside the measurement"
    [ "$(grep -c '^\[plan\] stage [0-9] (layers' "$tmp/s$np.err")" = $np ] ||
        fail "synthetic batch -np $np: not every stage's prediction"
    [ "$(grep -c '^\[plan\] stage [0-9] link to rank [0-9]: [0-9.]* GB/s, [0-9.]* us per message' \
        "$tmp/s$np.err")" = $np ] || fail "synthetic batch -np $np: not every stage's link timed"
    grep -Eq "^\[stats\] rank [1-9].* KV read [0-9.]+ MiB, written ([1-9][0-9.]*|0\.[0-9]*[1-9][0-9]*) MiB" \
        "$tmp/s$np.err" ||
        fail "synthetic batch -np $np: no KV written to disk on a later rank"
done

# --- --pipeline-layers auto: every stage predicts its ranges (a fixed profile), rank 0
# picks the split; the results are still one process's
mpi 3 "$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/a3.jsonl" --temp 0 --gbs 2 --num-gb 3 \
    -c 128 --kv-mem 30 --prefill-rows 16 --mem-budget 8M --pipeline --pipeline-layers auto \
    --profile "$tmp/prof.json" --stats 2>"$tmp/a3.err" || fail "auto split: $(tail -3 "$tmp/a3.err")"
grep -q "^\[plan\] pipeline split: [0-9]*,[0-9]*,[0-9]* layers per rank, slowest stage predicted" \
    "$tmp/a3.err" || fail "auto split: no split chosen: $(grep plan "$tmp/a3.err")"
same_results "$tmp/s1.jsonl" "$tmp/a3.jsonl" || fail "auto split: results differ"

# --- batch --policy auto: each rank places its own KV (and weights) at its budget for the
# shared block shape (a fixed profile); at 7M per rank for 2 ranks (6M for 3) the whole KV
# does not fit beside a stage's minimum (the manual default, all KV in memory, is refused
# there), so every rank spills part of it; the results are one process's
for np in 2 3; do
    budget=$((9 - np))M
    mpi $np "$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/pa$np.jsonl" --temp 0 --gbs 2 \
        --num-gb 3 -c 128 --prefill-rows 16 --mem-budget $budget --pipeline --policy auto --stats \
        --profile "$tmp/prof.json" 2>"$tmp/pa$np.err" ||
        fail "batch --policy auto -np $np: $(tail -3 "$tmp/pa$np.err")"
    same_results "$tmp/s1.jsonl" "$tmp/pa$np.jsonl" || fail "batch --policy auto -np $np: results differ"
    peaks_ok "$tmp/pa$np.err" $((np - 1)) || fail "batch --policy auto -np $np: a rank over its budget"
    [ "$(grep -c '^policy auto: rank [0-9] (layers [0-9]*\.\.[0-9]*) keeps [0-9]*% of its KV pages' \
        "$tmp/pa$np.err")" = $np ] || fail "batch --policy auto -np $np: not every rank placed: $(grep policy "$tmp/pa$np.err")"
    grep -q "^\[plan\] pipeline split: [0-9,]* layers per rank, slowest stage predicted" \
        "$tmp/pa$np.err" || fail "batch --policy auto -np $np: no split searched"
    grep -q "^policy auto: rank [0-9] .* keeps \([0-9]\|[1-9][0-9]\)% of its KV" "$tmp/pa$np.err" ||
        fail "batch --policy auto -np $np: no rank spilled KV at $budget: $(grep policy "$tmp/pa$np.err")"
done
# with --pipeline-layers auto each candidate range is judged with its own placement: at 6M
# every range would be infeasible with the whole KV in memory
mpi 3 "$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/pas3.jsonl" --temp 0 --gbs 2 --num-gb 3 \
    -c 128 --prefill-rows 16 --mem-budget 6M --pipeline --pipeline-layers auto --policy auto \
    --profile "$tmp/prof.json" 2>"$tmp/pas3.err" || fail "auto split and placement: $(tail -3 "$tmp/pas3.err")"
grep -q "^\[plan\] pipeline split: [0-9,]* layers per rank, slowest stage predicted" "$tmp/pas3.err" ||
    fail "auto split and placement: no range judged feasible: $(grep plan "$tmp/pas3.err")"
same_results "$tmp/s1.jsonl" "$tmp/pas3.jsonl" || fail "auto split and placement: results differ"
# a disk page is read back only once its write has completed (until then its write buffer
# serves it), and a busy disk may complete the writes of a short run late: some rank of the
# four spilling runs above must have read KV back
grep -Eq "^\[stats\] rank [1-9].* KV read ([1-9][0-9.]*|0\.[0-9]*[1-9][0-9]*) MiB" "$tmp/s2.err" "$tmp/s3.err" \
    "$tmp/pa2.err" "$tmp/pa3.err" || fail "no KV read back from disk on a later rank in four runs"
mpi 2 "$bin" batch -m "$syn" -i "$tmp/p.jsonl" -o "$tmp/pm2.jsonl" --temp 0 --gbs 2 --num-gb 3 \
    -c 128 --prefill-rows 16 --mem-budget 7M --pipeline --profile "$tmp/prof.json" \
    >/dev/null 2>"$tmp/pm2.err"
[ $? -ne 0 ] && grep -q "too small" "$tmp/pm2.err" ||
    fail "batch --pipeline at 7M without auto: the whole KV in memory should not fit: $(tail -2 "$tmp/pm2.err")"
"$bin" run -m "$m" -p hi -n 4 --pipeline-layers auto >/dev/null 2>"$tmp/e0"
[ $? -eq 2 ] && grep -q "plans a batch" "$tmp/e0" || fail "run --pipeline-layers auto: $(cat "$tmp/e0")"

# --- rank 1 killed mid-run ---------------------------------------------------------------
$py - "$tmp/long.jsonl" <<'P'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"prompt": "alpha beta gamma %d" % i, "n_predict": 48}) + "\n")
P
cat >"$tmp/wrap.sh" <<W
#!/bin/sh
echo \$\$ > "$tmp/pid.\$OMPI_COMM_WORLD_RANK"
exec "\$@"
W
chmod +x "$tmp/wrap.sh"
mpirun --allow-run-as-root --oversubscribe -np 2 "$tmp/wrap.sh" "$bin" batch -m "$syn" \
    -i "$tmp/long.jsonl" -o "$tmp/k.jsonl" --temp 0 --gbs 2 --num-gb 2 --pipeline \
    >/dev/null 2>"$tmp/k.err" &
job=$!
for _ in $(seq 600); do # until rank 0 has written a block's results
    [ -s "$tmp/k.jsonl" ] && [ -f "$tmp/pid.1" ] && break
    sleep 0.05
done
if [ -s "$tmp/k.jsonl" ] && [ -f "$tmp/pid.1" ]; then
    kill -9 "$(cat "$tmp/pid.1")"
    t0=$(date +%s.%N)
    wait $job; rc=$?
    dt=$($py -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
    [ $rc -ne 0 ] || fail "kill: the job exited 0 with rank 1 killed"
    $py -c "import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)" "$dt" ||
        fail "kill: the job took $dt s to end"
    for _ in $(seq 100); do kill -0 "$(cat "$tmp/pid.0")" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$(cat "$tmp/pid.0")" 2>/dev/null && fail "kill: rank 0 still runs 5 s after mpirun"
    $py - "$tmp/k.jsonl" <<'P' || fail "kill: rank 0's written results are not whole"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "nothing kept"
for l in lines:
    r = json.loads(l)
    assert r["finish_reason"] in ("length", "stop"), r
P
else
    kill -9 $job 2>/dev/null; wait $job
    fail "kill: rank 0 wrote no result within 30 s: $(tail -3 "$tmp/k.err")"
fi

# --- refusals ---------------------------------------------------------------------------
mpi 2 "$bin" run -m "$m" -p hi -n 4 --pipeline-layers 1,1 >/dev/null 2>"$tmp/e1"
[ $? -ne 0 ] && grep -q "add up to 5" "$tmp/e1" || fail "a split that does not cover the layers: $(cat "$tmp/e1")"
"$bin" batch -m "$m" -i "$tmp/p.jsonl" -o "$tmp/e2.jsonl" --pipeline --policy auto \
    --kv-mem 50 >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "drop --kv-mem" "$tmp/e2" || fail "batch --pipeline --policy auto --kv-mem: $(cat "$tmp/e2")"
mpi 6 "$bin" run -m "$m" -p hi -n 4 --pipeline >/dev/null 2>"$tmp/e3"
[ $? -ne 0 ] && grep -q "at most one rank per layer" "$tmp/e3" || fail "more ranks than layers: $(cat "$tmp/e3")"

[ $fails -eq 0 ] && echo "pipeline_cli: all passed" || echo "pipeline_cli: $fails failed"
exit $((fails > 0))
