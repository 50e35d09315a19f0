#!/usr/bin/env bash
# batch_cli.sh TIERLLM TIERLLM_TEST MODELS_DIR - `tierllm batch` end to end, as a careless or
# hostile user would drive it: JSONL in and out in input order; nothing the user owns is
# lost (startup failures leave -o untouched, a second writer is refused, non-regular
# targets are refused, kill -9 anywhere then --resume gives exactly the one-shot output,
# SIGTERM keeps every complete result); strict input with errors naming the line;
# per-prompt failures as records while the rest run; spill files that never have a name.
# TIERLLM_TEST is the test build of the CLI (kill and fault hooks, src/tools/test_hooks.h).
set -u
bin=$1; tbin=$2; models=$3
m=$models/stories260K.gguf
[ -f "$m" ] || { echo "FAIL: $m missing"; echo "0 passed, 1 failed"; exit 1; }
fails=0; passes=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tl_batch_cli.XXXXXX")
trap 'jobs -p | xargs -r kill -9 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { passes=$((passes + 1)); }
check() { if eval "$1"; then ok; else fail "$2"; fi; }
py=/usr/bin/python3
spill=$tmp/spill; mkdir -p "$spill"
spill_empty() { [ -z "$(ls -A "$spill")" ]; }

# ---- a clean run: input order, ids echoed as given, the stats line -------------------
cat > "$tmp/in.jsonl" <<'J'
{"id": "a", "prompt": "Once upon a time"}
{"id": 2, "prompt": "The little dog"}
{"prompt": "Lily and Ben went to the park", "n_predict": 5}
{"id": "d\"q", "prompt": "One day, a big bird"}

{"id": 1.50, "prompt": "Tom had a red ball.\nHe"}
{"id": "f", "prompt": "Sam liked to \u00e9at", "n_predict": 0}
J
common=(-m "$m" -n 40 --temp 0 --gbs 2 --num-gb 1 --kv-mem 0 --spill-dir "$spill" --no-progress)
"$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/ok.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ]' "clean run: $(cat "$tmp/err")"
$py - "$tmp/ok.jsonl" <<'P' && ok || fail "clean output is not what was asked"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["a", 2, 2, 'd"q', 1.5, "f"], [r["id"] for r in rows]
assert all(r["finish_reason"] in ("stop", "length") for r in rows)
assert len(rows[2]["tokens"]) <= 5 and all(len(r["tokens"]) <= 40 for r in rows)
assert rows[0]["text"].startswith(", there was"), rows[0]["text"]
# n_predict 0 generates nothing
assert rows[5]["tokens"] == [] and rows[5]["text"] == "" and rows[5]["finish_reason"] == "length", rows[5]
P
check 'grep -q "per generated token: weights read .* KV read .* SSD written" "$tmp/err"' "no stats line"
check spill_empty "spill directory not empty after a run: $(ls -A "$spill")"

# ---- a full or failing spill disk: a clear error, the results before it kept ---------
for fault in enospc:30 eio:25; do
    rm -f "$tmp/f.jsonl"
    TIERLLM_TEST_SPILL_FAULT=$fault "$tbin" batch "${common[@]}" -i "$tmp/in.jsonl" \
        -o "$tmp/f.jsonl" 2>"$tmp/err"
    rc=$?
    check '[ "$rc" -eq 1 ]' "$fault: exit $rc, expected 1"
    case $fault in enospc*) check 'grep -qi "disk full\|no space" "$tmp/err"' "$fault: message: $(cat "$tmp/err")";;
                   eio*) check 'grep -qi "injected\|I/O error\|EIO" "$tmp/err"' "$fault: message: $(cat "$tmp/err")";; esac
    n=$(wc -l < "$tmp/f.jsonl")
    check '[ "$n" -ge 1 ] && [ "$n" -lt 6 ]' "$fault: $n results written (expected some, not all)"
    check 'head -n "$n" "$tmp/ok.jsonl" | cmp -s - "$tmp/f.jsonl"' "$fault: completed results differ"
    check spill_empty "$fault: spill file left behind"
