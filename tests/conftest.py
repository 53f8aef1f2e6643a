"""Shared fixtures. Integration tests use the real llama-server (built by `make engine`, put on PATH by
`make test`) and the real SmolLM2 model; nothing here stands in for an engine."""

from __future__ import annotations

import shutil
import socket
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


@pytest.fixture(autouse=True)
def isolated_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own key directory, so no test signs with (or trusts) the user's key."""
    config = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def llama_server() -> str:
    path = shutil.which("llama-server")
    if not path:
        pytest.fail("llama-server is not on PATH: run the tests with `make test` (it builds and finds the engine)")
    if not MODEL.exists():
        pytest.fail(f"{MODEL} missing: run `make model`")
    return path


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
