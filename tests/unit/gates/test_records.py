"""Visit keys are values: a lane name can never collide with another lane's later boot, and keys round-trip
through the raw-record file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.contracts.model import NAME_PATTERN
from campaign.gates.records import VisitKey, greedy_replays, read_records


def test_a_key_round_trips_through_its_text() -> None:
    for key in (VisitKey("base"), VisitKey("base", 1), VisitKey("x.rerun1"), VisitKey("x.rerun1", 2)):
        assert VisitKey.parse(str(key)) == key


def test_a_lane_named_like_an_old_rerun_is_its_own_lane() -> None:
    assert str(VisitKey("x.rerun1")) != str(VisitKey("x", 1))
    assert VisitKey.parse("x.rerun1") == VisitKey("x.rerun1", 0)


def test_lane_names_cannot_hold_the_visit_separator() -> None:
    import re

    assert re.match(NAME_PATTERN, "base@rerun1") is None
    with pytest.raises(ValueError):
        VisitKey("base@rerun1")
    with pytest.raises(ValueError):
        VisitKey.parse("base@rerun0")


def test_records_of_a_rerun_are_read_under_the_new_and_the_old_name(tmp_path: Path) -> None:
    raw = tmp_path / "raw" / "speed"
    raw.mkdir(parents=True)
    (raw / "base@rerun1.jsonl").write_text(json.dumps({"seq": 1}) + "\n")
    (raw / "old.rerun2.jsonl").write_text(json.dumps({"seq": 2}) + "\n")
    assert read_records(tmp_path, "speed", VisitKey("base", 1)) == [{"seq": 1}]
    assert read_records(tmp_path, "speed", VisitKey("old", 2)) == [{"seq": 2}]
    assert read_records(tmp_path, "speed", VisitKey("base", 2)) == []


def test_greedy_replays_are_first_repeat_greedy_unstreamed_replies() -> None:
    def record(repeat: int, temperature: float, stream: bool = False, prompt: str = "p") -> dict:
        return {"path": "/v1/chat/completions", "tags": {"repeat": repeat, "prompt": prompt},
                "request": {"temperature": temperature, "stream": stream},
                "response": {"choices": [{"message": {"content": f"reply {prompt}"}}]}}

    records = [record(1, 0), record(0, 0.7), record(0, 0, stream=True), record(0, 0, prompt="a"),
               {"path": "/x", "tags": {"repeat": 0}, "request": {"temperature": 0}, "error": "HTTP 500"},
               record(0, 0, prompt="b"), record(0, 0, prompt="c")]
    replays = greedy_replays(records, limit=2)
    assert [(r.prompt, r.reply) for r in replays] == [("a", "reply a"), ("b", "reply b")]
