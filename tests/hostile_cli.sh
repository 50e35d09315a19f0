#!/bin/sh
# hostile_cli.sh TIERLLM TEST_GGUF_HOSTILE - the command line on corrupt GGUF files.
# Every corrupt file written by `test_gguf_hostile --write` must make `tierllm run` exit
# with exactly 1 and print "error:" on stderr, with no sanitizer report. `tierllm info`
# reads only the header and hyperparameters, so it must fail the same way on the
# parse-* files (damaged header, metadata or tensor directory) and on the model-* files
# may either refuse (bad hyperparameters) or describe the file (missing or mis-shaped
# tensors, a bad tokenizer), but never crash. The valid model still exits 0. Also: a
# missing path, a directory and an empty file.
set -u
cli=$1
gen=$2
dir=$(mktemp -d /tmp/tl_hostile_cli.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$gen" --write "$dir" > "$dir/gen.log" 2>&1 || { cat "$dir/gen.log"; echo "FAIL: generator"; exit 1; }
: > "$dir/parse-empty-file.gguf"
mkdir "$dir/parse-a-directory.gguf"
fails=0
n=0

# expect RC FILE ARGS...: runs the CLI, checks the exit code and stderr.
expect() {
    want=$1
    shift
    "$cli" "$@" > "$dir/out" 2> "$dir/err"
    rc=$?
    n=$((n + 1))
    bad=""
    if [ "$want" = 0_or_1 ]; then
        [ "$rc" -le 1 ] || bad="exit $rc, want 0 or 1"
        want=0
    else
        [ "$rc" -eq "$want" ] || bad="exit $rc, want $want"
    fi
    if [ "$want" -eq 1 ] && ! grep -q "^error:" "$dir/err"; then bad="$bad; no 'error:'"; fi
    if grep -q "Sanitizer\|runtime error" "$dir/err"; then bad="$bad; sanitizer report"; fi
    if [ -n "$bad" ]; then
        echo "FAIL: tierllm $*: $bad"
        sed 's/^/    /' "$dir/err" | head -20
        fails=$((fails + 1))
    elif [ "$want" -eq 1 ]; then
        echo "ok: $1 $(basename "$3"): $(grep -m1 '^error:' "$dir/err" | cut -c1-150)"
    fi
}

expect 0 info -m "$dir/valid.gguf"
expect 0 run -m "$dir/valid.gguf" -n 1 -t 1 -p "Once"
for f in "$dir"/parse-*.gguf "$dir/parse-does-not-exist.gguf"; do
    expect 1 run -m "$f" -n 1 -t 1
    expect 1 info -m "$f"
done
for f in "$dir"/model-*.gguf; do
    expect 1 run -m "$f" -n 1 -t 1
    expect 0_or_1 info -m "$f"
done
echo "$n command lines, $fails failed"
[ "$fails" -eq 0 ]
