"""Decode and prefill speed of llama-server builds on this machine, measured in one run.

For each build (a llama-server binary), starts it on the small model, warms it, then asks for REPS greedy
completions of TOKENS tokens and reports the median of the engine's own timings (predicted_per_second,
prompt_per_second). Builds are measured in turn, twice each in A-B-A-B order, so a drift of the host
shows as a difference between a build's two passes. The ratio column is against the first build.

    python benchmarks/engine_builds.py NAME=PATH [NAME=PATH ...] [--threads 2] [--reps 5] [--tokens 128]

Used to choose the portable build flavour (README: "Engine builds").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = ("Write a short story about a lighthouse keeper who finds a message in a bottle, in plain prose, "
          "with a beginning, a middle and an end.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def measure(binary: str, threads: int, reps: int, tokens: int) -> tuple[float, float]:
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([binary, "-m", str(MODEL), "--port", str(port), "-t", str(threads), "-c", "2048",
                                 "-np", "1", "--seed", "0"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{binary} did not start (exit {proc.returncode})")
                time.sleep(0.2)
            body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 0, "cache_prompt": False,
                    "ignore_eos": True}
            post(f"http://127.0.0.1:{port}/completion", body)  # warm: first-hit costs stay out
            decode, prefill = [], []
            for _ in range(reps):
                timings = post(f"http://127.0.0.1:{port}/completion", body)["timings"]
                decode.append(timings["predicted_per_second"])
                prefill.append(timings["prompt_per_second"])
            return statistics.median(decode), statistics.median(prefill)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("builds", nargs="+", help="NAME=PATH to a llama-server binary")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    builds = [tuple(b.split("=", 1)) for b in args.builds]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in builds}
    for _ in range(2):
        for name, path in builds:
            results[name].append(measure(path, args.threads, args.reps, args.tokens))
    load = os.getloadavg()[0]
    print(f"host: {os.cpu_count()} cores, load {load:.2f}; {args.threads} threads, {args.reps} reps x "
          f"{args.tokens} tokens per pass, two passes A-B-A-B; medians of the engine's own timings")
    first = statistics.fmean(d for d, _ in results[builds[0][0]])
    print(f"{'build':<16}{'decode tok/s (pass 1, 2)':>28}{'prefill tok/s':>16}{'decode ratio':>14}")
    for name, _ in builds:
        passes = results[name]
        mean = statistics.fmean(d for d, _ in passes)
        print(f"{name:<16}{passes[0][0]:>14.1f}, {passes[1][0]:<12.1f}{statistics.fmean(p for _, p in passes):>16.1f}"
              f"{mean / first:>14.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
