"""The seeds the fuzzers mutate: a small signed bundle of the shape a window writes, and the smallest contract
that loads."""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUNDLE_FILES", "MINIMAL", "make_bundle"]


BUNDLE_FILES = {
    "SUMMARY.json": b'{"status": "complete", "window": "w1"}\n',
    "contract/contract.yaml": b"contract: demo\nversion: 1\n",
    "gates/greedy/spec.json": b'{"verdict": "PASS", "metrics": {"x": 1}}\n',
    "lanes/spec/inspect.json": b'{"argv": ["llama-server", "--threads", "2"]}\n',
    "raw/greedy/spec.jsonl": b'{"prompt": "a", "text": "b"}\n{"prompt": "c", "text": "d"}\n',
    "lanes/spec/launch_failure.txt": b"readiness_timeout: <script>alert(1)</script>\n",
}


def make_bundle(parent: Path) -> Path:
    from campaign.receipts.bundle import sign_bundle
    from campaign.signing import init_keys, load_signing_key

    init_keys()  # once per test (the key folder is the test's own); kept after
    root = parent / "20261129T000000Z-demo-v1-abcd"
    for name, data in BUNDLE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    sign_bundle(root, load_signing_key(), {"window": root.name})
    return root


MINIMAL = {
    "contract": "h", "version": 1,
    "lane_defaults": {"runtime": "process", "engine": "llamacpp", "executable": "llama-server", "port": 18999,
                      "model": {"path": "/m.gguf"}},
    "lanes": [{"name": "base", "role": "control"},
              {"name": "cand", "role": "candidate", "axis": ["args.threads"], "set": {"args": {"--threads": "2"}}}],
    "inputs": {"p": {"file": "prompts/greedy8.jsonl"}},
    "gates": [{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "8/8"}}],
}
