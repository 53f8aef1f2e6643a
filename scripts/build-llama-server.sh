#!/usr/bin/env bash
# Build llama.cpp's llama-server from the sources vendored in the llama-cpp-python sdist, once per
# version, into a cache outside the clone. Safe to run twice: a finished build is reused.
# Prints the path of the binary on its last line.
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
dest="$cache/engines/llama-server-$version"
bin="$dest/bin/llama-server"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
work="$cache/build/llama-server-$version"
rm -rf "$work"; mkdir -p "$work" "$cache/src"
sdist="$cache/src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  python3 -m pip download --quiet --no-binary=:all: --no-deps "llama-cpp-python==$version" -d "$cache/src" >&2
fi
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
# Stage then rename so a killed build never leaves a half-written binary at the cached path.
rm -rf "$dest.tmp"; mkdir -p "$dest.tmp/bin"
cp "$work/build/bin/llama-server" "$dest.tmp/bin/"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
rm -rf "$work"
echo "$bin"
