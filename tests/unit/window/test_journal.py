"""The window's journal: one JSON record per line, on disk as soon as it is written, readable after a
crash that tore the last line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from campaign.errors import InputError
from campaign.fsutil import read_jsonl
from campaign.window.journal import Journal

CLOCK = re.compile(r"^\d\d:\d\d:\d\d ")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_each_record_is_on_disk_before_the_next_call(tmp_path: Path) -> None:
    path = tmp_path / "bundle" / "journal.jsonl"  # the folder is made
    journal = Journal(path)
    try:
        journal.intent("boot", lane="baseline")
        # still open: a second reader (the failsafe, a resume) sees it already
        assert [(r["event"], r["step"], r["lane"]) for r in lines(path)] == [("intent", "boot", "baseline")]
        journal.done("boot", lane="baseline")
        assert [(r["event"], r["step"]) for r in lines(path)] == [("intent", "boot"), ("done", "boot")]
    finally:
        journal.close()


def test_record_shapes(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.intent("gate", lane="ngram", gate="speed")
    journal.done("gate", lane="ngram", gate="speed", status="pass", n=3)
    journal.failed("boot", lane="kv", cause="readiness_timeout")
    journal.record("skipped", "gate", lane="kv", gate="quality")
    journal.close()
    records = lines(path)
    for record in records:
        assert isinstance(record["t"], float)
    stripped = [{k: v for k, v in r.items() if k != "t"} for r in records]
    assert stripped == [
        {"event": "intent", "step": "gate", "lane": "ngram", "gate": "speed"},
        {"event": "done", "step": "gate", "lane": "ngram", "gate": "speed", "status": "pass", "n": 3},
        {"event": "failed", "step": "boot", "lane": "kv", "cause": "readiness_timeout"},
        {"event": "skipped", "step": "gate", "lane": "kv", "gate": "quality"},
    ]


def test_records_are_one_sorted_json_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.done("start", window="w1", nested={"b": 1, "a": [1, 2]}, text="café")
    journal.close()
    raw = path.read_text(encoding="utf-8")
    assert raw.endswith("\n") and raw.count("\n") == 1
    record = json.loads(raw)
    assert list(record) == sorted(record)
    assert record["nested"] == {"a": [1, 2], "b": 1}
    assert "café" in raw  # not escaped


def test_finished_steps_counts_only_done(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.intent("start")
    journal.done("start")
    journal.intent("plan")
    journal.failed("plan")
    journal.intent("incumbent.stop")
    assert journal.finished_steps() == {"start"}
    journal.close()


def test_a_later_journal_appends_to_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    first = Journal(path)
    first.done("start")
    first.close()
    second = Journal(path)
    second.done("resume")
    second.close()
    assert [r["step"] for r in lines(path)] == ["start", "resume"]


def test_reopen_after_close_keeps_appending(tmp_path: Path) -> None:
    # the runner closes its journal while restore appends to the same file, then reopens it
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.intent("incumbent.restore")
    journal.close()
    with open(path, "a", encoding="utf-8") as other:
        other.write(json.dumps({"event": "done", "step": "incumbent.restore", "by": "restore"}) + "\n")
    journal.reopen()
    journal.intent("failsafe.disarm")
    journal.close()
    assert [(r["event"], r["step"]) for r in lines(path)] == [
        ("intent", "incumbent.restore"), ("done", "incumbent.restore"), ("intent", "failsafe.disarm")]


def _crashed_journal(path: Path) -> None:
    journal = Journal(path)
    journal.done("start")
    journal.intent("gate", lane="a", gate="speed")
    journal.close()
    with open(path, "a", encoding="utf-8") as torn:  # killed in the middle of writing the next record
        torn.write('{"event": "done", "lane": "a", "st')


def test_a_torn_last_line_is_ignored_by_readers(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _crashed_journal(path)
    assert [(r["event"], r["step"]) for r in read_jsonl(path)] == [("done", "start"), ("intent", "gate")]
    assert Journal(path).finished_steps() == {"start"}


def test_a_torn_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "done", "step": "start"}\n{"event": "do\n{"event": "done", "step": "plan"}\n')
    with pytest.raises(InputError, match=r"journal.jsonl:2: unreadable record"):
        Journal(path).finished_steps()


def test_a_duplicated_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "done", "step": "a", "step": "b"}\n{"event": "done", "step": "c"}\n')
    with pytest.raises(InputError, match="duplicate JSON key 'step'"):
        Journal(path).finished_steps()


def test_resuming_after_a_torn_last_line_keeps_the_journal_readable(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _crashed_journal(path)
    resumed = Journal(path)
    resumed.done("resume")
    resumed.close()
    assert [(r["event"], r["step"]) for r in read_jsonl(path)] == [
        ("done", "start"), ("intent", "gate"), ("done", "resume")]


# echo


def test_echo_gets_one_line_per_record(tmp_path: Path) -> None:
    seen: list[str] = []
    journal = Journal(tmp_path / "journal.jsonl", echo=seen.append)
    journal.intent("plan")
    journal.done("gate", status="pass", lane="ngram", gate="speed", n=3, backend="docker", cause="x")
    journal.close()
    assert len(seen) == 2
    assert all(CLOCK.match(line) for line in seen)
    assert [line[9:] for line in seen] == [
        "plan intent",
        # the chosen fields, in a fixed order whatever order they were given in; others left out
        "gate done lane=ngram gate=speed backend=docker cause=x status=pass",
    ]


def test_echo_with_an_event_hook_gets_the_record_instead(tmp_path: Path) -> None:
    class Display:
        def __init__(self) -> None:
            self.lines: list[str] = []
            self.events: list[tuple[str, str, dict[str, Any], str]] = []

        def __call__(self, line: str) -> None:
            self.lines.append(line)

        def event(self, event: str, step: str, fields: dict[str, Any], line: str) -> None:
            self.events.append((event, step, fields, line))

    display = Display()
    journal = Journal(tmp_path / "journal.jsonl", echo=display)
    journal.failed("boot", lane="kv", cause="oom", log="tail")
    journal.close()
    assert display.lines == []
    assert len(display.events) == 1
    event, step, fields, line = display.events[0]
    assert (event, step, fields) == ("failed", "boot", {"lane": "kv", "cause": "oom", "log": "tail"})
    assert CLOCK.match(line) and line[9:] == "boot failed lane=kv cause=oom"


def test_echo_does_not_change_what_is_written(tmp_path: Path) -> None:
    quiet, loud = tmp_path / "quiet.jsonl", tmp_path / "loud.jsonl"
    for path, echo in ((quiet, None), (loud, [].append)):
        journal = Journal(path, echo=echo)
        journal.done("gate", lane="a", status="pass")
        journal.close()
    strip = lambda p: [{k: v for k, v in r.items() if k != "t"} for r in lines(p)]  # noqa: E731
    assert strip(quiet) == strip(loud) == [{"event": "done", "step": "gate", "lane": "a", "status": "pass"}]
