#!/usr/bin/env bash
# Runs on the lent GPU box, in the repository's copy there, with .gpu/ carried (scripts/gpu/pack.sh):
#   scripts/gpu/on-device.sh setup build model probe lanes windows
# Each step is safe to repeat on a warm machine: the build and the model persist under $GPU_HOME between
# calls (a cold machine starts over). Outputs that must come back go to $OUT (the device tool's folder).
#   setup    the carried wheels into /tmp/site (PYTHONPATH), the project from this copy
#   build    llama-server with CUDA for sm_90 (Hopper) and the same portable CPU baseline as on CPU boxes
#   model    a random-weight LLaMA of $GPU_MODEL_SIZE (default 1b) with SmolLM2's tokenizer, F16
#   probe    decode tok/s of the candidate axes, measured first, to choose the window's axis
#   lanes    launch failures on a GPU, through campaign's own boot: a GPU that does not exist, a context that
#            does not fit; and a GPU lane's device use read back
#   windows  the A/A window and the real-axis window (greedy, teacher_forced, speed), verified, tarred to $OUT;
#            GPU_WINDOWS names others of examples/gpu/ (gpu-speed: the speed decisions, on the random model)
#   realmodel  keep the real model's part this call carries (pack.sh --model-part N); with all three, put it together
#   tfprobe  why teacher forcing does not give the generated logprobs back on this GPU (tf_probe.py)
#   promote  examples/gpu/gpu-promote.yaml on the real model: its daily started by hand, one window, verify,
#            `campaign promote --dry-run` for every candidate, the daily stopped; bundles tarred to $OUT
#            (GPU_PROMOTE="a b": b runs only if no candidate of a was promotable)
set -euo pipefail
exec </dev/null
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
repo="$(cd "$(dirname "$0")/../.." && pwd)"
GPU_HOME="${GPU_HOME:-/root/campaign-gpu}"
size="${GPU_MODEL_SIZE:-1b}"
out="${OUT:-$GPU_HOME/out}"
server="$GPU_HOME/llama-server/bin/llama-server"
model="$GPU_HOME/model-$size.gguf"
mkdir -p "$GPU_HOME" "$out"
# the signing key: carried in .gpu/config when the bundles must verify elsewhere (pack.sh --key), else one
# made on the box (lost with it: then only the box could verify what it signed)
config="$GPU_HOME/config"
if [ -d "$repo/.gpu/config/campaign" ]; then config="$GPU_HOME/carried-config"; rm -rf "$config"; cp -r "$repo/.gpu/config" "$config"
  chmod 700 "$config" "$config/campaign"; chmod 600 "$config/campaign/signing.key"
elif [ -d "$GPU_HOME/carried-config/campaign" ]; then config="$GPU_HOME/carried-config"; fi  # a later call's
export PYTHONPATH="/tmp/site:$repo" XDG_CONFIG_HOME="$config" XDG_STATE_HOME="$GPU_HOME/state"
say() { echo "[gpu $(date +%H:%M:%S)] $*"; }

step_setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$repo"/.gpu/wheels/*.whl 2>&1 | grep -v "^WARNING: Target directory" || true
  python3 -c "import campaign.cli, campaign.lanes.engines.sse, pydantic, cryptography, docker, orjson, aiohttp; print('campaign imports')"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -n 1; nproc
}

step_build() {
  if [ -x "$server" ]; then say "llama-server already built: $server"; return; fi
  local work="$GPU_HOME/build"
  mkdir -p "$work"
  [ -d "$work/llama.cpp" ] || tar -xzf "$repo/.gpu/llama.cpp.tar.gz" -C "$work"
  say "configure (CUDA sm_90, CPU baseline AVX2, never native)"
  cmake -S "$work/llama.cpp" -B "$work/out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$work/configure.log" 2>&1 || { tail -n 20 "$work/configure.log"; exit 1; }
  say "build llama-server"
  local t0=$SECONDS
  cmake --build "$work/out" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; exit 1; }
  mkdir -p "$(dirname "$server")"
  cp "$work/out/bin/llama-server" "$server"
  say "built in $((SECONDS - t0))s: $("$server" --version 2>&1 | tail -n 2 | tr '\n' ' ')"
}

