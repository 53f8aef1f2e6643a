#!/usr/bin/env bash
# Install llama-cpp-python's OpenAI-compatible server into its own venv in the cache, outside the clone,
# once per version and build flags, built from source for the same portable AVX2 baseline as
# build-llama-server.sh (never native: see there). pip's wheel cache is bypassed, so a wheel built on
# another machine is never reused; the venv, keyed by the flags, is the cache. The venv is marked
# finished only after its server answered one completion on the small model here, and is smoked again
# at reuse: one that no longer serves is rebuilt, with one line saying why. Safe to run twice.
# Prints the venv's python on its last line.
set -euo pipefail
exec </dev/null
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/engine-lib.sh"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
cmake_args="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF"
engine_require_avx2
key="$(printf '%s\n' "$version" "$cmake_args" | sha256sum | cut -c1-10)"
home="$cache/engines/llama-cpp-python-$version-avx2-$key"
venv="$home/venv"
marker="$home/served"
log="$cache/logs/llama-cpp-python-$version-avx2-$key.log"
# --where: the venv's python this machine would use, without building (make's recipes read it)
if [ "${1:-}" = --where ]; then echo "$venv/bin/python"; exit 0; fi
mkdir -p "$cache/engines" "$cache/logs"
ENGINE_SMOKE_LOG="$cache/logs/smoke.last"
model="$("$here/fetch-model.sh" | tail -n 1)"

smoke() { python3 "$here/engine_smoke.py" llama-cpp-python "$venv/bin/python" "$model"; }
if [ -f "$marker" ] && [ -x "$venv/bin/python" ]; then
  if engine_reuse_ok smoke; then echo "$venv/bin/python"; exit 0; fi
  engine_say "the cached server at $home no longer serves here ($(tail -n 1 "$ENGINE_SMOKE_LOG")); rebuilding"
fi
exec 9>"$home.lock"
flock -w 7200 9 || { engine_say "could not take $home.lock"; exit 1; }
if [ -f "$marker" ] && [ -x "$venv/bin/python" ] && engine_reuse_ok smoke; then echo "$venv/bin/python"; exit 0; fi
: >"$log"
# A venv is not relocatable (absolute shebangs), so it is built in place; the marker is written last.
rm -rf "$home"; mkdir -p "$home"
python3 -m venv "$venv"
sdist="$(engine_sdist "$cache" "$version")"
engine_say "building llama-cpp-python $version (portable AVX2, about 6 minutes on 2 cores; log $log)"
engine_logged "$log" "build llama-cpp-python" env CMAKE_ARGS="$cmake_args" FORCE_CMAKE=1 \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check \
  --verbose "llama-cpp-python[server] @ file://$sdist"
if ! smoke 2>>"$log"; then
  engine_say "the new build did not serve here; not marked. Last lines of $log:"
  tail -n 5 "$log" >&2
  exit 1
fi
echo "$cmake_args" >"$marker"
engine_say "the new build served one completion; cached at $home"
echo "$venv/bin/python"
