"""How long validating and freezing a contract with many lanes takes (the work must be linear in lanes).

Writes a contract of one control and N-1 candidates (each changes one argument (--draft); every 100th also pins a
lane file of its own) with one input set and a greedy gate into a temp folder, then prints the seconds
`load_contract` (what `campaign validate` does) and `freeze` (load, hash every referenced file, sign,
write the record) take, for 1,000 and 10,000 lanes, as wall-clock and CPU seconds (on a busy box the
wall clock is the CPU time times the contention). Target: 10,000 lanes under 5 s each on a 2-core box.
    python benchmarks/contract_scale.py [LANES ...]
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import campaign.gates.registry  # noqa: F401 (every kind registered: the schema knows them)
from campaign.contracts.freeze import freeze
from campaign.contracts.load import load_contract
from campaign.signing import SigningKey


def write_contract(folder: Path, lanes: int) -> Path:
    """A valid contract of ``lanes`` lanes in ``folder``; returns its path."""
    (folder / "prompts.jsonl").write_text('{"id": "a", "prompt": "What is the capital of France?"}\n')
    (folder / "files").mkdir(exist_ok=True)
    slotmap = b"layer0: 8\n"
    (folder / "files" / "default.map").write_bytes(slotmap)
    lines = ["contract: scale", "version: 1", "description: many lanes, validated and frozen in linear time",
             "lane_defaults:", "  runtime: process", "  engine: llamacpp", "  executable: llama-server",
             "  port: 18080", "  model: {path: /models/m.gguf}",
             "  args: [--ctx-size, '4096', --draft, '1', --threads, '2']",
             f"  files: [{{name: slotmap, path: files/default.map, sha256: {hashlib.sha256(slotmap).hexdigest()}}}]",
             "inputs:", "  prompts: {file: prompts.jsonl}", "lanes:", "  - {name: base, role: control}"]
    for index in range(1, lanes):
        name = f"cand{index:05d}"
        if index % 100 == 0:
            data = f"layer0: {index}\n".encode()
            (folder / "files" / f"{name}.map").write_bytes(data)
            lines.append(f"  - {{name: {name}, role: candidate, axis: [files.slotmap], set: {{files: "
                         f"[{{name: slotmap, path: files/{name}.map, sha256: {hashlib.sha256(data).hexdigest()}}}]}}}}")
        else:
            lines.append(f"  - {{name: {name}, role: candidate, axis: [args.draft], "
                         f"set: {{args: {{--draft: '{index + 1}'}}}}}}")
    lines += ["gates:", "  - {kind: greedy, input: prompts, repeats: 2, max_tokens: 16, rule: {self_identical: '1/1'}}"]
    path = folder / "scale.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(lanes: int) -> tuple[tuple[float, float], tuple[float, float], int]:
    """((validate wall, cpu), (freeze wall, cpu), contract bytes) for a fresh contract of ``lanes`` lanes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_contract(Path(tmp), lanes)
        wall, cpu = time.perf_counter(), time.process_time()
        loaded = load_contract(path)
        validated = time.perf_counter() - wall, time.process_time() - cpu
        assert len(loaded.lanes) == lanes
        key = SigningKey(Ed25519PrivateKey.generate())
        wall, cpu = time.perf_counter(), time.process_time()
        _, created = freeze(load_contract(path), key)  # as `campaign freeze` does: load, then freeze
        frozen = time.perf_counter() - wall, time.process_time() - cpu
        assert created
        return validated, frozen, path.stat().st_size


def main() -> None:
    counts = [int(arg) for arg in sys.argv[1:]] or [1_000, 10_000]
    print(f"{'lanes':>7} {'bytes':>9} {'validate wall/cpu':>18} {'freeze wall/cpu':>18}")
    for lanes in counts:
        (v_wall, v_cpu), (f_wall, f_cpu), size = measure(lanes)
        print(f"{lanes:>7} {size:>9,} {v_wall:>8.2f}s /{v_cpu:>6.2f}s {f_wall:>8.2f}s /{f_cpu:>6.2f}s")


if __name__ == "__main__":
    main()