done
# the shipped CLI has no hooks: the same variable changes nothing
rm -f "$tmp/f.jsonl"
TIERLLM_TEST_SPILL_FAULT=enospc:30 "$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/f.jsonl" 2>/dev/null; rc=$?
check '[ $rc -eq 0 ] && cmp -s "$tmp/ok.jsonl" "$tmp/f.jsonl"' "shipped tierllm reacts to a test switch"

# ---- 40 prompts: the one-shot reference -------------------------------------------------
$py - "$tmp/p40.jsonl" <<'P'
import json, sys
starts = ["Once upon a time", "The little dog", "Lily went to", "One day, a big", "Tom had"]
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": "p%02d" % i, "prompt": starts[i % 5] + " " * (i % 3),
                            "n_predict": 8 + (i * 7) % 30}) + "\n")
P
run40=(-m "$m" -i "$tmp/p40.jsonl" --temp 0.8 --seed 7 --gbs 2 --num-gb 2 --kv-mem 50
       --spill-dir "$spill" --no-progress)
"$bin" batch "${run40[@]}" -o "$tmp/ref40.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && [ "$(wc -l < "$tmp/ref40.jsonl")" -eq 40 ]' "40-prompt run: $(cat "$tmp/err")"

# ---- 1. a batch that fails at startup leaves -o as it was ------------------------------
cp "$tmp/ref40.jsonl" "$tmp/keep.jsonl"
"$bin" batch -m "$tmp/missing.gguf" -i "$tmp/p40.jsonl" -o "$tmp/keep.jsonl" --overwrite 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && cmp -s "$tmp/keep.jsonl" "$tmp/ref40.jsonl"' "missing model touched -o: $(cat "$tmp/err")"
"$bin" batch -m "$m" -i "$tmp/p40.jsonl" -o "$tmp/keep.jsonl" --overwrite --mem-budget 1M --policy manual 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "budget" "$tmp/err" && cmp -s "$tmp/keep.jsonl" "$tmp/ref40.jsonl"' \
    "budget too small touched -o: $(cat "$tmp/err")"
"$bin" batch -m "$m" -i "$tmp/p40.jsonl" -o "$tmp/keep.jsonl" --no-progress 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q -- "--resume" "$tmp/err" && cmp -s "$tmp/keep.jsonl" "$tmp/ref40.jsonl"' \
    "existing results without --resume/--overwrite: $(cat "$tmp/err")"
cp "$tmp/p40.jsonl" "$tmp/same.jsonl"
"$bin" batch -m "$m" -i "$tmp/same.jsonl" -o "$tmp/same.jsonl" --overwrite 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "input" "$tmp/err" && cmp -s "$tmp/same.jsonl" "$tmp/p40.jsonl"' \
    "-o equal to -i: $(cat "$tmp/err")"
ln -s "$tmp/same.jsonl" "$tmp/link.jsonl"
"$bin" batch -m "$m" -i "$tmp/same.jsonl" -o "$tmp/link.jsonl" --overwrite 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && cmp -s "$tmp/same.jsonl" "$tmp/p40.jsonl"' "-o a link to -i: $(cat "$tmp/err")"
# --overwrite replaces the file whole (a new inode), with the one-shot output
printf 'old results\n' > "$tmp/over.jsonl"
ino=$(stat -c %i "$tmp/over.jsonl")
"$bin" batch "${run40[@]}" -o "$tmp/over.jsonl" --overwrite 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && cmp -s "$tmp/over.jsonl" "$tmp/ref40.jsonl" && [ "$(stat -c %i "$tmp/over.jsonl")" != "$ino" ]' \
    "--overwrite: $(cat "$tmp/err")"
check '[ -z "$(ls "$tmp" | grep "\.tmp-")" ]' "--overwrite left a temporary file"

# ---- the output's disk fills in the middle of a line: an error, whole lines kept -------
rm -f "$tmp/full.jsonl"
TIERLLM_TEST_OUTPUT_FAULT=enospc:7 "$tbin" batch "${run40[@]}" -o "$tmp/full.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "No space left on device" "$tmp/err"' "output disk full: exit $rc: $(cat "$tmp/err")"
check 'head -n 6 "$tmp/ref40.jsonl" | cmp -s - "$tmp/full.jsonl"' "output disk full: not the 6 whole lines before it"
"$bin" batch "${run40[@]}" -o "$tmp/full.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && cmp -s "$tmp/full.jsonl" "$tmp/ref40.jsonl"' "output disk full, then --resume: $(cat "$tmp/err")"

