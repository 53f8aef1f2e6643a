"""docs/inputs.md's examples are read by each gate's own loader, and every gate kind has its section, so the
page a stranger learns the input formats from cannot drift from the code."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from campaign.errors import ContractError
from campaign.gates.common.inputs import load_prompts, load_rows, load_sources
from campaign.gates.registry import GATES
from campaign.gates.screen.cachereplay import load_trace
from campaign.gates.task.catalog import user_tasks

DOC = Path(__file__).resolve().parents[2] / "docs" / "inputs.md"
BLOCK = re.compile(r"^```jsonl loader=(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)

# each loader as the gate calls it; the count is how many items the block's rows make
LOADERS: dict[str, Callable[[Path], Any]] = {
    "prompts": load_prompts,
    "sources": lambda path: load_sources(path, need_text=False),
    "references": lambda path: load_sources(path, need_text=True),
    "tasks": user_tasks,
    "structured": lambda path: load_rows(path, required=("schema", "answer")),
    "tools": lambda path: load_rows(path, required=("tools", "expect", "results")),
    "trace": lambda path: load_trace(path).experts,
}


def _blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_every_loader_has_an_example_and_every_example_a_loader() -> None:
    assert sorted({name for name, _ in _blocks()}) == sorted(LOADERS)


@pytest.mark.parametrize(("loader", "text"), _blocks(), ids=[name for name, _ in _blocks()])
def test_each_example_is_read_whole_by_its_gates_loader(loader: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_text(text, encoding="utf-8")
    rows = [line for line in text.splitlines() if line.strip() and not line.startswith('{"n_experts"')]
    assert len(LOADERS[loader](path)) == len(rows)


@pytest.mark.parametrize(("loader", "text"), [b for b in _blocks() if b[0] != "trace"],
                         ids=[name for name, _ in _blocks() if name != "trace"])
def test_an_example_without_its_id_is_refused_so_the_loader_reads_what_the_page_says(
        loader: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_text(re.sub(r'^\{"id": "[^"]*", ', "{", text, flags=re.MULTILINE), encoding="utf-8")
    with pytest.raises(ContractError, match="id"):
        LOADERS[loader](path)


def test_every_gate_kind_has_a_section() -> None:
    headings = " ".join(line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("## "))
    missing = [kind for kind in GATES if not re.search(rf"\b{kind}\b", headings)]
    assert not missing, f"docs/inputs.md has no section naming {missing}"
