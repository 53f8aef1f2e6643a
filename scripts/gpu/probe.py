"""Measure before choosing a speed axis: decode tok/s of llama-server configurations on this GPU, each
booted twice (boot-to-boot noise) with three requests per boot at one stream and one round of four
concurrent streams. Prints one line per configuration; nothing here is a gate, it only says which axis
has an effect worth a window.  python3 probe.py SERVER MODEL"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

CONFIGS = {
    "fa-on": ["-fa", "on"],
    "fa-off": ["-fa", "off"],
    "ngl-8": ["-fa", "on", "-ngl", "8"],
}
# PROBE_CONFIGS='{"name": ["-flag", "value"], ...}' measures others against the same base; a configuration
# may also be {"args": [...], "env": {"NAME": "value"}} for a variable the engine reads
CONFIGS = json.loads(os.environ["PROBE_CONFIGS"]) if os.environ.get("PROBE_CONFIGS") else CONFIGS
BASE = ["--host", "127.0.0.1", "--port", "18600", "-ngl", "99", "--ctx-size", "8192", "--parallel", "4",
        "--threads", "8", "--seed", "0", "--no-webui"]
PROMPT = "Write a long story about a lighthouse keeper who collects shells. " * 4


def decode(n: int) -> float:
    answer = httpx.post("http://127.0.0.1:18600/completion", timeout=120,
                        json={"prompt": PROMPT, "n_predict": n, "temperature": 0, "ignore_eos": True})
    return float(answer.json()["timings"]["predicted_per_second"])


def boot(server: str, model: str, config: list[str] | dict[str, Any]) -> subprocess.Popen[bytes]:
    extra = config if isinstance(config, list) else list(config.get("args", []))
    env = {**os.environ, **({} if isinstance(config, list) else config.get("env", {}))}
    args = [server, "-m", model, *BASE]
    for i in range(0, len(extra), 2):  # a later -ngl replaces the base one
        if extra[i] in args:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        else:
            args += extra[i:i + 2]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return ready(proc, "http://127.0.0.1:18600/health", str(args))


def ready(proc: subprocess.Popen[bytes], health: str, what: str) -> subprocess.Popen[bytes]:
    """``proc`` once ``health`` answers 200 (within 180 s), else killed and an error naming ``what``."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(health, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"{what} not ready")


def main(server: str, model: str) -> None:
    for name, extra in CONFIGS.items():
        c1, c4 = [], []
        for _ in range(2):
            proc = boot(server, model, extra)
            try:
                decode(16)  # warm-up, not counted
                boot_c1 = [decode(256) for _ in range(3)]
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    t0 = time.monotonic()
                    rates = list(pool.map(lambda _: decode(256), range(4)))
                    c4.append(4 * 256 / (time.monotonic() - t0))
                c1.append(statistics.mean(boot_c1))
                spread = (max(boot_c1) - min(boot_c1)) / statistics.mean(boot_c1)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            print(f"{name}: boot C1 {statistics.mean(boot_c1):.1f} tok/s (rep spread {spread:.1%}), "
                  f"C4 {c4[-1]:.0f} tok/s aggregate (per stream {statistics.mean(rates):.1f})", flush=True)
        print(f"{name}: C1 {statistics.mean(c1):.1f} tok/s, boot-to-boot {abs(c1[0] - c1[1]) / statistics.mean(c1):.2%}; "
              f"C4 {statistics.mean(c4):.0f}, boot-to-boot {abs(c4[0] - c4[1]) / statistics.mean(c4):.2%}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
