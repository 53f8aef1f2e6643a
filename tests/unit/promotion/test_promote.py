"""The process swap's put-back: a candidate that cannot start as the daily leaves the previous daily
serving, never nothing. The daily's stop and start are replaced by recorders here (the integration tests
kill real promotions at each step, tests/integration/window/test_promote.py); what is checked is the order."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.daily import incumbent
from campaign.daily.ledger import Ledger
from campaign.errors import RunError
from campaign.promotion import promote


def test_a_candidate_that_fails_to_start_puts_the_previous_daily_back(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    def start(snap: dict, log: Path) -> int:
        calls.append(("start", snap["argv"][0]))
        if snap["argv"][0] == "candidate":
            raise OSError("exec format error")
        return 1

    monkeypatch.setattr(incumbent, "stop", lambda snap, **_: calls.append(("stop", snap["argv"][0])))
    monkeypatch.setattr(incumbent, "start", start)
    monkeypatch.setattr(incumbent, "running_pid", lambda snap: None)
    monkeypatch.setattr(incumbent, "is_serving", lambda snap: False)
    with pytest.raises(RunError, match="the previous daily was started again"):
        promote._swap_process(tmp_path, "spec", {"argv": ["daily"], "pidfile": "daily.pid"},
                              {"argv": ["candidate"], "pidfile": "daily.pid"}, Ledger(tmp_path / "ledger.jsonl"))
    assert calls == [("stop", "daily"), ("start", "candidate"), ("start", "daily")]
