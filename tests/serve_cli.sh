#!/usr/bin/env bash
# serve_cli.sh TIERLLM MODELS_DIR - end-to-end checks of `tierllm serve` through curl: every
# endpoint, the OpenAI error shapes, streaming, greedy text equal to `tierllm run` alone
# and among 15 concurrent requests, the queue's 503, a slowloris client cut off at the
# timeout without holding others up, and SIGTERM draining a stream before exiting 0.
# Servers listen on port 0 (the kernel's choice, read from the startup line), so runs in
# parallel never collide; every server started is killed on exit.
set -u
bin=$1; models=$2
m=$models/stories260K.gguf
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ -f "$m" ] || { echo "FAIL: missing $m"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl is not installed (scripts/deps.sh)"; exit 1; }

# start NAME ARGS...: starts a server, sets $port and $pid (log in $tmp/NAME.err)
start() {
    local name=$1; shift
    "$bin" serve -m "$m" --port 0 "$@" 2>"$tmp/$name.err" &
    pid=$!
    pids+=("$pid")
    port=
    for _ in $(seq 1 100); do
        port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9]*\) .*|\1|p' "$tmp/$name.err")
        [ -n "$port" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL: server $name did not start: $(cat "$tmp/$name.err")"
    exit 1
}
# json FILE EXPR: a Python expression over the parsed body `j`
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }
# code: the HTTP status of the last request (curl -w)
key=sekrit
req() { # req PATH [curl args...] -> body in $tmp/body, status in $code
    local path=$1; shift
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $key" "$@" \
           "http://127.0.0.1:$port$path")
}
post() { req "$1" -H 'Content-Type: application/json' --data-binary "$2"; }
expect() { # expect CODE WHAT
    [ "$code" = "$1" ] || fail "$2: status $code, expected $1 ($(head -c 300 "$tmp/body"))"
}
# expect_error CODE WHAT [ERROR_CODE [PARAM]]: the status now; the body's OpenAI error
# shape (and its code and param) in one batch at the end (Python starts slowly)
nerr=0
expect_error() {
    expect "$1" "$2"
    nerr=$((nerr + 1))
    cp "$tmp/body" "$tmp/err$nerr.json"
    printf '%s\t%s\t%s\t%s\n' "err$nerr.json" "$2" "${3:-}" "${4:-}" >>"$tmp/errors.tsv"
}
check_errors() {
    python3 - "$tmp" <<'PY' || fail "error bodies"
import json, sys
ok = True
for line in open(sys.argv[1] + "/errors.tsv"):
    name, what, code, param = line.rstrip("\n").split("\t")
    try:
        e = json.load(open(sys.argv[1] + "/" + name))["error"]
        assert sorted(e) == ["code", "message", "param", "type"], "keys %s" % sorted(e)
        assert isinstance(e["message"], str) and e["message"], "no message"
        assert not code or e["code"] == code, "code %r" % e["code"]
        assert not param or e["param"] == param, "param %r" % e["param"]
    except Exception as x:
        print("FAIL: %s: not the expected OpenAI error (%s): %s" % (what, x, open(sys.argv[1] + "/" + name).read()[:300]))
        ok = False
sys.exit(0 if ok else 1)
PY
}
# lt A B: A < B for decimals
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

prompt="Once upon a time"
"$bin" run -m "$m" -p "$prompt" -n 40 --temp 0 >"$tmp/run.txt" 2>/dev/null
python3 - "$tmp/run.txt" "$prompt" >"$tmp/golden.txt" <<'EOF'
import sys
out = open(sys.argv[1]).read()
assert out.startswith(sys.argv[2]) and out.endswith("\n")
sys.stdout.write(out[len(sys.argv[2]):-1])
EOF
golden=$(cat "$tmp/golden.txt")
[ -n "$golden" ] || fail "tierllm run gave no text"

# ---- server A: an API key, a 2 s request timeout, a small context ----
start a --api-key "$key" --timeout 2 -c 256
grep -q "no chat template" "$tmp/a.err" || fail "no startup message about the chat template"

code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/health")
[ "$code" = 200 ] || fail "/health without a key: $code"
req /v1/models; expect 200 "/v1/models"
[ "$(json "$tmp/body" "j['data'][0]['id']")" = "stories260K" ] || fail "models: $(cat "$tmp/body")"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
expect_error 401 "no API key"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer nope" \
       "http://127.0.0.1:$port/v1/models")
expect_error 401 "wrong API key"

