#!/usr/bin/env bash
# Convert SmolLM2-135M-Instruct (GGUF, from scripts/fetch-model.sh) once to Hugging Face format for
# vLLM, into the cache outside the clone, and link it at models/smollm2-135m-hf in the repo. Uses the
# vLLM venv (scripts/setup-vllm.sh). Safe to run twice and concurrently: a finished conversion whose
# files still match its SHA256SUMS is reused; the conversion stages then renames.
# Prints the model directory on its last line.
set -euo pipefail
exec </dev/null
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$cache/models/smollm2-135m-hf"

complete() { [ -f "$out/SHA256SUMS" ] && (cd "$out" && sha256sum --check --quiet --strict SHA256SUMS >/dev/null 2>&1); }

if ! complete; then
  python="$("$root/scripts/setup-vllm.sh" | tail -n 1)"
  gguf="$("$root/scripts/fetch-model.sh" | tail -n 1)"
  mkdir -p "$cache/models"
  exec 9>"$cache/models/.smollm2-135m-hf.lock"
  flock -w 1800 9 || { echo "convert-model-hf: could not take the lock" >&2; exit 1; }
  if ! complete; then
    # Offline: the conversion reads the local GGUF only; nothing may come from a hub. Its progress bars
    # go to a log; a failure prints the log's last lines.
    log="$cache/logs/convert-model-hf.log"
    mkdir -p "$cache/logs"
    echo "convert-model-hf: converting $(basename "$gguf") for vLLM (log $log)" >&2
    if ! HF_HUB_OFFLINE=1 HF_HOME="$cache/hf-home" "$python" "$root/scripts/convert_model_hf.py" "$gguf" "$out" \
        bfloat16 >"$log" 2>&1; then
      echo "convert-model-hf: the conversion failed; last lines of $log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    grep -E "^convert-model-hf:" "$log" >&2 || true
  fi
fi
mkdir -p "$root/models"
ln -sfn "$out" "$root/models/smollm2-135m-hf"
echo "$out"