step_model() {
  if [ ! -f "$model" ]; then
    PYTHONPATH="$GPU_HOME/build/llama.cpp/gguf-py:$PYTHONPATH" python3 "$repo/scripts/gpu/random_model.py" make \
      "$model.tmp" "$repo/.gpu/tokenizer.json" "$size"
    mv "$model.tmp" "$model"
  fi
  say "model $model $(du -h "$model" | cut -f1) sha256 $(sha256sum "$model" | cut -c1-16)..."
}

step_realmodel() {
  # the real SmolLM2-135M, sent in three parts (pack.sh --model-part N): each part carried is kept, and once
  # all three are here the model is put together and checked against the whole file's sha256
  local parts="$GPU_HOME/model-parts" real="$GPU_HOME/model-real.gguf"
  mkdir -p "$parts"
  if [ -f "$repo/.gpu/model/whole.sha256" ]; then cp "$repo/.gpu/model/whole.sha256" "$parts/"; fi
  # a part may come in .gpu/ or, packed ahead so calls follow each other within the idle release, in .gpu2/, .gpu3/
  for part in "$repo"/.gpu*/model/part*; do [ -f "$part" ] && cp "$part" "$parts/"; done
  if [ -f "$real" ]; then say "real model $real already here"; return; fi
  for n in 1 2 3; do
    if [ ! -f "$parts/part$n" ]; then say "real model: have $(ls "$parts" | tr '\n' ' ')"; return; fi
  done
  cat "$parts/part1" "$parts/part2" "$parts/part3" > "$real.tmp"
  local want got; want="$(cut -d' ' -f1 "$parts/whole.sha256")"; got="$(sha256sum "$real.tmp" | cut -d' ' -f1)"
  if [ "$want" != "$got" ]; then say "real model: sha256 $got, not $want"; rm -f "$real.tmp"; exit 1; fi
  mv "$real.tmp" "$real"
  say "real model $real sha256 ${got:0:16}... checked"
}

step_tfprobe() {
  python3 "$repo/scripts/gpu/tf_probe.py" "$server" "$GPU_HOME/model-real.gguf" "$repo/examples/prompts/tf4.jsonl" ${TF_PROBE_DETAIL:+--detail} \
    | tee "$out/tf_probe.txt"
}

step_probe() {  # on the real model once realmodel has put it together
  if [ -f "$GPU_HOME/model-real.gguf" ]; then model="$GPU_HOME/model-real.gguf"; fi
  python3 "$repo/scripts/gpu/probe.py" "$server" "$model" | tee "$out/probe.txt"
}
step_lanes() { python3 "$repo/scripts/gpu/check_lanes.py" "$server" "$model" | tee "$out/lanes.json"; }

