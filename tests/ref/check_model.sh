#!/bin/sh
# check_model.sh TIERLLM TOL TOKENS MODEL_OR_SYNTH [engine args...]
# Compares the engine's logits with the NumPy reference. If MODEL_OR_SYNTH starts with
# "synth:", the rest are `tierllm synth` flags and a model is synthesized into a
# temporary directory first. Needs Debian's python3-numpy (/usr/bin/python3).
set -eu
tierllm=$1; tol=$2; tokens=$3; model=$4; shift 4
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$model" in
synth:*)
    flags=${model#synth:}
    # shellcheck disable=SC2086
    "$tierllm" synth $flags -o "$tmp/synth.gguf" >/dev/null
    model="$tmp/synth.gguf"
    echo "synthesized: $flags" ;;
esac
extra=""
for a in "$@"; do extra="$extra --engine-arg=$a"; done
# not exec: the trap above removes the temporary directory when the comparison ends
# shellcheck disable=SC2086
/usr/bin/python3 "$here/compare_logits.py" --tierllm "$tierllm" --model "$model" \
    --tokens "$tokens" --tol "$tol" $extra
