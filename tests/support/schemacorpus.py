"""Records every contract document the contract tests (tests/unit/contracts) load, as the loader parsed it:
the corpus the JSON Schema test (tests/unit/contracts/test_json_schema.py) checks, whatever test wrote the
document and however.

Two ways. In a process that ran the whole contract folder before the JSON Schema test (serial ``pytest`` over
the folder or more), the documents are kept in ``SESSION_CORPUS`` as the tests load them and that test runs
after the folder's last test, on what it kept. Otherwise (that test alone, a selection, or a pytest-xdist worker
that ran only part of the folder: ``make test`` runs the unit tests on two) it runs the folder's tests in a
subprocess with this module as a plugin (``-p tests.support.schemacorpus``) and CAMPAIGN_SCHEMA_CORPUS naming the
file to write, one JSON line a document. pytest-xdist's ``loadgroup``, which could keep the folder on one worker,
groups nothing under pytest 9.2 (it renames ``item._nodeid``, which ``nodeid`` no longer reads).

Under ``make test`` neither: its workers ran the whole folder between them, so each one writes what its tests
loaded, and which tests it ran, under CAMPAIGN_SCHEMA_CORPUS_DIR (a fresh folder per ``make test``); the JSON
Schema test (marked ``after_unit``) runs in the second, serial run and reads them when they cover every test of
the folder. The subprocess ran the folder's 549 tests a second time: 86 s of a 4-minute unit run on 2 cores."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CONTRACT_TESTS", "RECORD_DIR", "SESSION_CORPUS", "session_corpus"]

CONTRACT_TESTS = Path(__file__).resolve().parents[1] / "unit" / "contracts"
CORPUS_TEST = CONTRACT_TESTS / "test_json_schema.py"
RECORD_DIR = "CAMPAIGN_SCHEMA_CORPUS_DIR"
SESSION_CORPUS: list[dict[str, Any]] = []
_state = {"recording": False, "deselected": False}
_folder: dict[str, set[str]] = {"files": set(), "collected": set(), "ran": set(), "every": set()}


def session_corpus() -> list[dict[str, Any]] | None:
    """The documents this session's contract tests loaded, or None when the session did not run them all
    before the caller (then only a subprocess gives the whole corpus)."""
    # every file of the folder collected, nothing deselected (else the kept corpus is a part of it), and each
    # collected test run by this process (a worker may run only some of the folder)
    wanted = {str(path) for path in CONTRACT_TESTS.glob("test_*.py") if path != CORPUS_TEST}
    whole = (not os.environ.get("CAMPAIGN_SCHEMA_CORPUS") and not _state["deselected"]
             and _folder["files"] == wanted and _folder["ran"] == _folder["collected"])
    return list(SESSION_CORPUS) if whole else _recorded_corpus()


def _recorded_corpus() -> list[dict[str, Any]] | None:
    """What this run's workers recorded under RECORD_DIR, when they ran every test of the folder."""
    folder = os.environ.get(RECORD_DIR)
    if not folder or not _folder["every"]:
        return None
    ran = {line for path in Path(folder).glob("ran-*.lines") for line in path.read_text().splitlines()}
    if ran != _folder["every"]:
        return None
    return [json.loads(line) for path in sorted(Path(folder).glob("documents-*.lines"))
            for line in path.read_text().splitlines()]


def _record(name: str, line: str) -> None:
    """One line to this process's own file under RECORD_DIR (a file per worker: no two write one file)."""
    with open(Path(os.environ[RECORD_DIR]) / f"{name}-{os.getpid()}.lines", "a", encoding="utf-8") as out:
        out.write(line + "\n")


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
            if os.environ.get(RECORD_DIR):
                _record("documents", line)
        return document

    load.load_located = recording  # type: ignore[assignment]


def _in_folder(item: pytest.Item) -> bool:
    return item.path.parent == CONTRACT_TESTS and item.path != CORPUS_TEST


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Every test of the folder, seen before -m or -k deselects any (what the workers' records must cover);
    then, once the selection is made, the corpus test after the folder's last test, so that the folder's
    documents are all kept by then."""
    _folder["every"] = {item.nodeid for item in items if _in_folder(item)}
    result = yield
    corpus = [item for item in items if item.path == CORPUS_TEST and item.name.startswith("test_every_contract")]
    last = max((index for index, item in enumerate(items) if _in_folder(item)), default=None)
    if not corpus or last is None:
        return result
    for item in corpus:
        items.remove(item)
    last = max(index for index, item in enumerate(items) if _in_folder(item))
    items[last + 1:last + 1] = corpus
    return result


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
            if os.environ.get(RECORD_DIR):
                _record("ran", item.nodeid)
