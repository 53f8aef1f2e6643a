#!/usr/bin/env bash
# Install llama-cpp-python's OpenAI-compatible server into its own venv in the cache, outside the
# clone, once per version (built from source; pip caches the wheel). Safe to run twice.
# Prints the venv's python on its last line.
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
venv="$cache/engines/llama-cpp-python-$version/venv"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1; then
  echo "$venv/bin/python"; exit 0
fi
# built in place; a killed build fails the import check above and is redone from scratch
rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv"
sdist="$cache/src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  mkdir -p "$cache/src"
  python3 -m pip download --quiet --no-binary=:all: --no-deps "llama-cpp-python==$version" -d "$cache/src" >&2
fi
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install --quiet --disable-pip-version-check \
  "llama-cpp-python[server] @ file://$sdist" >&2
"$venv/bin/python" -c "import llama_cpp.server" >&2
echo "$venv/bin/python"
