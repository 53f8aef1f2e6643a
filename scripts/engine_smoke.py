"""Prove an engine build serves here before it is cached (and again, in seconds, when a cache is reused).

Starts the engine on the small model on a free loopback port, waits for it, asks for one greedy
completion, checks that text came back, stops it. Standard library only: it runs before any venv.
Exit 0 when it served; 1 when the engine died (a signal by name, SIGILL with the rebuild hint), or served
no text: the build does not work here; 3 when the check itself could not tell (not ready in time, a
request failed while the engine lived): a busy host, not a broken build. Usage:
    python3 engine_smoke.py llama-server BINARY MODEL
    python3 engine_smoke.py llama-cpp-python PYTHON MODEL
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

READY_S = 120
INCONCLUSIVE = 3
CAUSES = {
    signal.SIGILL: "illegal instruction: the binary uses CPU instructions this machine cannot run",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGKILL: "killed (out of memory?)",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def died(proc: subprocess.Popen, log_path: str) -> str:
    rc = proc.returncode
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc)
        what = f"died by {sig.name} ({CAUSES.get(sig, 'signal')})"
    elif rc in (132, 139, 135, 137):  # a shell's 128+N
        sig = signal.Signals(rc - 128)
        what = f"died by {sig.name} ({CAUSES.get(sig, 'signal')})"
    else:
        what = f"exited with status {rc}"
    with open(log_path, errors="replace") as f:
        tail = f.read()[-600:].strip().replace("\n", " | ")
    return f"{what}; log tail: {tail}"


def main(kind: str, program: str, model: str) -> int:
    port = free_port()
    if kind == "llama-server":
        argv = [program, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512", "-t", "2"]
        ready, url, body = "/health", "/completion", {"prompt": "The capital of France is", "n_predict": 8,
                                                      "temperature": 0}
    elif kind == "llama-cpp-python":
        argv = [program, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", "512"]
        ready, url, body = "/v1/models", "/v1/completions", {"prompt": "The capital of France is",
                                                             "max_tokens": 8, "temperature": 0}
    else:
        print(f"engine_smoke: unknown kind {kind!r}", file=sys.stderr)
        return 2
    base = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False) as log:
        log_path = log.name
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + READY_S
        while True:
            if proc.poll() is not None:
                print(f"engine_smoke: {kind} {died(proc, log_path)}", file=sys.stderr)
                return 1
            try:
                with urllib.request.urlopen(base + ready, timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                print(f"engine_smoke: {kind} not ready within {READY_S}s", file=sys.stderr)
                return INCONCLUSIVE
            time.sleep(0.3)
        try:
            reply = post(base + url, body)
        except (urllib.error.URLError, OSError) as exc:
            time.sleep(0.5)
            if proc.poll() is None:
                print(f"engine_smoke: {kind} request failed while it ran: {exc}", file=sys.stderr)
                return INCONCLUSIVE
            print(f"engine_smoke: {kind} {died(proc, log_path)}", file=sys.stderr)
            return 1
        text = reply.get("content") if kind == "llama-server" else (reply.get("choices") or [{}])[0].get("text")
        if not (isinstance(text, str) and text.strip()):
            print(f"engine_smoke: {kind} served no text: {json.dumps(reply)[:300]}", file=sys.stderr)
            return 1
        print(f"engine_smoke: {kind} served {text.strip()[:40]!r}", file=sys.stderr)
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.unlink(log_path)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
