"""`campaign doctor CONTRACT`'s line on the supervisor outside the runner's process tree: a daily behind the
watchdog pair needs the periodic check; the engine's watchdog and systemd are outside by themselves."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.failsafe.supervisor import mark_check_ran
from campaign.window.doctor import _outside_supervisor
from tests.support.contracts import demo_like, write_contract


def _loaded(tmp_path: Path, backend: str):  # noqa: ANN202 - a LoadedContract
    body = textwrap.dedent(demo_like(18000)) + textwrap.dedent(f"""\
        incumbent: {{runtime: process, endpoint: "http://127.0.0.1:18000", pidfile: daily.pid}}
        failsafe: {{deadline: 10m, backend: {backend}}}
        """)
    return load_contract(write_contract(tmp_path, body), check_files=False)


def test_a_daily_behind_the_pair_warns_until_the_periodic_check_runs(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning, not a failure: `campaign run` proceeds without one (the pair restores the daily), saying so;
    the doctor says the same, and a fresh machine without cron can still run its first window."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (check,) = _outside_supervisor(_loaded(tmp_path, "watchdog"))
    assert check.ok and check.warn and check.line().startswith("WARN  failsafe supervisor: no supervisor outside")
    assert check.line().endswith("-> campaign failsafe install (and a running cron daemon)")
    mark_check_ran()
    (check,) = _outside_supervisor(_loaded(tmp_path, "watchdog"))
    assert check.ok and not check.warn and "periodic check" in check.detail
    (check,) = _outside_supervisor(_loaded(tmp_path, "systemd"))
    assert check.ok and check.detail.startswith("systemd: outside")
