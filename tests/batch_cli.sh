#!/usr/bin/env bash
# batch_cli.sh TIERLLM MODELS_DIR - `tierllm batch` end to end: JSONL in and out in input
# order; a full or failing spill disk ends the run with a clear error while every result
# completed before the fault stays in the output intact; bad input is refused up front.
set -u
bin=$1; models=$2
m=$models/stories260K.gguf
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tl_batch_cli.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py=/usr/bin/python3

cat > "$tmp/in.jsonl" <<'J'
{"id": "a", "prompt": "Once upon a time"}
{"id": 2, "prompt": "The little dog"}
{"prompt": "Lily and Ben went to the park", "n_predict": 5}
{"id": "d\"q", "prompt": "One day, a big bird"}

{"id": "e", "prompt": "Tom had a red ball.\nHe"}
{"id": "f", "prompt": "Sam liked to \u00e9at"}
J
common=(-m "$m" -i "$tmp/in.jsonl" -n 40 --temp 0 --gbs 2 --num-gb 1 --kv-mem 0
        --spill-dir "$tmp" --no-progress)
"$bin" batch "${common[@]}" -o "$tmp/ok.jsonl" 2>"$tmp/err" || fail "clean run: $(cat "$tmp/err")"
$py - "$tmp/ok.jsonl" <<'P' || fail "clean output is not what was asked"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["a", 2, 2, 'd"q', "e", "f"], [r["id"] for r in rows]
assert all(r["finish_reason"] in ("stop", "length") for r in rows)
assert len(rows[2]["tokens"]) <= 5 and all(len(r["tokens"]) <= 40 for r in rows)
assert rows[0]["text"].startswith(" there was") or len(rows[0]["text"]) > 0
P
grep -q "per generated token: weights read .* KV read .* SSD written" "$tmp/err" || fail "no stats line"
[ -z "$(ls "$tmp"/*.spill 2>/dev/null)" ] || fail "spill file left behind"

for fault in enospc:30 eio:25; do
    TIERLLM_TEST_SPILL_FAULT=$fault "$bin" batch "${common[@]}" -o "$tmp/f.jsonl" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$fault: exit $rc, expected 1"
    case $fault in enospc*) grep -qi "disk full\|no space" "$tmp/err" || fail "$fault: message: $(cat "$tmp/err")";;
                   eio*) grep -qi "injected\|I/O error\|EIO" "$tmp/err" || fail "$fault: message: $(cat "$tmp/err")";; esac
    n=$(wc -l < "$tmp/f.jsonl")
    [ "$n" -ge 1 ] && [ "$n" -lt 6 ] || fail "$fault: $n results written (expected some, not all)"
    head -n "$n" "$tmp/ok.jsonl" | cmp -s - "$tmp/f.jsonl" || fail "$fault: completed results differ"
    [ -z "$(ls "$tmp"/*.spill 2>/dev/null)" ] || fail "$fault: spill file left behind"
done

printf '{"prompt": "ok"}\n{"prompt": "broken\n' > "$tmp/bad.jsonl"
"$bin" batch -m "$m" -i "$tmp/bad.jsonl" -o "$tmp/o.jsonl" --no-progress 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "line 2" "$tmp/err" || fail "malformed JSON: $(cat "$tmp/err")"
printf '{"id": 1}\n' > "$tmp/bad.jsonl"
"$bin" batch -m "$m" -i "$tmp/bad.jsonl" -o "$tmp/o.jsonl" --no-progress 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "prompt" "$tmp/err" || fail "missing prompt: $(cat "$tmp/err")"
long=$(printf 'once upon a time %.0s' $(seq 1 60))
printf '{"prompt": "hi"}\n{"prompt": "%s"}\n' "$long" > "$tmp/bad.jsonl"
"$bin" batch -m "$m" -i "$tmp/bad.jsonl" -o "$tmp/o.jsonl" -c 64 --no-progress 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "prompt 1 is" "$tmp/err" || fail "too long: $(cat "$tmp/err")"
[ ! -s "$tmp/o.jsonl" ] || fail "too long: results were written before the check"
"$bin" batch -m "$m" -i "$tmp/in.jsonl" -o "$tmp/o.jsonl" --kv-bits 5 2>/dev/null
[ $? -eq 1 ] || fail "--kv-bits 5 accepted"

echo "$((fails == 0 ? 1 : 0)) passed, $fails failed"
[ "$fails" -eq 0 ]
