#!/usr/bin/env bash
# Make a Docker engine available on this machine and print the DOCKER_HOST to use on the last line.
# If `docker version` already reaches a server, nothing else is done. Otherwise Debian's docker.io is
# installed when dockerd is missing, and dockerd is started detached (vfs storage, no iptables, no
# bridge: what works on these VMs) with its log and pidfile under the campaign cache. Safe to run twice
# and concurrently; needs root for the install and the daemon; reads no stdin.
set -euo pipefail
exec </dev/null

cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
state="$cache/docker"
sock="/var/run/docker.sock"
host="unix://$sock"
log="$state/dockerd.log"
pidfile="$state/dockerd.pid"
wait_s="${CAMPAIGN_DOCKER_WAIT:-60}"

say() { echo "docker-up: $*" >&2; }
die() { echo "docker-up: $*" >&2; exit 1; }
reachable() { timeout 15 docker "$@" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# 1. An engine already answering (whatever DOCKER_HOST/context says) wins.
if command -v docker >/dev/null 2>&1 && reachable; then
  echo "${DOCKER_HOST:-$host}"; exit 0
fi

mkdir -p "$state"
exec 9>"$state/lock"
flock -w $((wait_s + 600)) 9 || die "could not take $state/lock"

# Re-check under the lock: another run may have started the daemon meanwhile.
if command -v docker >/dev/null 2>&1 && DOCKER_HOST="$host" reachable; then
  echo "$host"; exit 0
fi
[ "$(id -u)" = 0 ] || die "no Docker engine reachable and not root: cannot install or start dockerd"

# 2. Install the engine if missing. docker.io conflicts only with the docker-ce* packages; a client
#    outside dpkg (e.g. /usr/local/bin/docker) is left alone and stays first on PATH.
if ! command -v dockerd >/dev/null 2>&1; then
  for p in docker-ce docker-ce-cli; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      die "package $p is installed but dockerd is missing; it conflicts with docker.io — install docker-ce or remove $p"
    fi
  done
  say "installing docker.io (apt-get)"
  t0=$(date +%s)
  # Keep apt's maintainer scripts from starting a daemon with default (overlay2/iptables) options.
  prc=/usr/sbin/policy-rc.d; made_prc=0
  if [ ! -e "$prc" ]; then printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod 755 "$prc"; made_prc=1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold docker.io >&2 || { [ $made_prc = 1 ] && rm -f "$prc"; die "apt-get install docker.io failed"; }
  [ $made_prc = 1 ] && rm -f "$prc"
  command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd not on PATH"
  say "installed docker.io in $(( $(date +%s) - t0 ))s"
fi
command -v docker >/dev/null 2>&1 || die "no docker client on PATH"

# 3. Start dockerd unless ours is already running (then just wait for it).
pid=""
[ -f "$pidfile" ] && pid="$(cat "$pidfile" 2>/dev/null || true)"
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null; then
  say "dockerd already running (pid $pid), waiting for it"
else
  # A stale socket or pidfile from a dead daemon would make dockerd refuse to start.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid 2>/dev/null || echo 0)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  say "starting dockerd (log $log)"
  echo "=== $(date -u +%FT%TZ) docker-up.sh starting dockerd" >>"$log"
  setsid nohup dockerd -H "$host" --storage-driver=vfs --iptables=false --ip6tables=false \
    --bridge=none --pidfile=/var/run/docker.pid >>"$log" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$pidfile"
fi

t0=$(date +%s)
until DOCKER_HOST="$host" reachable; do
  if ! kill -0 "$pid" 2>/dev/null; then
    die "dockerd (pid $pid) exited; last log line: $(tail -n 1 "$log" 2>/dev/null)"
  fi
  if [ $(( $(date +%s) - t0 )) -ge "$wait_s" ]; then
    die "dockerd (pid $pid) not answering after ${wait_s}s; see $log"
  fi
  sleep 1
done
say "dockerd pid $pid ready in $(( $(date +%s) - t0 ))s"
echo "$host"
