"""The periodic check's crontab line and records, and which supervisor a window being armed names."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from campaign.failsafe import supervisor


@pytest.fixture(autouse=True)
def odd_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state 100%"))  # a space and a % in the path
    return tmp_path


def test_the_line_runs_this_campaign_every_minute_in_crons_bare_environment(odd_state_home: Path) -> None:
    line = supervisor.check_line()
    assert line.startswith("* * * * * ") and line.endswith(supervisor.MARK)
    command = line[len("* * * * * "):-len(supervisor.MARK)]
    assert "100\\%" in command  # cron reads a bare % as a newline
    words = shlex.split(command.replace("\\%", "%"))
    assert f"XDG_STATE_HOME={odd_state_home / 'state 100%'}" in words
    assert words[words.index(sys.executable):][:5] == [sys.executable, "-m", "campaign.cli", "failsafe", "check"]
    # the words before the python are what campaign needs to be imported from a bare environment
    env = dict(word.split("=", 1) for word in words[:words.index(sys.executable)])
    done = subprocess.run([sys.executable, "-c", "import campaign.cli"], env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_guard_names_the_supervisor_or_warns() -> None:
    engine = SimpleNamespace(failsafe_container="0123456789abcdef", failsafe_unit=None)
    assert supervisor.guard("engine", engine) == ("the watchdog container 0123456789ab on the daily's Docker engine "
                                                  "(restart policy always)", None)
    assert supervisor.guard("systemd", SimpleNamespace(failsafe_unit="campaign-failsafe-w-1"))[0] == \
        "the systemd timer campaign-failsafe-w-1.timer"
    name, warning = supervisor.guard("watchdog", None)
    assert name == "none" and warning is not None and "campaign failsafe install" in warning
    supervisor.mark_check_ran()  # run by a scheduler of the user's own: that is a supervisor too
    name, warning = supervisor.guard("watchdog", None)
    assert warning is None and name.startswith("the periodic check `campaign failsafe check` (last ran ")
    supervisor._last_path().write_text(f"{0.0}\n")  # long ago: cron stopped
    supervisor._record_path().write_text('{"kind": "cron", "line": "x", "installed_at": 0}')
    name, warning = supervisor.guard("watchdog", None)
    assert name == "none" and warning is not None and "is a cron daemon running?" in warning


def test_install_without_a_crontab_says_what_to_install_and_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from campaign.errors import PreflightError

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PreflightError, match=r"no `crontab` on this machine: install cron .* failsafe check"):
        supervisor.install()
    # the failed install recorded nothing (state is written only after the step that changes it succeeds) ...
    assert not supervisor._record_path().exists() and supervisor.installed() is None
    # ... where a record, once written, is what the same reader gives back
    supervisor._record_path().parent.mkdir(parents=True, exist_ok=True)
    supervisor._record_path().write_text('{"kind": "cron", "line": "x", "installed_at": 0}')
    assert supervisor.installed() == {"kind": "cron", "line": "x", "installed_at": 0}
