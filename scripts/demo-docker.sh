#!/usr/bin/env bash
# `make demo-docker`: the field's loop with a container daily. A daily container is started by hand with
# `docker run` (as people start theirs), a window of docker lanes stops it behind the failsafe and
# restores it with proof, then the candidate is promoted (or refused, with the reason) and rolled back,
# all through the CLI. The test image's id is this machine's, so the contract run is a generated copy,
# runs/demo-docker.yaml, with that id, this machine's cache and the daily section put in.
set -euo pipefail
cd "$(dirname "$0")/.."
campaign=.venv/bin/campaign
# the generated contract in runs/ reads the example inputs: the one folder outside it this demo trusts
export CAMPAIGN_ALLOW_PATH="$PWD/examples"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
image="$(scripts/docker-test-image.sh | tail -n 1)"
engine_dir="$(scripts/build-llama-server.sh --where)"
daily=campaign-demo-daily
port=18441

mkdir -p runs/freeze
sed -e "s|sha256:0\{64\}|$image|" -e "s|/root/.cache/campaign/engines/llama-server-[^,}]*|$engine_dir|" \
  -e "s|/root/.cache/campaign|$cache|g" examples/demo-docker.yaml > runs/demo-docker.yaml
cat >> runs/demo-docker.yaml <<YAML

incumbent:
  runtime: docker
  container: $daily
  endpoint: http://127.0.0.1:$port
failsafe:
  deadline: 20m
  heartbeat_grace: 60s
YAML

if [ "$(docker container inspect -f '{{.State.Running}}' "$daily" 2>/dev/null)" != true ]; then
  docker rm -f "$daily" >/dev/null 2>&1 || true
  echo "demo-docker: starting the daily container $daily by hand (docker run)"
  docker run -d --name "$daily" --network host --restart unless-stopped \
    -v "$engine_dir:/opt/llama-server:ro" -v "$cache/models:/models:ro" "$image" \
    /opt/llama-server/bin/llama-server -m /models/SmolLM2-135M-Instruct.Q4_1.gguf --host 127.0.0.1 \
    --port "$port" --ctx-size 4096 --threads 2 --parallel 1 --metrics --seed 0 --no-webui >/dev/null
  for _ in $(seq 120); do
    .venv/bin/python -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$port/health').status_code != 200)" \
      >/dev/null 2>&1 && break
    sleep 0.5
  done
fi

record="runs/freeze/demo-docker-daily-${image:7:12}.freeze.json"
"$campaign" freeze runs/demo-docker.yaml --record "$record" --allow-path examples
# --exit-zero: a completed window goes on whatever it decided (nothing promotable: the promotion below is refused)
"$campaign" run runs/demo-docker.yaml --record "$record" --out runs --allow-path examples --exit-zero
bundle="$(ls -1d runs/*-demo-docker-smollm2-* | grep -v '\.' | tail -n 1)"
"$campaign" verify "$bundle"
"$campaign" daily show runs/demo-docker.yaml
if "$campaign" promote "$bundle" --candidate ngram-k4; then
  "$campaign" daily show runs/demo-docker.yaml
  "$campaign" rollback
  "$campaign" daily show runs/demo-docker.yaml
else
  echo "demo-docker: the promotion was refused (reasons above); the daily container is unchanged"
fi
"$campaign" ledger