# greedy text equals `tierllm run`, plain and streamed
body='{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}'
post /v1/completions "$body"; expect 200 "completion"
python3 - "$tmp/body" "$golden" <<'EOF' || fail "completion: $(cat "$tmp/body")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["choices"][0]["text"] == sys.argv[2], "greedy text differs from run: %r" % j["choices"][0]["text"]
assert j["object"] == "text_completion" and j["model"] == "stories260K" and j["id"]
assert j["choices"][0]["finish_reason"] == "length" and j["choices"][0]["index"] == 0
assert j["usage"] == {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}
EOF
post /v1/completions '{"model": "stories260K", "prompt": ["Once upon a time"], "max_tokens": 40, "temperature": 0}'
expect 200 "prompt as an array of one string, the served model's name"
[ "$(json "$tmp/body" "j['choices'][0]['text']")" = "$golden" ] || fail "array prompt text"
post /v1/completions '{"model": "default", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": true}'
expect 200 "stream"
python3 - "$tmp/body" "$golden" <<'EOF' || fail "stream: $(head -c 600 "$tmp/body")"
import json, sys
raw = open(sys.argv[1]).read()
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), "not SSE"
assert events[-1] == "data: [DONE]", "no [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert len(chunks) >= 2, "too few chunks"
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == sys.argv[2], "streamed text differs: %r" % text
assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
last = chunks[-1]
assert last["choices"][0]["finish_reason"] == "length"
assert last["usage"] == {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45}
assert all("usage" not in c for c in chunks[:-1])
EOF

# stop strings: the text ends before the first one, which is not sent, streamed or not
stop_at=${golden#*Lily}; stop_at=Lily${stop_at:0:2}
want=${golden%%"$stop_at"*}
post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 40, \"temperature\": 0, \"stop\": [\"zzz\", \"$stop_at\"]}"
expect 200 "stop strings"
[ "$(json "$tmp/body" "j['choices'][0]['text'] + '|' + j['choices'][0]['finish_reason']")" = "$want|stop" ] ||
    fail "stop string: $(cat "$tmp/body")"
post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 40, \"temperature\": 0, \"stop\": \"$stop_at\", \"stream\": true}"
python3 - "$tmp/body" "$want" <<'EOF' || fail "streamed stop string: $(head -c 600 "$tmp/body")"
import json, sys
events = [e for e in open(sys.argv[1]).read().split("\n\n") if e]
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert "".join(c["choices"][0]["text"] for c in chunks) == sys.argv[2]
assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
EOF

# chat without a recognised template: 400 saying what to do
post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}'
expect_error 400 "chat without a template"
grep -q -- "--chat-template" "$tmp/body" || fail "chat error does not name --chat-template"

# errors, each in OpenAI's shape
post /v1/completions '{"prompt": "x", "max_tokens": 4'; expect_error 400 "malformed JSON"
post /v1/completions '[1, 2]'; expect_error 400 "not an object"
post /v1/completions '{"prompt": 5}'; expect_error 400 "prompt of the wrong type"
post /v1/completions '{"prompt": "x", "max_tokens": "5"}'; expect_error 400 "max_tokens a string" "" max_tokens
post /v1/completions '{"prompt": "x", "max_tokens": -1}'; expect_error 400 "negative max_tokens"
post /v1/completions '{"prompt": "x", "max_tokens": 1000000}'; expect_error 400 "huge max_tokens"
post /v1/completions '{"prompt": "x", "temperature": "hot"}'; expect_error 400 "temperature a string"
post /v1/completions '{"prompt": "x", "temperature": 3}'; expect_error 400 "temperature out of range"
post /v1/completions '{"prompt": "x", "stop": [1]}'; expect_error 400 "stop of the wrong type"
post /v1/completions '{"prompt": "x", "stop": ["a","b","c","d","e"]}'; expect_error 400 "five stop strings"
post /v1/completions '{"prompt": "x", "n": 2}'; expect_error 400 "n = 2"
post /v1/completions '{"prompt": "x", "stream": "yes"}'; expect_error 400 "stream a string"
post /v1/completions '{"prompt": "x", "prompt": "y"}'; expect_error 400 "duplicate key"
long=$(printf 'once upon a time %.0s' $(seq 1 100))
post /v1/completions "{\"prompt\": \"$long\"}"
expect_error 400 "prompt longer than the context" context_length_exceeded prompt
# refused before tokenizing: longer in bytes than the context's tokens can hold
post /v1/completions "{\"prompt\": \"$(printf 'x%.0s' $(seq 1 20000))\"}"
expect_error 400 "prompt too long to tokenize" context_length_exceeded prompt
grep -q "is at least" "$tmp/body" || fail "a 20000-byte prompt was tokenized: $(head -c 300 "$tmp/body")"
# refused before parsing: more JSON values than a request has
python3 -c 'print("{\"prompt\": \"x\", \"junk\": [" + ",".join(["0"] * 70000) + "]}")' >"$tmp/many.json"
req /v1/completions -H 'Content-Type: application/json' --data-binary "@$tmp/many.json"
expect_error 400 "70000 JSON values"
grep -q "more than 65536 JSON values" "$tmp/body" || fail "70000 values: $(head -c 300 "$tmp/body")"
printf '{"prompt": "bad \xff\xfe utf-8"}' >"$tmp/bad.json"
req /v1/completions -H 'Content-Type: application/json' --data-binary "@$tmp/bad.json"
expect_error 400 "invalid UTF-8"
post /v1/completions '{"prompt": "x", "model": "gpt-4"}'; expect_error 404 "unknown model" model_not_found model
req /v1/nothing; expect_error 404 "unknown path"
req /v1/completions; expect_error 405 "GET on a POST endpoint"
head -c $((2 << 20)) /dev/zero | tr '\0' 'a' >"$tmp/big.json"
req /v1/completions -H 'Content-Type: application/json' --data-binary "@$tmp/big.json"
expect_error 413 "2 MiB body"

