#!/usr/bin/env bash
# serve_openai.sh TIERLLM MODELS_DIR - the official `openai` npm client (pinned in
# tests/node/package.json, installed from the npm registry by `npm ci` on first use) does
# completions, chat and streaming against `tierllm serve` on stories260K, with an API key
# and the ChatML template; its completion text must be `tierllm run`'s greedy text
# (tests/node/openai_client.mjs says what else it checks).
set -u
bin=$1; models=$2
here=$(cd "$(dirname "$0")" && pwd)
m=$models/stories260K.gguf
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
[ -f "$m" ] || { echo "FAIL: missing $m"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null ||
    { echo "FAIL: node and npm are needed (scripts/deps.sh installs them)"; exit 1; }
if [ ! -f "$here/node/node_modules/openai/package.json" ]; then
    (cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error) ||
        { echo "FAIL: npm ci in tests/node (the npm registry must be reachable)"; exit 1; }
fi
prompt="Once upon a time"; n=24
"$bin" run -m "$m" -p "$prompt" -n $n --temp 0 >"$tmp/run.txt" 2>/dev/null ||
    { echo "FAIL: tierllm run"; exit 1; }
expect=$(python3 -c 'import sys; o = open(sys.argv[1]).read(); assert o.startswith(sys.argv[2]); print(o[len(sys.argv[2]):-1], end="")' "$tmp/run.txt" "$prompt") ||
    { echo "FAIL: run's output does not echo the prompt"; exit 1; }
. "$here/serve_lib.sh"
serve_start "$tmp/err" -m "$m" --api-key sekrit --chat-template chatml -c 256 ||
    { echo "FAIL: the server did not start: $(cat "$tmp/err")"; exit 1; }
TL_BASE_URL="http://127.0.0.1:$port/v1" TL_API_KEY=sekrit TL_PROMPT="$prompt" TL_EXPECT="$expect" \
    TL_N=$n timeout 120 node "$here/node/openai_client.mjs" || { echo "FAIL: openai client"; exit 1; }
kill -TERM "$pid"
wait "$pid"; rc=$?
pid=
[ "$rc" = 0 ] || { echo "FAIL: the server exited $rc after SIGTERM"; exit 1; }
echo "serve_openai: ok"
