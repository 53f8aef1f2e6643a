"""How long a hostile, deeply nested contract costs before it is refused (the bound is MAX_DEPTH levels).

Prints the time to refuse 1,000 and 100,000 nested flow lists and mappings, and to load the demo
contract, measured in this one run. Target: every refusal well under a second.
    python benchmarks/contract_nesting.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import campaign.gates.registry  # noqa: F401 (every kind registered: the schema knows them)
from campaign.contracts.load import load_contract
from campaign.errors import ContractError

REPO = Path(__file__).resolve().parent.parent


def timed(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        load_contract(path)
        outcome = "loaded"
    except ContractError as exc:
        outcome = f"refused: {str(exc).split(': ', 1)[1][:60]}"
    return time.perf_counter() - start, outcome


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for depth in (1_000, 100_000):
            for name, nest in (("lists", "[" * depth + "]" * depth), ("maps", "{a: " * depth + "1" + "}" * depth)):
                path = Path(tmp) / f"{name}{depth}.yaml"
                path.write_text(f"contract: x\nversion: 1\nlanes: {nest}\n")
                seconds, outcome = timed(path)
                print(f"{depth:>7} nested {name:<5} {seconds * 1000:8.1f} ms  {outcome}")
    seconds, outcome = timed(REPO / "examples" / "demo.yaml")
    print(f"{'demo':>7} contract     {seconds * 1000:8.1f} ms  {outcome}")


if __name__ == "__main__":
    main()