# greedy text among 15 concurrent requests (16 sequences in flight) equals run's
for i in $(seq 1 15); do
    curl -s -o "$tmp/bg$i" -w '%{http_code}' -H "Authorization: Bearer $key" \
        "http://127.0.0.1:$port/v1/completions" \
        -d "{\"prompt\": \"The dog $i\", \"max_tokens\": 200, \"temperature\": 0.9, \"seed\": $i, \"stream\": $([ $((i % 2)) = 0 ] && echo true || echo false)}" \
        >"$tmp/bg$i.code" &
done
post /v1/completions "$body"; expect 200 "completion among others"
[ "$(json "$tmp/body" "j['choices'][0]['text']")" = "$golden" ] ||
    fail "greedy text among 15 others differs from run"
wait_bg() { for i in $(seq 1 15); do while [ ! -s "$tmp/bg$i.code" ]; do sleep 0.05; done; done; }
wait_bg
for i in $(seq 1 15); do [ "$(cat "$tmp/bg$i.code")" = 200 ] || fail "background request $i: $(cat "$tmp/bg$i.code")"; done
# the same seed gives the same text
post /v1/completions '{"prompt": "The dog 3", "max_tokens": 200, "temperature": 0.9, "seed": 3}'
cmp -s <(json "$tmp/body" "j['choices'][0]['text']") <(json "$tmp/bg3" "j['choices'][0]['text']") ||
    fail "a seeded request alone and among others differ"

# a client sending its headers a byte at a time is cut off at the timeout (2 s), and
# does not hold up others meanwhile
python3 - "$port" >"$tmp/slow.out" <<'EOF' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(0.25)
t0 = time.time()
req = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
for b in req:
    try:
        s.send(bytes([b]))
        if s.recv(100) == b"":
            break
    except socket.timeout:
        continue
    except OSError:
        break
print("%.2f" % (time.time() - t0))
EOF
slow=$!
sleep 0.5
t0=$(date +%s.%N)
post /v1/completions '{"prompt": "Once", "max_tokens": 8}'; expect 200 "request beside a slow client"
t1=$(date +%s.%N)
lt "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" 1.5 || fail "a request beside a slow client took over 1.5 s"
wait "$slow"
t=$(cat "$tmp/slow.out")
lt 1.5 "$t" && lt "$t" 4.5 || fail "slow client cut after '$t' s, not ~2"

req /metrics; expect 200 "/metrics"
for name in 'tierllm_requests_total{endpoint="/v1/completions",status="200"}' \
            'tierllm_requests_total{endpoint="/v1/completions",status="400"}' \
            'tierllm_requests_total{endpoint="other",status="404"}' \
            tierllm_prompt_tokens_total tierllm_generated_tokens_total tierllm_queue_depth \
            tierllm_active_sequences tierllm_weight_bytes_read_total tierllm_stall_seconds_total \
            tierllm_kv_pages_memory_peak; do
    grep -qF "$name " "$tmp/body" || fail "metrics lack $name"
done
grep -q "^tierllm_kv_pages_memory_peak [1-9]" "$tmp/body" ||
    fail "no KV page counted after requests ran: $(grep kv_pages "$tmp/body")"
# a path that is not UTF-8 is still a 404 in OpenAI's shape (the message quotes it)
req "/v1/%FF"; expect_error 404 "a path of invalid UTF-8"
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] || fail "server A exit $rc after SIGTERM"

