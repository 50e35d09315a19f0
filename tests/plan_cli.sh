#!/usr/bin/env bash
# plan_cli.sh TIERLLM MODELS_DIR - the planner from the command line: `tierllm plan`
# prints a policy that fits, its prediction and the naive alternatives; `batch` and `run`
# with a budget use the auto policy, print the prediction beside the measurement with
# --stats, and give the same tokens as a manual run; a budget no policy fits is a clear
# error; a broken profile file is refused. The profile is written here (no measuring).
# The minimum a too-small budget's message states is accepted as the budget; with no
# saved profile, a budget too small to measure one in is refused at once.
set -u
bin=$1; models=$2
m=$models/stories260K.gguf
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tl_plan_cli.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py=/usr/bin/python3

# a profile of plausible round numbers, in the format tierllm profile writes
$py "$(dirname "$0")/write_profile.py" "$tmp/prof.json"

"$bin" plan -m "$m" --mem-budget 8M --prompt-len 20 --gen-len 10 --num-seqs 12 \
    --profile "$tmp/prof.json" >"$tmp/out" 2>"$tmp/err" || fail "plan: $(cat "$tmp/err")"
grep -q "^chosen: gbs [0-9]* x num_gb [0-9]*" "$tmp/out" || fail "plan: no chosen policy: $(cat "$tmp/out")"
grep -q "^predicted: prefill .* bottleneck: " "$tmp/out" || fail "plan: no prediction"
grep -q "per layer: compute .* weight reads .* KV reads .* KV writes" "$tmp/out" || fail "plan: no per-layer terms"
grep -q "^all resident" "$tmp/out" || fail "plan: no all-resident alternative"
grep -q "^all streamed, batch 1" "$tmp/out" || fail "plan: no all-streamed alternative"
$py - "$tmp/out" <<'P' || fail "plan: memory of the chosen policy exceeds the budget"
import re, sys
t = open(sys.argv[1]).read()
used, budget = map(float, re.search(r"chosen: .*memory ([0-9.]+) of ([0-9.]+) MiB", t).groups())
assert used <= budget, (used, budget)
P
"$bin" plan -m "$m" --mem-budget 8M --prompt-len 20 --gen-len 10 --num-seqs 1 \
    --profile "$tmp/prof.json" >"$tmp/out1" 2>&1 || fail "plan latency: $(cat "$tmp/out1")"
grep -q "^chosen: one sequence, n_batch" "$tmp/out1" || fail "plan latency: $(cat "$tmp/out1")"

# too small for any policy: a clear error, exit 1
"$bin" plan -m "$m" --mem-budget 300K --prompt-len 20 --gen-len 10 --num-seqs 4 \
    --profile "$tmp/prof.json" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] && grep -q "^error: .*budget" "$tmp/err" || fail "tiny budget: exit $rc: $(cat "$tmp/err")"
# a broken profile is refused for its reason: bad_profile NAME JSON EXPECTED-MESSAGE
bad_profile() {
    echo "$2" > "$tmp/bad.json"
    "$bin" plan -m "$m" --mem-budget 8M --prompt-len 4 --gen-len 4 --num-seqs 2 \
        --profile "$tmp/bad.json" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq 1 ] && grep -q "^error: profile .*bad.json: $3" "$tmp/err" ||
        fail "$1: exit $rc: $(cat "$tmp/err")"
}
bad_profile "old profile" '{"tierllm_profile_version": 1, "machine": "x"}' \
    "field 'tierllm_profile_version': unsupported version"
bad_profile "incomplete profile" '{"tierllm_profile_version": 16, "machine": "x"}' \
    "field 'disk_dir' is missing"

# batch: auto (budget given) with stats; the tokens equal a manual run's
cat > "$tmp/in.jsonl" <<'J'
{"prompt": "Once upon a time"}
{"prompt": "The little dog"}
{"prompt": "Lily and Ben went to the park"}
{"prompt": "One day, a big bird"}
{"prompt": "Tom had a red ball."}
{"prompt": "Sam liked to"}
J
"$bin" batch -m "$m" -i "$tmp/in.jsonl" -o "$tmp/auto.jsonl" -n 12 --temp 0 --ignore-eos \
    --mem-budget 8M --profile "$tmp/prof.json" --stats --no-progress --spill-dir "$tmp" \
    2>"$tmp/err" || fail "batch auto: $(cat "$tmp/err")"
grep -q "^policy auto: gbs" "$tmp/err" || fail "batch auto: no policy line: $(cat "$tmp/err")"
grep -q "^\[plan\]   wall .*predicted .* measured" "$tmp/err" || fail "batch auto: no predicted vs measured"
grep -q "^\[plan\]   weight bytes .*predicted .* measured" "$tmp/err" || fail "batch auto: no byte terms"
grep -q "^\[plan\]   KV wait .*predicted .* measured" "$tmp/err" || fail "batch auto: no KV wait term"
grep -q "^\[plan\] re-planning: " "$tmp/err" || fail "batch auto: no re-planning line"
grep -q "^\[fixed\] [0-9.]* s of [0-9.]* s wall (.*%) outside prefill and decode: load [0-9.]* s, plan" \
    "$tmp/err" || fail "batch auto: no fixed-costs line: $(cat "$tmp/err")"
"$bin" batch -m "$m" -i "$tmp/in.jsonl" -o "$tmp/manual.jsonl" -n 12 --temp 0 --ignore-eos \
    --policy manual --no-progress 2>"$tmp/err" || fail "batch manual: $(cat "$tmp/err")"
