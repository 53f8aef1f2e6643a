#!/usr/bin/env bash
# Install SGLang for the CPU into its own venv in the cache, outside the clone, once per version, and prove
# it by serving one completion before the marker is written. Safe to run twice and concurrently (a lock; a
# finished install is reused; an unfinished one has no marker and is redone from scratch). Writes
# $home/bin/sglang-cpu-python, a wrapper that runs the venv's python with SGLang's CPU engine switched on:
# put that folder on PATH and a contract names `executable: sglang-cpu-python`. Prints the wrapper's path on
# its last line. docs/engines.md ("SGLang") has the facts behind every step.
#
# What this is and is not (SGLang 0.5.23 on this machine kind, an x86-64 CPU without AMX):
# - SGLang's own Python package from PyPI, installed without its GPU dependencies (flashinfer, sglang-kernel,
#   cutlass, deep-ep ... would be prebuilt CUDA binaries), then the dependencies its text serving imports.
# - torch==2.14.1 as SGLang pins it: PyPI's build (it runs without a GPU); torch 2.13.0+cpu cannot be used
#   because SGLang imports torchvision at startup and no CPU torchvision can be had from PyPI.
# - NOT SGLang's CPU kernels: their only source is the GitHub tree (no sdist on PyPI), their build tunes for
#   the build host's own CPU (not built here: nothing in this project is), and SGLang calls them only on a CPU with AMX
#   (srt/utils/common.py:354-372), which this one is not. SGLang still imports a few of them by name in CPU
#   mode, so an import-only stand-in package `sgl_kernel` is put on the wrapper's PYTHONPATH: each of its
#   functions raises NotImplementedError if ever called, so a code path that needs a real kernel fails
#   loudly instead of computing anything. None is called while serving text here.
set -euo pipefail
exec </dev/null
version="${SGLANG_VERSION:-0.5.23}"
torch_pin="torch==2.14.1"
vision_pin="torchvision==0.29.1"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
model="${SGLANG_SMOKE_MODEL:-$cache/models/smollm2-135m-hf}"
home="$cache/engines/sglang-$version"
venv="$home/venv"
standin="$home/standin"
wrapper_path="$home/bin/sglang-cpu-python"
marker="$home/installed"

installed() {
  [ -x "$venv/bin/python" ] && [ -x "$wrapper_path" ] && [ -f "$marker" ] &&
    [ "$(cat "$marker")" = "sglang==$version" ]
}

if installed; then echo "$wrapper_path"; exit 0; fi
mkdir -p "$home"
exec 9>"$home/lock"
flock -w 3600 9 || { echo "setup-sglang: could not take $home/lock" >&2; exit 1; }
if installed; then echo "$wrapper_path"; exit 0; fi
[ -f "$model/config.json" ] || { echo "setup-sglang: no Hugging Face checkpoint at $model (make vllm converts it)" >&2; exit 1; }

t0=$(date +%s)
rm -rf "$venv" "$standin" "$marker" "$home/bin"
python3 -m venv "$venv"
pins="$home/pins.txt"
printf '%s\n' "$torch_pin" "$vision_pin" >"$pins"
# pip's noise, filtered: this machine's empty local index folders, and the resolver's list of the GPU
# requirements left out on purpose (sglang --no-deps above)
quiet() {
  "$@" 2> >(grep -v -e "is ignored: it is neither a file nor a directory" -e "^sglang [0-9.]* requires " \
    -e "^ERROR: pip's dependency resolver does not currently take into account" \
    -e "^This behaviour is the source of the following dependency conflicts" >&2)
}
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check -c "$pins")
quiet nice -n 19 "${pip[@]}" "$torch_pin" "$vision_pin" >&2
quiet nice -n 19 "${pip[@]}" --no-deps "sglang==$version" >&2
# sglang 0.5.23's requirements less the GPU-only ones, plus soundfile and timm that its server imports
quiet nice -n 19 "${pip[@]}" aiohttp 'anthropic>=0.20.0' apache-tvm-ffi==0.1.11 blobfile==3.0.0 build \
  compressed-tensors==0.18.0 datasets distro easydict einops fastapi gguf interegular IPython \
  'llguidance>=1.7.6,<2.0.0' 'mistral_common>=1.11.5' msgspec ninja numba==0.65.1 numpy openai==2.8.0 \
  openai-harmony==0.0.4 orjson outlines==0.1.11 packaging partial_json_parser pillow 'prometheus-client>=0.20.0' \
  psutil pybase64 pydantic 'python-dateutil<3' python-multipart 'pyzmq>=25.1.2' regex requests scipy \
  sentencepiece==0.2.1 setproctitle soundfile==0.13.1 tiktoken timm==1.0.25 tokenizers==0.23.2 tqdm \
  transformers==5.19.0 'uvicorn>=0.51' uvloop watchfiles xgrammar==0.2.7 xxhash zstandard >&2

mkdir -p "$standin/sgl_kernel" "$home/bin"
cat >"$standin/sgl_kernel/__init__.py" <<'PY'
"""NOT SGLang's kernels: an import-only stand-in (scripts/setup-sglang.sh). SGLang imports a few CPU
kernels by name in CPU mode and calls them only on CPUs with AMX; each name here is a function that
raises NotImplementedError when called, so nothing is ever computed by this package."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: SGLang's CPU kernels are not installed "
                                  "(import-only stand-in, see scripts/setup-sglang.sh)")

    missing.__name__ = name
    return missing
PY
printf '#!/bin/sh\nSGLANG_USE_CPU_ENGINE=1 PYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
  "$standin" "$venv/bin/python" >"$wrapper_path.tmp"
chmod 755 "$wrapper_path.tmp" && mv "$wrapper_path.tmp" "$wrapper_path"

# Proven by serving: boot on the small model, one greedy /generate, then stop it (by its PID).
port=$("$venv/bin/python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
log="$home/smoke.log"
scratch="$(mktemp -d)"
TMPDIR="$scratch" HF_HUB_OFFLINE=1 setsid nice -n 19 "$wrapper_path" -m sglang.launch_server --model-path "$model" \
  --device cpu --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
pid=$!
stop() { kill -- "-$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$scratch"; }
trap stop EXIT
ready=""
for _ in $(seq 1 600); do
  kill -0 "$pid" 2>/dev/null || break
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)" = 200 ] && { ready=1; break; }
  sleep 1
done
[ -n "$ready" ] || { echo "setup-sglang: the server did not become ready; last lines of $log:" >&2; tail -n 20 "$log" >&2; exit 1; }
reply=$(curl -s "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
  -d '{"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}')
"$venv/bin/python" -c "import json, sys; r = json.loads(sys.argv[1]); assert r['text'].strip(), r" "$reply" ||
  { echo "setup-sglang: /generate served no text: $reply" >&2; exit 1; }
stop
trap - EXIT
echo "setup-sglang: served $(printf '%s' "$reply" | head -c 80)..." >&2
echo "sglang==$version" >"$marker"
echo "setup-sglang: installed in $(( $(date +%s) - t0 ))s, $(du -sh "$venv" | cut -f1) at $venv" >&2
echo "$wrapper_path"