# ---- server B: one sequence and one waiting place; a chat template by name ----
start b --max-seqs 1 --max-queue 1 --chat-template chatml
key=
post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell a story"}], "max_tokens": 12, "temperature": 0}'
expect 200 "chat with --chat-template chatml"
[ "$(json "$tmp/body" "j['object'], j['choices'][0]['message']['role'], j['usage']['completion_tokens']")" = \
  "chat.completion assistant 12" ] || fail "chat fields: $(cat "$tmp/body")"
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "stream": true}'
python3 - "$tmp/body" <<'EOF' || fail "chat stream: $(head -c 600 "$tmp/body")"
import json, sys
events = [e for e in open(sys.argv[1]).read().split("\n\n") if e]
assert events[-1] == "data: [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[0]["object"] == "chat.completion.chunk"
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert chunks[-1]["usage"]["completion_tokens"] == 5
EOF
post /v1/chat/completions '{"messages": [{"role": "tool", "content": "x"}]}'; expect_error 400 "chat role tool"
post /v1/chat/completions '{"messages": []}'; expect_error 400 "no messages"

# a full queue answers 503 with Retry-After: of 8 long requests sent at once, one runs,
# one waits, the others are refused at once
long_req='{"prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0}'
for i in $(seq 1 8); do
    curl -s -D "$tmp/qh$i" -o "$tmp/q$i" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
        -d "$long_req" >"$tmp/q$i.code" &
done
wait_q() { for i in $(seq 1 8); do while [ ! -s "$tmp/q$i.code" ]; do sleep 0.05; done; done; }
wait_q
ok=0; busy=0
for i in $(seq 1 8); do
    case $(cat "$tmp/q$i.code") in
    200) ok=$((ok + 1)); grep -q '"completion_tokens":1900' "$tmp/q$i" || fail "queued request $i";;
    503) busy=$((busy + 1))
         grep -qi '^Retry-After: ' "$tmp/qh$i" || fail "503 without Retry-After"
         code=503; cp "$tmp/q$i" "$tmp/body"; expect_error 503 "a request past the queue";;
    *) fail "request $i of 8: status $(cat "$tmp/q$i.code")";;
    esac
done
[ "$ok" -ge 2 ] && [ "$busy" -ge 1 ] || fail "8 requests at once: $ok answered, $busy refused"

# SIGTERM during a stream: the stream is finished in full, then the server exits 0
curl -sN --limit-rate 200k -o "$tmp/drain" "http://127.0.0.1:$port/v1/completions" \
    -d '{"prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0, "stream": true}' &
streaming=$!
for _ in $(seq 1 100); do [ -s "$tmp/drain" ] && break; sleep 0.02; done
kill -TERM "$pid"
wait "$streaming"
wait "$pid"; rc=$?
[ "$rc" = 0 ] || fail "server B exit $rc after SIGTERM during a stream"
python3 - "$tmp/drain" <<'EOF' || fail "drained stream incomplete: $(tail -c 300 "$tmp/drain")"
import json, sys
events = [e for e in open(sys.argv[1]).read().split("\n\n") if e]
assert events[-1] == "data: [DONE]"
last = json.loads(events[-2][6:])
assert last["choices"][0]["finish_reason"] == "length"
assert last["usage"]["completion_tokens"] == 1900
EOF
grep -q "SIGTERM" "$tmp/b.err" || fail "no drain message"

# ---- server C: Llama 2's template on a Llama 2 vocabulary: the rendered "<s>" is the BOS
# token (special tokens parsed) and no second BOS is added, so the chat's prompt is the
# completion prompt "[INST] Hi [/INST]" with its BOS, token for token ----
m=$models/llama-2-tiny-random.gguf
start c --chat-template llama2 -c 128
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}'
expect 200 "llama2 chat"
cp "$tmp/body" "$tmp/chat.json"
post /v1/completions '{"prompt": "[INST] Hi [/INST]", "max_tokens": 6, "temperature": 0}'
expect 200 "llama2 completion"
python3 - "$tmp/chat.json" "$tmp/body" <<'EOF' || fail "llama2 chat vs completion: $(cat "$tmp/chat.json") $(cat "$tmp/body")"
import json, sys
c, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert c["usage"] == p["usage"], (c["usage"], p["usage"])
assert c["choices"][0]["message"]["content"] == p["choices"][0]["text"]
EOF
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] || fail "server C exit $rc after SIGTERM"