# ---- kill -9 at seeded points, then --resume: exactly the one-shot output ------------
seed=${TL_TEST_SEED:-12}
points=$($py -c "
import random; r = random.Random($seed)
print(' '.join(['midline:%d' % r.randint(1, 40), 'midline:%d' % r.randint(1, 40),
                'before:%d' % r.randint(1, 40), 'midline:1', 'before:40']))")
for p in $points; do
    rm -f "$tmp/k.jsonl"
    TIERLLM_TEST_KILL=$p "$tbin" batch "${run40[@]}" -o "$tmp/k.jsonl" 2>/dev/null
    rc=$?
    check '[ "$rc" -eq 137 ]' "kill at $p: exit $rc, expected 137 (SIGKILL)"
    n=${p#*:}
    case $p in midline:*) check '[ -s "$tmp/k.jsonl" ] && [ "$(tail -c 1 "$tmp/k.jsonl" | od -An -c | tr -d " ")" != "\\n" ]' \
                              "kill at $p: no torn last line to cut";; esac
    check '[ "$(grep -c "" "$tmp/k.jsonl")" -ge $((n - 1)) ]' "kill at $p: lines before it lost"
    "$bin" batch "${run40[@]}" -o "$tmp/k.jsonl" --resume 2>"$tmp/err"; rc=$?
    check '[ $rc -eq 0 ] && cmp -s "$tmp/k.jsonl" "$tmp/ref40.jsonl"' "kill at $p, then --resume: not the one-shot output: $(cat "$tmp/err")"
    check spill_empty "kill at $p: spill file left behind"
done
# an asynchronous kill -9 at a seeded moment of a slower run, then --resume
slow=(-m "$m" -i "$tmp/p40.jsonl" -n 300 --ignore-eos --temp 0.8 --seed 3 --gbs 1 --num-gb 1
      --kv-mem 0 --spill-dir "$spill" --no-progress)
rm -f "$tmp/s.jsonl"
"$bin" batch "${slow[@]}" -o "$tmp/sref.jsonl" 2>/dev/null
"$bin" batch "${slow[@]}" -o "$tmp/s.jsonl" 2>/dev/null &
pid=$!
sleep "$($py -c "import random; print(round(random.Random($seed).uniform(0.2, 0.6), 3))")"
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
"$bin" batch "${slow[@]}" -o "$tmp/s.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && cmp -s "$tmp/s.jsonl" "$tmp/sref.jsonl"' "async kill -9, then --resume: $(cat "$tmp/err")"

# ---- two writers of one -o ----------------------------------------------------------------
rm -f "$tmp/two.jsonl"
"$bin" batch "${slow[@]}" -o "$tmp/two.jsonl" 2>"$tmp/errA" &
pa=$!
for i in $(seq 500); do [ -s "$tmp/two.jsonl" ] && break; sleep 0.01; done
kill -STOP $pa
"$bin" batch "${slow[@]}" -o "$tmp/two.jsonl" --resume 2>"$tmp/errB"; rb=$?
"$bin" batch "${slow[@]}" -o "$tmp/two.jsonl" --overwrite 2>"$tmp/errC"; rc2=$?
kill -CONT $pa; wait $pa; ra=$?
check '[ $rb -eq 1 ] && grep -q "another tierllm batch" "$tmp/errB"' "second writer (--resume) not refused: rc $rb $(cat "$tmp/errB")"
check '[ $rc2 -eq 1 ] && grep -q "another tierllm batch" "$tmp/errC"' "second writer (--overwrite) not refused: rc $rc2 $(cat "$tmp/errC")"
check '[ $ra -eq 0 ] && cmp -s "$tmp/two.jsonl" "$tmp/sref.jsonl"' "first writer's output damaged: $(cat "$tmp/errA")"
# two started together: one writes, the other is refused, the file is one run's output
rm -f "$tmp/two.jsonl"
"$bin" batch "${run40[@]}" -o "$tmp/two.jsonl" 2>"$tmp/errA" & pa=$!
"$bin" batch "${run40[@]}" -o "$tmp/two.jsonl" 2>"$tmp/errB" & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
check '[ $((ra + rb)) -eq 1 ] && cmp -s "$tmp/two.jsonl" "$tmp/ref40.jsonl"' \
    "racing writers: exits $ra/$rb; $(cat "$tmp/errA" "$tmp/errB" | grep error)"

# ---- SIGTERM mid-run: complete results kept, clean exit, spill gone ----------------------
# The run is stopped (SIGSTOP) once its first results are out, so the signal lands mid-run
# however loaded the machine is; it is handled at the next step after SIGCONT.
rm -f "$tmp/t.jsonl"
"$bin" batch "${slow[@]}" -o "$tmp/t.jsonl" 2>"$tmp/err" &
pid=$!
for i in $(seq 500); do [ -s "$tmp/t.jsonl" ] && break; sleep 0.01; done
kill -STOP $pid
spill_fd=$(ls -l /proc/$pid/fd 2>/dev/null | grep -c "$spill/.*(deleted)")
check '[ "$spill_fd" -ge 1 ] && spill_empty' "while running: the spill file is not an unnamed file in --spill-dir"
kill -TERM $pid
t0=$(date +%s.%N)
kill -CONT $pid; wait $pid; rc=$?
dt=$($py -c "print(round($(date +%s.%N) - $t0, 2))")
check '[ $rc -eq 143 ] && grep -q "stopped by SIGTERM" "$tmp/err"' "SIGTERM: exit $rc: $(tail -2 "$tmp/err")"
check "$py -c 'import sys; sys.exit(0 if $dt < 3 else 1)'" "SIGTERM took ${dt}s to stop"
check spill_empty "SIGTERM: spill file left behind"
n=$(wc -l < "$tmp/t.jsonl")
check '[ "$n" -ge 1 ] && [ "$n" -lt 40 ] && head -n "$n" "$tmp/sref.jsonl" | cmp -s - "$tmp/t.jsonl"' \
    "SIGTERM: $n complete results, not a prefix of the one-shot output"
"$bin" batch "${slow[@]}" -o "$tmp/t.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && cmp -s "$tmp/t.jsonl" "$tmp/sref.jsonl"' "SIGTERM, then --resume: $(cat "$tmp/err")"
# a stop inside a block writes the sequences already complete: ids unique, each line as in
# the one-shot output, --resume completes the set
$py -c "
import json
for i in range(40):
    print(json.dumps({'id': 'q%02d' % i, 'prompt': 'Once upon a time' + ' ' * (i % 3),
                      'n_predict': 20 + ((i * 17) % 40) * 12}))" > "$tmp/q40.jsonl"
big=(-m "$m" -i "$tmp/q40.jsonl" --temp 0.8 --seed 5 --gbs 8 --num-gb 5 -c 520 --ignore-eos
     --no-progress)
"$bin" batch "${big[@]}" -o "$tmp/bref.jsonl" 2>/dev/null
rm -f "$tmp/b.jsonl"
# SIGINT at the step boundary after 4000 tokens (about step 100 of the one block's decode,
# where the prompts with n_predict <= 100 are complete and the others are not)
TIERLLM_TEST_SIGNAL=int:4000 "$tbin" batch "${big[@]}" -o "$tmp/b.jsonl" 2>/dev/null; rc=$?
n=$(wc -l < "$tmp/b.jsonl")
check '[ "$n" -ge 1 ] && [ "$n" -lt 40 ]' "SIGINT inside the block kept $n results (expected those complete, not all)"
"$bin" batch "${big[@]}" -o "$tmp/b.jsonl" --resume 2>"$tmp/err"; rr=$?
check '[ $rc -eq 130 ] && [ $rr -eq 0 ] && [ "$(sort "$tmp/b.jsonl" | uniq | wc -l)" -eq 40 ] && cmp -s <(sort "$tmp/b.jsonl") <(sort "$tmp/bref.jsonl")' \
    "SIGINT inside a block, then --resume: exit $rc/$rr, not the one-shot set of lines"

# ---- outputs that are not regular files --------------------------------------------------
mknod "$tmp/dev" c 1 3
"$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/dev" --overwrite 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "character device" "$tmp/err" && [ -c "$tmp/dev" ]' "-o device node: $(cat "$tmp/err")"
mkdir "$tmp/adir"
"$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/adir" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "directory" "$tmp/err" && [ -d "$tmp/adir" ]' "-o directory: $(cat "$tmp/err")"
mkfifo "$tmp/fifo"
timeout 20 "$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/fifo" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "FIFO" "$tmp/err"' "-o FIFO: $(cat "$tmp/err")"

# ---- hostile JSONL: an error naming the line, and -o never created ------------------------
bad() { # name, expected message fragment, input text
    printf '%s' "$3" > "$tmp/bad.jsonl"
    rm -f "$tmp/o.jsonl"
    "$bin" batch -m "$m" -i "$tmp/bad.jsonl" -o "$tmp/o.jsonl" --no-progress 2>"$tmp/err"
    rc=$?; pat=$2
    check '[ $rc -eq 1 ] && grep -q -- "$pat" "$tmp/err" && [ ! -e "$tmp/o.jsonl" ]' \
        "$1: exit $rc, $(cat "$tmp/err")"
}
ok_line='{"id": 0, "prompt": "hi"}'
bad "id tru" "line 2" "$ok_line"$'\n{"id": tru, "prompt": "x"}\n'
bad "id --1e" "line 2" "$ok_line"$'\n{"id": --1e, "prompt": "x"}\n'
bad "id 1.2.3" "line 2" "$ok_line"$'\n{"id": 1.2.3, "prompt": "x"}\n'
bad "duplicate key" "line 2.*duplicate" "$ok_line"$'\n{"id": 1, "prompt": "x", "prompt": "y"}\n'
bad "NUL escape" "line 2" "$ok_line"$'\n{"id": 1, "prompt": "a\\u0000b"}\n'
bad "array id" "line 2.*id" "$ok_line"$'\n{"id": [1], "prompt": "x"}\n'
bad "object id" "line 1.*id" $'{"id": {"a": 1}, "prompt": "x"}\n'
bad "bool id" "line 1.*id" $'{"id": true, "prompt": "x"}\n'
bad "unterminated" "line 2" $'{"prompt": "ok"}\n{"prompt": "broken\n'
bad "trailing text" "line 1" $'{"prompt": "ok"} x\n'
bad "not an object" "line 1" $'["prompt", "x"]\n'
bad "huge integer id" "line 1" $'{"id": 123456789012345678901234567890, "prompt": "x"}\n'
bad "invalid UTF-8" "line 1" $'{"prompt": "\xff\xfe"}\n'
bad "empty input" "no prompts" $'\n\n'
# a raw NUL byte inside a line
printf '{"prompt": "a\0b"}\n' > "$tmp/nul.jsonl"
"$bin" batch -m "$m" -i "$tmp/nul.jsonl" -o "$tmp/o.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "line 1" "$tmp/err"' "raw NUL byte: $(cat "$tmp/err")"
# "prompt" as the 17th key still counts (no field cap); unknown keys are per-line errors
$py -c "
import json
d = {'k%d' % i: i for i in range(16)}; d['prompt'] = 'Once upon a time'
print(json.dumps(d))" > "$tmp/k17.jsonl"
"$bin" batch -m "$m" -i "$tmp/k17.jsonl" -o "$tmp/o.jsonl" -n 4 --no-progress 2>"$tmp/err"; rc=$?
check '[ $rc -eq 3 ] && grep -q "unknown key \\\\\"k0\\\\\"" "$tmp/o.jsonl"' "17-key line: $(cat "$tmp/o.jsonl" "$tmp/err")"
# read errors are errors, not the end of the file
rm -f "$tmp/o.jsonl"
"$bin" batch -m "$m" -i "$tmp/adir" -o "$tmp/o.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "reading .*: Is a directory" "$tmp/err" && [ ! -e "$tmp/o.jsonl" ]' \
    "input read error (directory): $(cat "$tmp/err")"
"$bin" batch -m "$m" -i /proc/self/mem -o "$tmp/o.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "reading /proc/self/mem.*error" "$tmp/err" && [ ! -e "$tmp/o.jsonl" ]' \
    "input read error (EIO): $(cat "$tmp/err")"
# a line over the size limit (16 MiB), and a file with no newline at all
$py -c "import sys; sys.stdout.write('{\"prompt\": \"' + 'a' * (17 << 20) + '\"}\n')" > "$tmp/huge.jsonl"
"$bin" batch -m "$m" -i "$tmp/huge.jsonl" -o "$tmp/o.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "line 1 is longer than the limit of 16 MiB" "$tmp/err"' "huge line: $(cat "$tmp/err")"
timeout 20 "$bin" batch -m "$m" -i /dev/zero -o "$tmp/o.jsonl" 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "longer than the limit" "$tmp/err"' "/dev/zero input: $(cat "$tmp/err")"

# ---- per-prompt failures: an error record each, the rest run, exit 3 ---------------------
long=$(printf 'once upon a time %.0s' $(seq 1 60))
cat > "$tmp/mixed.jsonl" <<J
{"id": "ok1", "prompt": "Once upon a time"}
{"id": "long", "prompt": "$long"}
{"id": "np", "prompt": "The dog", "n_predict": -1}
{"id": "npf", "prompt": "The dog", "n_predict": 2.5}
{"id": "nps", "prompt": "The dog", "n_predict": "3"}
{"id": "nop"}
{"id": "typo", "prompt": "x", "n_predic": 3}
{"id": "ok2", "prompt": "One day"}
J
"$bin" batch -m "$m" -i "$tmp/mixed.jsonl" -o "$tmp/mixed.out" -c 64 -n 6 --no-progress 2>"$tmp/err"
rc=$?
check '[ $rc -eq 3 ]' "per-prompt failures: exit $rc, expected 3: $(cat "$tmp/err")"
$py - "$tmp/mixed.out" <<'P' && ok || fail "per-prompt error records: $(cat "$tmp/mixed.out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["ok1", "long", "np", "npf", "nps", "nop", "typo", "ok2"], rows
fr = [r["finish_reason"] for r in rows]
assert fr[0] in ("stop", "length") and fr[7] in ("stop", "length"), fr
assert all(f == "error" for f in fr[1:7]), fr
assert "context" in rows[1]["error"] and "ctx-size" in rows[1]["error"], rows[1]
assert all("n_predict" in r["error"] for r in rows[2:5]), rows[2:5]
assert "prompt" in rows[5]["error"] and "n_predic" in rows[6]["error"], rows[5:7]
assert len(rows[0]["tokens"]) > 0 and len(rows[7]["tokens"]) > 0
P

# ---- sampler settings: the same check and message in run and batch -----------------------
for flag in "--temp -1" "--top-p 0" "--top-p 1.5" "--repeat-penalty 0"; do
    "$bin" batch -m "$m" -i "$tmp/in.jsonl" -o "$tmp/o2.jsonl" $flag 2>"$tmp/eb"; rb=$?
    "$bin" run -m "$m" -p hi -n 2 $flag 2>"$tmp/er" >/dev/null; rr=$?
    check '[ $rb -eq 2 ] && [ $rr -eq 2 ] && [ -s "$tmp/eb" ] && cmp -s "$tmp/eb" "$tmp/er" && [ ! -e "$tmp/o2.jsonl" ]' \
        "$flag: batch $rb '$(cat "$tmp/eb")' vs run $rr '$(cat "$tmp/er")'"
done

# ---- --resume needs ids, unique; refuses a file that is not ours -------------------------
printf '{"id": 1, "prompt": "a"}\n{"prompt": "b"}\n' > "$tmp/noid.jsonl"
"$bin" batch -m "$m" -i "$tmp/noid.jsonl" -o "$tmp/r.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "line 2: no \"id\"" "$tmp/err"' "--resume without ids: $(cat "$tmp/err")"
printf '{"id": 1, "prompt": "a"}\n{"id": 1.0, "prompt": "b"}\n{"id": "1", "prompt": "c"}\n{"id": 1, "prompt": "d"}\n' > "$tmp/dup.jsonl"
"$bin" batch -m "$m" -i "$tmp/dup.jsonl" -o "$tmp/r.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "lines 1 and 4 have the same id 1" "$tmp/err"' "--resume duplicate ids: $(cat "$tmp/err")"
printf 'my notes, not results\n' > "$tmp/notes.txt"
cp "$tmp/notes.txt" "$tmp/notes.bak"
"$bin" batch "${run40[@]}" -o "$tmp/notes.txt" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "not a result line" "$tmp/err" && cmp -s "$tmp/notes.txt" "$tmp/notes.bak"' \
    "--resume into a foreign file: $(cat "$tmp/err")"
"$bin" batch "${run40[@]}" -o "$tmp/ref40.jsonl" --resume 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && grep -q "40 of 40 prompts already done" "$tmp/err" && [ "$(wc -l < "$tmp/ref40.jsonl")" -eq 40 ]' \
    "--resume of a finished run: $(cat "$tmp/err")"

# ---- --weights-copy on: a converted copy in the cache directory, written once, the same
# output as without it; the model file unchanged; a bad value is a usage error ----------
"$bin" synth --type q8_0 --seed 5 --embd 128 --ff 384 --heads 4 --kv-heads 4 -o "$tmp/q8.gguf" >/dev/null 2>&1 || fail "synth q8_0"
cksum < "$tmp/q8.gguf" > "$tmp/q8.sum"
# most weights stream under this budget (the activations take ~8.2 MiB at -c 64)
q8=(-m "$tmp/q8.gguf" -i "$tmp/in.jsonl" -n 8 -c 64 --temp 0 --gbs 2 --num-gb 1 --no-progress --mem-budget 8600K --policy manual)
XDG_CACHE_HOME=$tmp/cache "$bin" batch "${q8[@]}" -o "$tmp/c0.jsonl" --weights-copy off 2>"$tmp/err"; rc=$?
check '[ $rc -eq 0 ] && { [ ! -e "$tmp/cache/tierllm" ] || [ -z "$(ls "$tmp/cache/tierllm" | grep panels)" ]; }' \
    "--weights-copy off: rc $rc, $(ls "$tmp/cache/tierllm" 2>&1) $(cat "$tmp/err")"
XDG_CACHE_HOME=$tmp/cache "$bin" batch "${q8[@]}" -o "$tmp/c1.jsonl" --weights-copy on 2>"$tmp/err"; rc=$?
if grep -q "wrote a converted copy" "$tmp/err"; then
    check '[ $rc -eq 0 ] && cmp -s "$tmp/c0.jsonl" "$tmp/c1.jsonl" && [ "$(ls "$tmp/cache/tierllm" | grep -c "^panels-.*\.gguf$")" -eq 1 ]' \
        "--weights-copy on: rc $rc, outputs differ or no single copy: $(cat "$tmp/err")"
    XDG_CACHE_HOME=$tmp/cache "$bin" batch "${q8[@]}" -o "$tmp/c2.jsonl" --weights-copy on 2>"$tmp/err"; rc=$?
    check '[ $rc -eq 0 ] && grep -q "streaming the weights from the converted copy" "$tmp/err" && cmp -s "$tmp/c0.jsonl" "$tmp/c2.jsonl"' \
        "--weights-copy on, second run: rc $rc, $(cat "$tmp/err")"
else  # a CPU without AVX-512 VNNI keeps the file's layout: nothing to convert
    check '[ $rc -eq 0 ] && cmp -s "$tmp/c0.jsonl" "$tmp/c1.jsonl" && ! grep -q "converted copy" "$tmp/err"' \
        "--weights-copy on without panels: rc $rc, $(cat "$tmp/err")"
fi
check 'cksum < "$tmp/q8.gguf" | cmp -s - "$tmp/q8.sum"' "the model file changed"
"$bin" batch "${q8[@]}" -o "$tmp/c3.jsonl" --weights-copy maybe 2>"$tmp/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "expects auto, on or off" "$tmp/err" && [ ! -e "$tmp/c3.jsonl" ]' "--weights-copy maybe: rc $rc"

"$bin" batch "${common[@]}" -i "$tmp/in.jsonl" -o "$tmp/o3.jsonl" --kv-bits 5 2>/dev/null; rc=$?
check '[ $rc -eq 1 ] && [ ! -e "$tmp/o3.jsonl" ]' "--kv-bits 5 accepted or -o created"
check spill_empty "spill directory not empty at the end: $(ls -A "$spill")"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
