#!/usr/bin/env bash
# Create the local test image campaign-test-base:2 (no registry is reachable, so no pulls): a minimal
# rootfs made of this host's own files — glibc, the C++ runtime (libstdc++, libgcc_s, libgomp), dash,
# coreutils, CA certificates and OpenSSL config, plus the shared-library closure of the host python
# and its extension modules — imported with `docker import`. Host binaries (python, venvs, llama-server,
# the model) are bind-mounted read-only at run time at their host paths, so they find the same libs.
# Skips all work if the image exists (CAMPAIGN_TEST_IMAGE_REBUILD=1 forces a rebuild).
# Extra binaries/libraries whose library closure must be in the image: CAMPAIGN_TEST_IMAGE_SEEDS
# (colon-separated paths). Prints the image id (sha256:...) on the last line.
set -euo pipefail
exec </dev/null

image="${CAMPAIGN_TEST_IMAGE:-campaign-test-base:2}"
cache="${CAMPAIGN_CACHE:-$HOME/.cache/campaign}"
pyhome="${CAMPAIGN_TEST_IMAGE_PYTHON:-/root/.pyenv/versions/3.11.7}"

die() { echo "docker-test-image: $*" >&2; exit 1; }
image_id() { docker image inspect -f '{{.Id}}' "$image" 2>/dev/null; }

timeout 15 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || die "no Docker engine reachable (run scripts/docker-up.sh and export DOCKER_HOST)"

if [ "${CAMPAIGN_TEST_IMAGE_REBUILD:-0}" != 1 ] && id="$(image_id)"; then
  echo "$id"; exit 0
fi

mkdir -p "$cache/docker"
exec 9>"$cache/docker/test-image.lock"
flock -w 600 9 || die "could not take $cache/docker/test-image.lock"
if [ "${CAMPAIGN_TEST_IMAGE_REBUILD:-0}" != 1 ] && id="$(image_id)"; then
  echo "$id"; exit 0
fi

t0=$(date +%s)
work="$(mktemp -d "$cache/docker/rootfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
list="$work/list"; : >"$list"
stage="$work/rootfs"; mkdir -p "$stage"

# Add a host path to the list under its canonical directory (the host has merged /usr: /lib -> usr/lib,
# and a tar member under a symlinked dir would turn that symlink into a real dir in the image). A
# symlinked file is kept as a symlink and its target is added too.
add() {
  local p="$1" d
  [ -e "$p" ] || [ -L "$p" ] || return 0
  [ -d "$p" ] && [ ! -L "$p" ] && return 0
  d="$(realpath -e "$(dirname "$p")")" || return 0
  d="${d#/}"; echo "${d:+$d/}$(basename "$p")" >>"$list"
  if [ -L "$p" ]; then add "$(realpath -e "$p" 2>/dev/null || true)"; fi
}
add_tree() { local t; [ -d "$1" ] || return 0; while IFS= read -r t; do add "$t"; done < <(find "$1" \( -type f -o -type l \)); }
add_closure() {  # the file itself and every library ldd resolves for it
  local f="$1" l
  add "$f"
  while IFS= read -r l; do add "$l"; done < <(ldd "$f" 2>/dev/null | grep -oE '(=> )?/[^ ]+' | sed 's/^=> //')
}

# Required: what every dynamically linked engine and the shell need. Optional: OpenMP (llama.cpp's CPU
# backend), TLS (llama-server links libssl/libcrypto) and CA certificates; a missing one is reported.
for pkg in libc6 libstdc++6 libgcc-s1 dash coreutils libgomp1 libssl3 openssl ca-certificates; do
  if ! dpkg -L "$pkg" >/dev/null 2>&1; then
    case "$pkg" in libc6|libstdc++6|libgcc-s1|dash|coreutils) die "host package $pkg is not installed" ;; esac
    echo "docker-test-image: optional host package $pkg is not installed; skipped" >&2; continue
  fi
  while IFS= read -r f; do
    case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/share/info/*|/usr/share/lintian/*|/usr/share/locale/*) continue ;; esac
    case "$f" in */bin/*|*/sbin/*) add_closure "$f" ;; *) add "$f" ;; esac
  done < <(dpkg -L "$pkg")
done
add_tree /etc/ssl/certs; add_tree /usr/lib/ssl; add_tree /usr/share/ca-certificates
# vLLM's CPU backend: lscpu picks the cores its OpenMP threads bind to (the engine core dies without
# it) and libnuma backs its compiled ops. Optional: an engine that needs neither runs without them.
if [ -x /usr/bin/lscpu ]; then add_closure /usr/bin/lscpu; else echo "docker-test-image: lscpu not found; skipped" >&2; fi
numa="$(ldconfig -p 2>/dev/null | grep -oE '/[^ ]*/libnuma\.so\.1$' | head -n 1 || true)"
if [ -n "$numa" ]; then add_closure "$numa"; else echo "docker-test-image: libnuma.so.1 not found; skipped" >&2; fi
add /etc/os-release; add /usr/lib/os-release; add /etc/debian_version

# Libraries of the host python and its extension modules (not tkinter: it drags in X11).
if [ -x "$pyhome/bin/python3" ]; then
  add_closure "$(realpath "$pyhome/bin/python3")"
  for so in "$pyhome"/lib/python3*/lib-dynload/*.so "$pyhome"/lib/libpython3*.so*; do
    case "$so" in *_tkinter*) continue ;; esac
    [ -e "$so" ] && add_closure "$so"
  done
fi
IFS=: read -r -a seeds <<<"${CAMPAIGN_TEST_IMAGE_SEEDS:-}"
for s in "${seeds[@]}"; do [ -n "$s" ] && { [ -e "$s" ] || die "seed $s does not exist"; add_closure "$(realpath "$s")"; }; done
# Anything under a path that is bind-mounted at run time stays out of the image.
grep -vE '^(root|home|work|tmp|proc|sys|dev)/' "$list" | sort -u >"$list.sorted"

tar -C / -cf - --no-recursion -T "$list.sorted" | tar -C "$stage" -xpf -
cd "$stage"
for l in bin lib lib64 sbin; do [ -L "/$l" ] && ln -sfn "$(readlink "/$l")" "$l"; done
mkdir -p usr/bin usr/sbin usr/lib usr/lib64 etc/ssl/private root tmp var/tmp dev proc sys run
chmod 1777 tmp var/tmp; chmod 700 root etc/ssl/private
[ -e bin/sh ] || ln -s dash usr/bin/sh
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >etc/nsswitch.conf
/sbin/ldconfig -r "$stage" 2>/dev/null || true

id="$(tar -C "$stage" --numeric-owner -cf - . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'LABEL org.campaign.image=test-base org.campaign.rootfs=host-libs' \
  --change 'CMD ["/bin/sh"]' \
  -m "campaign test base: host libs from $(hostname) $(date -u +%FT%TZ)" - "$image")"
echo "docker-test-image: built $image in $(( $(date +%s) - t0 ))s ($(du -sh "$stage" | cut -f1) rootfs)" >&2
image_id || echo "$id"