# ---- server D: a model slow enough that 2000 tokens take seconds: clients that leave
# streamed and non-streamed requests while tokens flow stop their generation ----
m=$tmp/slow.gguf
"$bin" synth --embd 512 --ff 1024 --layers 8 --heads 8 --kv-heads 8 --ctx 2048 -o "$m" \
    >/dev/null 2>&1 || fail "synth a slower model"
start d -c 2048
key=
for stream in false true false true; do
    curl -s -m 0.5 -o /dev/null -H 'Content-Type: application/json' --data-binary \
        "{\"prompt\": \"Once\", \"max_tokens\": 2000, \"ignore_eos\": true, \"stream\": $stream}" \
        "http://127.0.0.1:$port/v1/completions"
done
active=x
for _ in $(seq 1 20); do
    req /metrics
    active=$(sed -n 's/^tierllm_active_sequences \([0-9]*\)$/\1/p' "$tmp/body")
    gen=$(sed -n 's/^tierllm_generated_tokens_total \([0-9]*\)$/\1/p' "$tmp/body")
    [ "$active" = 0 ] && break
    sleep 0.1
done
[ "$active" = 0 ] || fail "requests whose clients left still run ($active active 2 s later)"
[ -n "$gen" ] && [ "$gen" -lt 4000 ] || fail "the abandoned requests generated $gen tokens"
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] || fail "server D exit $rc after SIGTERM"

# --policy auto (the default with --mem-budget): a plan from a fixed profile, printed at
# startup; the planned server gives run's greedy text
python3 "$(dirname "$0")/write_profile.py" "$tmp/prof.json"
m=$models/stories260K.gguf
start e --mem-budget 64M --profile "$tmp/prof.json" --expect-prompt 16 --expect-gen 40 -c 128
grep -q "^policy auto: [0-9]* sequences, KV \(32\|16\)-bit .*, prefill chunk up to" "$tmp/e.err" &&
    grep -q "^predicted at full load (requests of 16 + 40 tokens)" "$tmp/e.err" ||
    fail "auto: no plan printed: $(cat "$tmp/e.err")"
post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}'
expect 200 "auto: completion"
got=$(json "$tmp/body" "j['choices'][0]['text']")
[ "$got" = "$golden" ] || fail "auto: greedy text differs: $got"
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] && grep -q "re-planning: [0-9]* checks" "$tmp/e.err" ||
    fail "auto: exit $rc, $(tail -2 "$tmp/e.err")"

# KV in tiers: a 200-token generation keeps its sinks and last 8 positions in memory and
# reads the rest back from disk at every step, with run's greedy text (a page is read back
# once its write has completed; until then its write buffer serves it, so the generation
# is long enough for this disk's slowest writes to complete)
"$bin" run -m "$m" -p "$prompt" -n 200 --temp 0 >"$tmp/run200.txt" 2>/dev/null
start f --kv-window 8 --spill-dir "$tmp" -c 256
post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0}'
expect 200 "tiers: completion"
got=$(json "$tmp/body" "j['choices'][0]['text']")
[ "$prompt$got" = "$(head -c -1 "$tmp/run200.txt")" ] || fail "tiers: greedy text differs: $got"
req /metrics; expect 200 "tiers: metrics"
disk=$(sed -n 's/^tierllm_kv_pages_disk_peak \([0-9]*\)$/\1/p' "$tmp/body")
kvread=$(sed -n 's/^tierllm_kv_bytes_read_total \([0-9]*\)$/\1/p' "$tmp/body")
[ -n "$disk" ] && [ "$disk" -gt 0 ] && [ -n "$kvread" ] && [ "$kvread" -gt 0 ] ||
    fail "tiers: no KV pages on disk ($disk) or read back ($kvread)"
kill -TERM "$pid"; wait "$pid"

# usage errors
"$bin" serve -m "$m" --policy auto --max-seqs 4 2>/dev/null; [ $? = 2 ] ||
    fail "auto with --max-seqs: not a usage error"
"$bin" serve -m "$m" --expect-gen 8 2>/dev/null; [ $? = 2 ] ||
    fail "--expect-gen without auto: not a usage error"
"$bin" serve -m "$m" --policy sometimes 2>/dev/null; [ $? = 2 ] || fail "bad --policy"
"$bin" serve -m "$m" --port 70000 2>/dev/null; [ $? = 2 ] || fail "bad port: not a usage error"
"$bin" serve -m "$m" --chat-template jinja 2>/dev/null; [ $? = 2 ] || fail "bad template name"
"$bin" serve 2>/dev/null; [ $? = 2 ] || fail "no model: not a usage error"

check_errors
[ "$fails" = 0 ] && echo "serve_cli: all checks passed"
exit $((fails > 0))