$py - "$tmp/auto.jsonl" "$tmp/manual.jsonl" <<'P' || fail "auto and manual tokens differ"
import json, sys
a = [json.loads(l)["tokens"] for l in open(sys.argv[1])]
b = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
assert len(a) == 6 and a == b, (a, b)
P
# --policy auto with a knob is a usage error
"$bin" batch -m "$m" -i "$tmp/in.jsonl" -o "$tmp/x.jsonl" --policy auto --gbs 4 \
    --mem-budget 8M >/dev/null 2>&1
[ $? -eq 2 ] || fail "--policy auto --gbs: expected exit 2"

# run: auto with stats; same text as manual
"$bin" run -m "$m" -p "Once upon a time" -n 24 --temp 0 --mem-budget 8M \
    --profile "$tmp/prof.json" --stats >"$tmp/run_auto" 2>"$tmp/err" || fail "run auto: $(cat "$tmp/err")"
grep -q "^policy auto: one sequence" "$tmp/err" || fail "run auto: no policy line: $(cat "$tmp/err")"
grep -q "^\[plan\] decode (predicted vs measured)" "$tmp/err" || fail "run auto: no prediction"
"$bin" run -m "$m" -p "Once upon a time" -n 24 --temp 0 >"$tmp/run_manual" 2>/dev/null
cmp -s "$tmp/run_auto" "$tmp/run_manual" || fail "run auto and manual text differ"

# the minimum a too-small budget's message states is enough when passed back as the budget
# (it is rounded up): run (manual, at a few context sizes, and auto) and plan, each once
# with a 1 KiB budget for the message and once with exactly the figure it printed
min_of() { sed -n 's/.*the minimum is \([0-9.]*\) MiB.*/\1/p' "$tmp/err" | head -1; }
check_minimum() { # check_minimum DESCRIPTION CMD... (the budget flag is appended)
    local what=$1; shift
    "$@" --mem-budget 1K >/dev/null 2>"$tmp/err"
    local min; min=$(min_of)
    [ -n "$min" ] || { fail "$what: no minimum in: $(cat "$tmp/err")"; return; }
    "$@" --mem-budget "${min}M" >/dev/null 2>"$tmp/err" ||
        fail "$what: the stated minimum ${min}M is refused: $(cat "$tmp/err")"
}
for c in 24 40 72 136; do
    check_minimum "run manual -c $c" "$bin" run -m "$m" -p "Once upon a time" -n 4 -c $c \
        --policy manual
done
check_minimum "run auto" "$bin" run -m "$m" -p "Once upon a time" -n 4 --profile "$tmp/prof.json"
for n in 1 3 4; do
    check_minimum "plan --num-seqs $n" "$bin" plan -m "$m" --prompt-len 8 --gen-len 4 \
        --num-seqs $n --profile "$tmp/prof.json"
done
# a batch whose default block and prompt rows need far more than its smallest policy: the
# minimum stated is the smallest policy's (accepted, and 10% less is refused), not the
# default policy's
"$bin" plan -m "$m" --prompt-len 200 --gen-len 16 --num-seqs 4 -c 256 --profile "$tmp/prof.json" \
    --mem-budget 1K >/dev/null 2>"$tmp/err"
grep -q "even its smallest policy" "$tmp/err" || fail "long prompts: $(cat "$tmp/err")"
min=$(min_of)
"$bin" plan -m "$m" --prompt-len 200 --gen-len 16 --num-seqs 4 -c 256 --profile "$tmp/prof.json" \
    --mem-budget "${min}M" >/dev/null 2>"$tmp/err" || fail "long prompts: ${min}M refused: $(cat "$tmp/err")"
less=$(python3 -c "print(round(0.9 * float('$min'), 1))")
"$bin" plan -m "$m" --prompt-len 200 --gen-len 16 --num-seqs 4 -c 256 --profile "$tmp/prof.json" \
    --mem-budget "${less}M" >/dev/null 2>"$tmp/err" && fail "long prompts: the stated minimum ${min}M is not tight (${less}M fits)"

# no saved profile and a budget too small to measure one in: refused at once, saying how
# much measuring needs and to run `tierllm profile` first (run, plan and batch alike)
for cmd in "run -p hi -n 2" "plan --prompt-len 8 --gen-len 4 --num-seqs 2" \
           "batch -i $tmp/in.jsonl -o $tmp/nb.jsonl"; do
    # shellcheck disable=SC2086
    XDG_CACHE_HOME="$tmp/nocache" timeout 10 "$bin" $cmd -m "$m" --mem-budget 50M \
        >/dev/null 2>"$tmp/err"
    rc=$?
    want="^error: no hardware profile .*measuring one needs [0-9.]* MiB"
    want="$want.*budget of 50.0 MiB: run \`tierllm profile\`"
    [ "$rc" -eq 1 ] && grep -q "$want" "$tmp/err" ||
        fail "${cmd%% *} --mem-budget 50M without a profile: exit $rc: $(head -c 400 "$tmp/err")"
done
[ ! -e "$tmp/nocache" ] || [ -z "$(ls -A "$tmp/nocache/tierllm" 2>/dev/null)" ] ||
    fail "a refused measurement left files: $(ls -A "$tmp/nocache/tierllm")"

[ $fails -eq 0 ] && echo "plan_cli: ok" || echo "plan_cli: $fails failure(s)"
exit $((fails > 0))
