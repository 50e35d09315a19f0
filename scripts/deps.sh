#!/usr/bin/env bash
# deps.sh - installs the Debian packages tierllm's build, tests and fuzzing need, only
# those that are missing. Safe to run repeatedly.
set -euo pipefail
need=(build-essential cmake python3-numpy clang libclang-rt-14-dev liburing-dev coinor-libclp-dev libjansson-dev libmicrohttpd-dev curl libopenmpi-dev openmpi-bin)
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm run the official openai client test (tests/serve_openai.sh); a machine
# that has them from elsewhere (NodeSource) keeps its own
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
