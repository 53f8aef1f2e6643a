"""Why teacher forcing does not give a GPU lane's greedy tokens back: one measurement per suspect.

For each configuration (parallel 1 or 4, flash attention on or off) and each prompt of tf4.jsonl, the
greedy continuation (12 tokens, top-10 logprobs at generation time) is scored back four ways, and the
largest |generation - teacher-forced| logprob and the worst rank of the greedy token are printed:

  batched   every prefix in one /completion request, each prefilled from scratch (what the adapter does)
  alone     one request per prefix, prefilled from scratch (no other sequence in the batch)
  cached    one request per prefix on one slot with cache_prompt: the prefix's last token is decoded on
            top of the cached KV, as generation decodes it (the same kernel path)
  again     batched, a second time (is the batched path itself repeatable?)

python3 tf_probe.py SERVER MODEL PROMPTS_JSONL"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import httpx
from probe import ready  # the same folder: run as a script, it is on sys.path

URL = "http://127.0.0.1:18610"
CONFIGS = {"p1-fa-on": ["--parallel", "1", "-fa", "on"], "p4-fa-on": ["--parallel", "4", "-fa", "on"],
           "p4-fa-off": ["--parallel", "4", "-fa", "off"]}
BASE = ["--host", "127.0.0.1", "--port", "18610", "-ngl", "99", "--ctx-size", "8192", "--threads", "8",
        "--seed", "0", "--no-webui"]
TOKENS, TOP = 12, 10


def boot(server: str, model: str, extra: list[str], env: dict[str, str] | None = None,
         log: str | None = None) -> subprocess.Popen[bytes]:
    """The probe's own server on its own port; ``env`` adds variables, ``log`` keeps its stderr."""
    proc = subprocess.Popen([server, "-m", model, *BASE, *extra], stdout=subprocess.DEVNULL,
                            stderr=open(log, "w") if log else subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return ready(proc, f"{URL}/health", str(extra))


def completion(body: dict) -> list[dict]:
    answer = httpx.post(f"{URL}/completion", json=body, timeout=300).json()
    return answer if isinstance(answer, list) else [answer]


def chat_ids(text: str) -> list[int]:
    rendered = httpx.post(f"{URL}/apply-template", json={"messages": [{"role": "user", "content": text}]},
                          timeout=60).json()["prompt"]
    return httpx.post(f"{URL}/tokenize", json={"content": rendered, "add_special": True, "parse_special": True},
                      timeout=60).json()["tokens"]


def lookup(probs: dict, token: int) -> tuple[float | None, int | None]:
    top = probs.get("top_logprobs") or probs.get("top_probs") or []
    for rank, alt in enumerate(top, start=1):
        if alt.get("id") == token:
            return float(alt.get("logprob", math.log(max(alt.get("prob", 1e-30), 1e-30)))), rank
    return None, None


def scored(results: list[dict]) -> list[dict]:
    out = []
    for result in sorted(results, key=lambda r: r.get("index", 0)):
        probs = result.get("completion_probabilities") or []
        out.append(probs[0] if probs else {})
    return out


def measure(prompt: list[int]) -> dict[str, tuple[float, int, int]]:
    gen = completion({"prompt": prompt, "n_predict": TOKENS, "temperature": 0, "n_probs": TOP,
                      "cache_prompt": False, "return_tokens": True, "seed": 0})[0]
    steps = gen["completion_probabilities"]
    ids = [int(s["id"]) for s in steps]
    gen_lp = [float(s["logprob"]) for s in steps]
    prefixes = [prompt + ids[:t] for t in range(len(ids))]
    one = {"n_predict": 1, "temperature": 0, "n_probs": TOP, "seed": 0}
    ways = {
        "batched": scored(completion({**one, "prompt": prefixes, "cache_prompt": False})),
        "alone": [scored(completion({**one, "prompt": p, "cache_prompt": False}))[0] for p in prefixes],
        "cached": [scored(completion({**one, "prompt": p, "cache_prompt": True, "id_slot": 0}))[0]
                   for p in prefixes],
        "again": scored(completion({**one, "prompt": prefixes, "cache_prompt": False})),
    }
    out = {}
    for way, positions in ways.items():
        worst, rank_worst, missing = 0.0, 1, 0
        for t, probs in enumerate(positions):
            logprob, rank = lookup(probs, ids[t])
            if logprob is None:
                missing += 1
                continue
            worst = max(worst, abs(logprob - gen_lp[t]))
            rank_worst = max(rank_worst, rank or 1)
        out[way] = (worst, rank_worst, missing)
    return out


def positions(prompt: list[int], extra: dict) -> None:
    """Position by position, the generated token's logprob and the top 3 as generation reports them (with
    ``extra`` request fields) and as one prefix alone reports them: where the two part, and how."""
    gen = completion({"prompt": prompt, "n_predict": TOKENS, "temperature": 0, "n_probs": TOP,
                      "cache_prompt": False, "return_tokens": True, "seed": 0, **extra})[0]
    steps = gen["completion_probabilities"]
    ids = [int(s["id"]) for s in steps]
    for t, step in enumerate(steps):
        alone = scored(completion({"prompt": prompt + ids[:t], "n_predict": 1, "temperature": 0, "n_probs": TOP,
                                   "cache_prompt": False, "seed": 0, **extra}))[0]
        top = lambda probs: " ".join(f"{a['id']}:{a['logprob']:.3f}" for a in (probs.get("top_logprobs") or [])[:3])  # noqa: E731
        print(f"  t={t} id={ids[t]} gen {step['logprob']:.4f} [{top(step)}] | alone "
              f"{alone.get('logprob', float('nan')):.4f} id={alone.get('id')} [{top(alone)}]", flush=True)


def detail(server: str, model: str, prompts_file: str) -> None:
    text = json.loads(open(prompts_file).readline())["prompt"]
    for name, extra_args in (("p1-fa-on", CONFIGS["p1-fa-on"]), ("p1-fa-on-no-graphs", CONFIGS["p1-fa-on"])):
        proc = boot(server, model, extra_args, env={"GGML_CUDA_DISABLE_GRAPHS": "1"} if "graphs" in name else None,
                    log=f"/tmp/{name}.log")
        try:
            prompt = chat_ids(text)
            for label, extra in (("defaults", {}), ("no truncation", {"top_k": 0, "top_p": 1.0, "min_p": 0.0}),
                                 ("post-sampling off", {"post_sampling_probs": False})):
                print(f"{name} {label}:", flush=True)
                positions(prompt, extra)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print("".join(line for line in open(f"/tmp/{name}.log") if "sampl" in line.lower() or "graph" in line.lower())[-1500:])


def main(server: str, model: str, prompts_file: str) -> None:
    if "--detail" in sys.argv:
        detail(server, model, prompts_file)
        return
    texts = [json.loads(line)["prompt"] for line in open(prompts_file) if line.strip()]
    for name, extra in CONFIGS.items():
        proc = boot(server, model, extra)
        try:
            completion({"prompt": "warm up", "n_predict": 4, "temperature": 0})
            for index, text in enumerate(texts):
                row = measure(chat_ids(text))
                shown = "  ".join(f"{way} max|d| {d:.4f} rank<={r} missing {m}" for way, (d, r, m) in row.items())
                print(f"{name} prompt {index}: {shown}", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main(*sys.argv[1:4])
