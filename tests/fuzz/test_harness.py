"""The bounds every fuzz example runs under hold: a hang is killed and reported, memory past the bound fails,
a crash is reported, a CampaignError of two lines or of another type is a failure."""

from __future__ import annotations

import os
import signal
import time

import pytest

from campaign.errors import ContractError, InputError
from tests.fuzz import harness
from tests.fuzz.harness import MEGABYTES, bad_terminal_chars, check_outcome, run_bounded


@pytest.fixture(autouse=True)
def _failures_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests expect the AssertionError, catalog mode (CAMPAIGN_FUZZ_CATALOG) or not."""
    monkeypatch.setattr(harness, "CATALOG", "")


def test_a_hang_is_killed_and_reported() -> None:
    started = time.monotonic()
    outcome = run_bounded(lambda: time.sleep(60), seconds=1)
    assert outcome.kind == "hang" and time.monotonic() - started < 10
    with pytest.raises(AssertionError, match="no result after"):
        check_outcome(outcome)


def test_memory_past_the_bound_fails_and_under_it_does_not() -> None:
    over = run_bounded(lambda: len(bytearray((MEGABYTES + 50) << 20)))
    assert over.kind == "raised" and over.exc_type == "builtins.MemoryError"
    with pytest.raises(AssertionError, match="MemoryError"):
        check_outcome(over)
    under = run_bounded(lambda: len(bytearray((MEGABYTES - 50) << 20)))
    assert under.kind == "ok" and under.value == (MEGABYTES - 50) << 20


def test_a_crash_is_reported() -> None:
    outcome = run_bounded(lambda: os.kill(os.getpid(), signal.SIGKILL))  # what the OOM killer would do
    assert outcome.kind == "died" and "SIGKILL" in outcome.detail


def test_only_a_one_line_campaign_error_passes() -> None:
    def raise_(exc: BaseException) -> None:
        raise exc

    check_outcome(run_bounded(lambda: raise_(ContractError("bad", file="c.yaml", line=3, field="x"))))
    check_outcome(run_bounded(lambda: 42))
    with pytest.raises(AssertionError, match="accepted an input it must refuse"):
        check_outcome(run_bounded(lambda: 42), may_pass=False)
    class Unescaped(InputError):  # CampaignError escapes its text; this one shows the harness still looks
        def __str__(self) -> str:
            return Exception.__str__(self)

    with pytest.raises(AssertionError, match="not one line"):
        check_outcome(run_bounded(lambda: raise_(Unescaped("two\nlines"))))
    with pytest.raises(AssertionError, match="other than a CampaignError"):
        check_outcome(run_bounded(lambda: raise_(RecursionError("deep"))))


def test_what_a_terminal_must_not_receive() -> None:
    assert bad_terminal_chars("ok [/x] a:b: é\n") == []
    assert bad_terminal_chars("\x1b[2J\r\x9b\u202e\u2028\x7f") == ["U+001B", "U+000D", "U+009B", "U+202E", "U+2028",
                                                                    "U+007F"]
