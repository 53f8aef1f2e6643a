# Shared by the engine build scripts (sourced, not run). Quiet by design: compiler output goes to a log
# file under the cache, the console gets one line per stage, and a failure prints the log's path and
# its last lines.

engine_say() { echo "$(basename "$0" .sh): $*" >&2; }

# Stop early, with a clear message, on a CPU the portable builds cannot serve on.
engine_require_avx2() {
  local flags
  flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
  [ "$(uname -m)" = x86_64 ] || { engine_say "this script builds for x86-64; this machine is $(uname -m)"; exit 1; }
  for f in avx2 fma f16c bmi2; do
    case " $flags " in
      *" $f "*) ;;
      *) engine_say "this CPU lacks $f: the portable engine build needs AVX2, FMA, F16C and BMI2 (x86-64 CPUs since 2013)"; exit 1 ;;
    esac
  done
}

# Run "$@" with its output in $1's log; print progress every 30 s and, on failure,
# the log's path and its last lines.
engine_logged() {
  local log="$1" what="$2"; shift 2
  local t0 pid rc=0 last=""
  t0=$(date +%s)
  mkdir -p "$(dirname "$log")"
  # its own process group, without the lock's fd: Ctrl-C or a kill of this script stops the whole build
  setsid "$@" >>"$log" 2>&1 9>&- &
  pid=$!
  trap 'kill -- -"$pid" 2>/dev/null; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null || break
    # make prints "[ 45%]", ninja (pip's build) "[12/80]"
    last="$(grep -oE '^\[ *[0-9]+%\]|^\[[0-9]+/[0-9]+\]' "$log" 2>/dev/null | tail -n 1 | tr -d '[] ' || true)"
    engine_say "$what: ${last:-running} ($(( $(date +%s) - t0 ))s, log $log)"
  done
  wait "$pid" || rc=$?
  trap - INT TERM
  if [ "$rc" != 0 ]; then
    engine_say "$what failed (exit $rc) after $(( $(date +%s) - t0 ))s; last lines of $log:"
    tail -n 25 "$log" >&2
    return "$rc"
  fi
  engine_say "$what: done in $(( $(date +%s) - t0 ))s"
}

# The sdist whose vendored llama.cpp both engines are built from, downloaded once.
engine_sdist() {
  local cache="$1" version="$2" sdist="$1/src/llama_cpp_python-$2.tar.gz"
  if [ ! -f "$sdist" ]; then
    mkdir -p "$cache/src"
    python3 -m pip download --quiet --disable-pip-version-check --no-binary=:all: --no-deps \
      "llama-cpp-python==$version" -d "$cache/src" 2> >(grep -v "is ignored: it is neither" >&2) >&2
  fi
  echo "$sdist"
}

# Smoke a cached build at reuse: 0 it serves (use it); 1 it died or served nothing here (rebuild); a check
# that could not tell (3: a busy host) is tried once more, then the cache is used with a warning.
engine_reuse_ok() {
  local rc=0
  "$@" 2>"$ENGINE_SMOKE_LOG" || rc=$?
  if [ "$rc" = 3 ]; then
    rc=0; "$@" 2>"$ENGINE_SMOKE_LOG" || rc=$?
    if [ "$rc" = 3 ]; then
      engine_say "warning: the reuse check could not tell ($(tail -n 1 "$ENGINE_SMOKE_LOG")); using the cached build"
      return 0
    fi
  fi
  return "$rc"
}
