"""Contracts and constants the tests share: the model, free ports, a contract file written with its
prompts, the demo-like two-lane contract most windows start from, and the builders a window of its own
writes its contract with (``contract_yaml`` over ``process_defaults``, ``control`` and ``candidate``)."""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from campaign.contracts.resolve import EffectiveLane

__all__ = ["DEFAULT_PYTHON", "EXAMPLES", "MODEL", "MODEL_SHA256", "PROMPTS", "QUIET_ARGS", "REPO", "THINKING_TEMPLATE",
           "candidate", "contract_yaml", "control", "demo_like", "free_port", "llama_server_lane", "process_defaults",
           "write_contract"]

REPO = Path(__file__).resolve().parent.parent.parent
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
EXAMPLES = REPO / "examples"
# `make test` passes the build it proved (LLAMA_CPP_PYTHON); else the newest cached portable build
DEFAULT_PYTHON = max(Path(os.environ.get("CAMPAIGN_CACHE", Path.home() / ".cache/campaign")).glob(
    "engines/llama-cpp-python-0.3.36-*/venv/bin/python"), default=Path("/nonexistent/python"),
    key=lambda p: p.stat().st_mtime)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PROMPTS = [
    ("capital", "What is the capital of France? Answer in one sentence."),
    ("haiku", "Write a haiku about the sea."),
    ("fib", "Write a Python function that returns the n-th Fibonacci number."),
]


def write_contract(directory: Path, body: str, *, prompts: list[tuple[str, str]] | None = None,
                   name: str = "c.yaml") -> Path:
    """A contract file plus its prompt file, in ``directory``."""
    (directory / "prompts").mkdir(exist_ok=True)
    rows = prompts if prompts is not None else PROMPTS
    (directory / "prompts" / "p.jsonl").write_text(
        "".join(f'{{"id": "{pid}", "prompt": "{text}"}}\n' for pid, text in rows))
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def demo_like(port: int, *, model: Path = MODEL, extra_candidate: str = "", repeats: int = 2,
              max_tokens: int = 24, budget: str = "120s", rule: str = '"3/3"') -> str:
    return f"""\
        contract: t-demo
        version: 1
        lane_defaults:
          runtime: process
          engine: llamacpp
          executable: llama-server
          port: {port}
          model: {{path: {model}, sha256: {MODEL_SHA256}}}
          args: [--ctx-size, "2048", --threads, "2", --parallel, "1", --seed, "0", --no-webui]
          readiness: {{budget: {budget}}}
        lanes:
          - name: base
            role: control
          - name: spec
            role: candidate
            axis: [args.spec-type, args.spec-draft-n-max]
            set:
              args: {{--spec-type: ngram-simple, --spec-draft-n-max: "4"{extra_candidate}}}
        inputs:
          p: {{file: prompts/p.jsonl}}
        gates:
          - kind: greedy
            input: p
            repeats: {repeats}
            max_tokens: {max_tokens}
            rule: {{self_identical: {rule}}}
        promotion:
          requires: [greedy]
        """


def llama_server_lane(name: str, port: int, role: str = "control", **fields: object) -> "EffectiveLane":
    """A process lane of the llama-server on PATH serving the small model, two threads, 512 tokens of
    context; ``fields`` (cpus, gpus, ...) set what the test is about."""
    import shutil

    import pytest

    from campaign.contracts.resolve import EffectiveLane

    executable = shutil.which("llama-server")
    if executable is None:
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    return EffectiveLane.model_validate({
        "name": name, "role": role, "control": None if role == "control" else "c", "runtime": "process",
        "engine": "llamacpp", "executable": executable, "port": port,
        "args": ["--threads", "2", "--ctx-size", "512"], "model": {"path": str(MODEL)}, **fields})


# two llama-server threads (one lane serves at a time), one slot, a fixed seed, no web UI: what a quality
# window's lanes share
QUIET_ARGS = ["--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0", "--no-webui"]


class _NoAliases(yaml.SafeDumper):
    """A contract refuses anchors and aliases: a value used twice is written out twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def contract_yaml(name: str, *, defaults: dict[str, Any], lanes: list[dict[str, Any]], inputs: dict[str, Any],
                  gates: list[dict[str, Any]], requires: list[str] | None = None, **more: Any) -> str:
    """A contract's YAML text: ``defaults`` are its lane_defaults, ``requires`` its promotion's gates,
    ``more`` any other top-level field (incumbent, failsafe). Paths become strings; numbers stay what
    they are, so an argv value is given as a string."""
    body: dict[str, Any] = {"contract": name, "version": 1, "lane_defaults": defaults, "lanes": lanes,
                            "inputs": inputs, "gates": gates}
    if requires is not None:
        body["promotion"] = {"requires": requires}
    body.update(more)
    return yaml.dump(_plain(body), Dumper=_NoAliases, sort_keys=False, width=120)


def process_defaults(port: int, *, args: list[str] | None = None, budget: str | None = "120s",
                     engine: str = "llamacpp", executable: str | Path = "llama-server",
                     model: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """lane_defaults of a process lane serving the small model (llama-server unless ``engine`` says
    otherwise); ``budget`` None leaves readiness to its default, ``fields`` add the rest (env, files)."""
    defaults: dict[str, Any] = {"runtime": "process", "engine": engine, "executable": executable, "port": port,
                                "model": model if model is not None else {"path": MODEL, "sha256": MODEL_SHA256}}
    if args is not None:
        defaults["args"] = args
    if budget is not None:
        defaults["readiness"] = {"budget": budget}
    return {**defaults, **fields}


def control(name: str = "base") -> dict[str, Any]:
    return {"name": name, "role": "control"}


def candidate(name: str, axis: list[str], **changes: Any) -> dict[str, Any]:
    """A candidate lane: ``changes`` is its ``set`` (args, env, files, ...), ``axis`` the fields it declares."""
    return {"name": name, "role": "candidate", "axis": axis, "set": changes}


# ChatML as SmolLM2 uses it, plus the branch a reasoning model's template has: a template that honours the
# thinking switch (`enable_thinking`), served on llama-server (quality/test_ruler_thinking.py) and SGLang
# (engines/test_sglang_window.py)
THINKING_TEMPLATE = """\
{%- for message in messages -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking %}<think>
Let me think step by step.
{% endif -%}
{%- endif -%}
"""