step_windows() {
  local work="$GPU_HOME/windows"
  # the real model once realmodel has put it together (the windows' contracts are written for it)
  if [ -f "$GPU_HOME/model-real.gguf" ]; then model="$GPU_HOME/model-real.gguf"; fi
  rm -rf "$work"; mkdir -p "$work"
  cp -r "$repo/examples/prompts" "$work/prompts"
  local digest; digest="$(sha256sum "$model" | cut -d' ' -f1)"
  python3 -m campaign.cli keys init >/dev/null 2>&1 || true
  for name in ${GPU_WINDOWS:-gpu-aa gpu-axis}; do
    sed -e "s|@SERVER@|$server|; s|@MODEL@|$model|; s|@MODEL_SHA256@|$digest|" \
      "$repo/examples/gpu/$name.yaml" >"$work/$name.yaml"
    python3 -m campaign.cli freeze "$work/$name.yaml"
    say "window $name"
    python3 -m campaign.cli run "$work/$name.yaml" --out "$work/runs" || say "window $name ended non-zero ($?)"
  done
  for bundle in "$work"/runs/*/; do
    python3 -m campaign.cli verify "$bundle" || true
    python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/SUMMARY.json')); print(json.dumps({'window': s['window'], 'candidates': {c: {g: r['verdict'] for g, r in e['gates'].items()} | {'overall': e['overall']} for c, e in s['candidates'].items()}}))" "$bundle"
  done
  cp "$XDG_CONFIG_HOME/campaign/signing.pub" "$work/signing.pub"
  tar -czf "$out/gpu-bundles.tar.gz" -C "$work" runs $(cd "$work" && ls *.yaml) signing.pub
  say "bundles: $(du -h "$out/gpu-bundles.tar.gz" | cut -f1)"
}

step_promote() {
  # GPU_PROMOTE names the contracts of examples/gpu/ to run in turn (default gpu-promote); the next one runs
  # only while no candidate of the last was promotable (a fallback prepared ahead, the box goes back in 30 s)
  [ -f "$GPU_HOME/model-real.gguf" ] || { say "promote needs the real model (realmodel)"; exit 1; }
  model="$GPU_HOME/model-real.gguf"
  local work="$GPU_HOME/promote" name digest
  rm -rf "$work"; mkdir -p "$work/runs"
  cp -r "$repo/examples/prompts" "$work/prompts"
  digest="$(sha256sum "$model" | cut -d' ' -f1)"
  cd "$work"
  python3 -m campaign.cli keys init >/dev/null 2>&1 || true
  for name in ${GPU_PROMOTE:-gpu-promote}; do
    sed -e "s|@SERVER@|$server|; s|@MODEL@|$model|; s|@MODEL_SHA256@|$digest|" \
      "$repo/examples/gpu/$name.yaml" >"$work/$name.yaml"
    python3 -m campaign.cli daily start "$name.yaml" --log "runs/daily-$name.log"
    python3 -m campaign.cli freeze "$name.yaml"
    say "window $name"
    local rc=0; python3 -m campaign.cli run "$name.yaml" --out runs || rc=$?
    say "window $name ended with exit $rc"
    local bundle; bundle="$(ls -1d runs/*-"$name"-v* | grep -v '\.published$' | tail -n 1)"
    python3 -m campaign.cli verify "$bundle" || true
    python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/SUMMARY.json')); print(json.dumps({'window': s['window'], 'findings': s.get('findings'), 'aa_check': s.get('aa_check'), 'candidates': {c: {g: r['verdict'] for g, r in e['gates'].items()} | {'overall': e['overall']} for c, e in s['candidates'].items()}}))" "$bundle" | tee -a "$out/summary.json"
    local candidates; candidates="$(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]+'/SUMMARY.json'))['candidates']))" "$bundle")"
    local won=0
    for candidate in $candidates; do
      echo "== campaign promote $bundle --candidate $candidate --dry-run"
      if python3 -m campaign.cli promote "$bundle" --candidate "$candidate" --dry-run; then won=1; else echo "(refused, exit $?)"; fi
    done 2>&1 | tee -a "$out/promote.txt"
    grep -q "^would promote" "$out/promote.txt" && won=1
    python3 -m campaign.cli daily stop "$name.yaml" || true
    if [ "$won" = 1 ]; then say "window $name: a candidate is promotable"; break; fi
  done
  cp "$XDG_CONFIG_HOME/campaign/signing.pub" "$work/signing.pub"
  tar -czf "$out/gpu-promote.tar.gz" -C "$work" runs $(ls *.yaml) signing.pub
  say "bundles: $(du -h "$out/gpu-promote.tar.gz" | cut -f1)"
}

for step in "$@"; do
  say "step $step"
  "step_$step"
done
