"""Records every contract document the contract tests (tests/unit/contracts) load, as the loader parsed it:
the corpus the JSON Schema test (tests/unit/contracts/test_json_schema.py) checks, whatever test wrote the
document and however.

Two ways. In a process that ran the whole contract folder before the JSON Schema test (serial ``pytest`` over
the folder or more), the documents are kept in ``SESSION_CORPUS`` as the tests load them and that test runs
after the folder's last test, on what it kept. Otherwise (that test alone, a selection, or a pytest-xdist worker
that ran only part of the folder: ``make test`` runs the unit tests on two) it runs the folder's tests in a
subprocess with this module as a plugin (``-p tests.support.schemacorpus``) and CAMPAIGN_SCHEMA_CORPUS naming the
file to write, one JSON line a document. pytest-xdist's ``loadgroup``, which could keep the folder on one worker,
groups nothing under pytest 9.2 (it renames ``item._nodeid``, which ``nodeid`` no longer reads)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CONTRACT_TESTS", "SESSION_CORPUS", "session_corpus"]

CONTRACT_TESTS = Path(__file__).resolve().parents[1] / "unit" / "contracts"
CORPUS_TEST = CONTRACT_TESTS / "test_json_schema.py"
SESSION_CORPUS: list[dict[str, Any]] = []
_state = {"recording": False, "deselected": False}
_folder: dict[str, set[str]] = {"files": set(), "collected": set(), "ran": set()}


def session_corpus() -> list[dict[str, Any]] | None:
    """The documents this session's contract tests loaded, or None when the session did not run them all
    before the caller (then only a subprocess gives the whole corpus)."""
    # every file of the folder collected, nothing deselected (else the kept corpus is a part of it), and each
    # collected test run by this process (a worker may run only some of the folder)
    wanted = {str(path) for path in CONTRACT_TESTS.glob("test_*.py") if path != CORPUS_TEST}
    whole = (not os.environ.get("CAMPAIGN_SCHEMA_CORPUS") and not _state["deselected"]
             and _folder["files"] == wanted and _folder["ran"] == _folder["collected"])
    return list(SESSION_CORPUS) if whole else None


def pytest_configure(config: pytest.Config) -> None:
    from campaign.contracts import load

    target = os.environ.get("CAMPAIGN_SCHEMA_CORPUS")
    original = load.load_located

    def recording(path: Path) -> Any:
        document = original(path)
        if not (target or _state["recording"]):
            return document
        try:
            line = json.dumps(document.data, allow_nan=False)
        except (TypeError, ValueError):  # not JSON (a date, a non-finite number): the loader refuses it anyway
            return document
        if target:
            with open(target, "a", encoding="utf-8") as corpus:
                corpus.write(line + "\n")
        else:
            SESSION_CORPUS.append(json.loads(line))
        return document

    load.load_located = recording  # type: ignore[assignment]


def _in_folder(item: pytest.Item) -> bool:
    return item.path.parent == CONTRACT_TESTS and item.path != CORPUS_TEST


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The corpus test after the folder's last test, so that the folder's documents are all kept by then."""
    corpus = [item for item in items if item.path == CORPUS_TEST and item.name.startswith("test_every_contract")]
    last = max((index for index, item in enumerate(items) if _in_folder(item)), default=None)
    if not corpus or last is None:
        return
    for item in corpus:
        items.remove(item)
    last = max(index for index, item in enumerate(items) if _in_folder(item))
    items[last + 1:last + 1] = corpus


def pytest_deselected(items: list[pytest.Item]) -> None:
    # -k, -m, --deselect and --lf all come through here: a folder missing a test keeps no whole corpus
    if any(_in_folder(item) for item in items):
        _state["deselected"] = True


def pytest_collection_finish(session: pytest.Session) -> None:
    _folder["files"] = {str(item.path) for item in session.items if _in_folder(item)}
    _folder["collected"] = {item.nodeid for item in session.items if _in_folder(item)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _state["recording"] = _in_folder(item)
    try:
        return (yield)
    finally:
        _state["recording"] = False
        if _in_folder(item):
            _folder["ran"].add(item.nodeid)
