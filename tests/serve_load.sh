#!/usr/bin/env bash
# serve_load.sh TIERLLM BENCH_SERVE MODELS_DIR [CHECK_RSS] - a bounded load test of
# `tierllm serve` on loopback, memory included:
#  1. a burst of 32 concurrent ~1 MiB bodies that are costly to hold (a long prompt, a
#     million empty JSON objects, a million-character word) is answered without the
#     server's memory following it;
#  2. one light driver process (bench_serve --attach) keeps 32 connections busy with 256
#     streaming completions (stories260K, 128-token prompts, 16 generated each); every
#     response must arrive complete ([DONE], status 200, the 16 tokens asked);
#  3. the server's peak resident memory (VmHWM) stays within --mem-budget + 64 MiB (not
#     checked when CHECK_RSS is 0: sanitizer builds' shadow memory inflates it).
set -u
bin=$1; driver=$2; models=$3; check_rss=${4:-1}
m=$models/stories260K.gguf
budget=48
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/serve_lib.sh"
serve_start "$tmp/err" -m "$m" --mem-budget ${budget}M -c 256 --max-seqs 64 --max-queue 256 ||
    fail "the server did not start: $(cat "$tmp/err")"
python3 - "$tmp" <<'P'
import sys
d = sys.argv[1]
open(d + "/long.json", "w").write('{"prompt": "%s", "max_tokens": 1}' % ("the cat sat " * 87000))
open(d + "/objs.json", "w").write('{"prompt": "x", "max_tokens": 1, "junk": [%s]}' % ",".join(["{}"] * 349000))
open(d + "/word.json", "w").write('{"prompt": "%s", "max_tokens": 1}' % ("x" * 1040000))
P
for i in $(seq 1 32); do
    f=$tmp/$(echo long objs word | cut -d' ' -f$((i % 3 + 1))).json
    curl -s -o "$tmp/burst$i" -w '%{http_code}\n' -H 'Content-Type: application/json' \
        --data-binary @"$f" "http://127.0.0.1:$port/v1/completions" >>"$tmp/codes" &
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
[ "$(grep -c . "$tmp/codes")" = 32 ] || fail "burst: $(grep -c . "$tmp/codes") of 32 answered"
grep -v -q -E '^(400|503)$' "$tmp/codes" && fail "burst: unexpected status $(sort "$tmp/codes" | uniq -c)"
"$driver" --tierllm "$bin" --model "$m" --budget $budget --clients 32 --requests 8 --gen 16 \
    --attach "$port" || fail "the driver saw failed requests"
rss=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
echo "serve_load: server peak resident memory $rss MiB (budget $budget MiB)"
if [ "$check_rss" != 0 ] && [ "$rss" -gt $((budget + 64)) ]; then
    fail "peak resident memory $rss MiB is over the budget + 64 MiB"
fi
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[ "$rc" = 0 ] || fail "the server exited $rc after SIGTERM"
echo "serve_load: ok"
