#!/usr/bin/env bash
# Build llama.cpp's llama-server from the sources vendored in the llama-cpp-python sdist into a cache
# outside the clone, once per version and build flavour. Prints the path of the binary on its last line.
#
# Portable, never native: a CPU may report instructions its virtual machine traps (AMX: a native build
# died with SIGILL), and a cache may be shared with another machine. CAMPAIGN_LLAMA_BUILD picks:
#   avx2          (default) one fixed x86-64 baseline: AVX2 + FMA + F16C + BMI2, nothing newer
#   all-variants  llama.cpp's own way: every CPU variant as a module, the best one picked at start-up
# The flavour and its cmake flags are in the cache key. A build is moved into the cache only after it
# served one completion on the small model here (scripts/engine_smoke.py), and a cached build is smoked
# again at reuse (seconds): one that no longer runs here is rebuilt, with one line saying why.
# Safe to run twice and concurrently (a lock; the cache entry appears by rename).
set -euo pipefail
exec </dev/null
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/engine-lib.sh"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
flavour="${CAMPAIGN_LLAMA_BUILD:-avx2}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
common=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DGGML_NATIVE=OFF '-DCMAKE_BUILD_RPATH=$ORIGIN')
case "$flavour" in
  avx2) flags=("${common[@]}" -DBUILD_SHARED_LIBS=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
               -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF
               -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  all-variants) flags=("${common[@]}" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON) ;;
  *) engine_say "CAMPAIGN_LLAMA_BUILD=$flavour: expected avx2 or all-variants"; exit 2 ;;
esac
key="$(printf '%s\n' "$version" "${flags[@]}" | sha256sum | cut -c1-10)"
dest="$cache/engines/llama-server-$version-$flavour-$key"
bin="$dest/bin/llama-server"
# --where: the cache entry this machine would use, without building (for docker mounts and tests)
if [ "${1:-}" = --where ]; then echo "$dest"; exit 0; fi
engine_require_avx2
log="$cache/logs/llama-server-$version-$flavour-$key.log"
model="$("$here/fetch-model.sh" | tail -n 1)"
mkdir -p "$cache/engines" "$cache/logs"

ENGINE_SMOKE_LOG="$cache/logs/smoke.last"
if [ -x "$bin" ]; then
  if engine_reuse_ok python3 "$here/engine_smoke.py" llama-server "$bin" "$model"; then
    echo "$bin"; exit 0
  fi
  engine_say "the cached build at $dest no longer serves here ($(tail -n 1 "$ENGINE_SMOKE_LOG")); rebuilding"
fi
exec 9>"$dest.lock"
flock -w 7200 9 || { engine_say "could not take $dest.lock"; exit 1; }
if [ -x "$bin" ] && engine_reuse_ok python3 "$here/engine_smoke.py" llama-server "$bin" "$model"; then
  echo "$bin"; exit 0
fi
: >"$log"
work="$cache/build/llama-server-$version-$flavour-$key"
rm -rf "$work"; mkdir -p "$work"
sdist="$(engine_sdist "$cache" "$version")"
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
engine_say "building llama-server $version ($flavour, about 10 minutes on 2 cores; log $log)"
engine_logged "$log" "configure" cmake -S "$src" -B "$work/build" "${flags[@]}"
engine_logged "$log" "build llama-server" cmake --build "$work/build" --target llama-server -j "$(nproc)"
# Stage beside the cache entry: the binary and, for all-variants, its libraries and CPU modules.
rm -rf "$dest.tmp"; mkdir -p "$dest.tmp/bin"
cp "$work/build/bin/llama-server" "$dest.tmp/bin/"
find "$work/build/bin" -maxdepth 1 -name '*.so*' -exec cp -P {} "$dest.tmp/bin/" \;
printf '%s\n' "llama-server $version $flavour" "${flags[@]}" >"$dest.tmp/BUILD_FLAGS"
if ! python3 "$here/engine_smoke.py" llama-server "$dest.tmp/bin/llama-server" "$model" 2>>"$log"; then
  engine_say "the new build did not serve here; not cached. Last lines of $log:"
  tail -n 5 "$log" >&2
  exit 1
fi
engine_say "the new build served one completion; cached at $dest"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
rm -rf "$work"
echo "$bin"
