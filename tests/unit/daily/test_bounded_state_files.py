"""Pidfiles, heartbeats, the ledger and its rollback launches are read once and bounded: a FIFO or a device
in their place is said in words at once (never a hang), and a pidfile never names pid 0 or -1."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from campaign.daily import incumbent
from campaign.daily.ledger import Ledger
from campaign.daily.state import WindowState
from campaign.errors import InputError, PreflightError
from campaign.failsafe.watchdogfiles import alive


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_a_pidfile_that_is_a_fifo_is_named_at_once(tmp_path: Path) -> None:
    pidfile = _fifo(tmp_path / "daily.pid")
    started = time.monotonic()
    with pytest.raises(PreflightError, match=r"daily\.pid: pidfile is a FIFO \(named pipe\), not a regular file"):
        incumbent.snapshot_pidfile(pidfile, {})
    assert incumbent.running_pid({"pidfile": str(pidfile), "argv": ["x"]}) is None
    assert alive(pidfile) is False
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("text", ["-1\n", "0\n", "1_000\n", "12 13\n", "x" * 100])
def test_a_pidfile_names_one_positive_pid_or_nothing(tmp_path: Path, text: str) -> None:
    pidfile = tmp_path / "daily.pid"
    pidfile.write_text(text)
    assert incumbent._read_pid(pidfile) is None
    with pytest.raises(PreflightError, match="incumbent is not running"):
        incumbent.snapshot_pidfile(pidfile, {})


def test_a_heartbeat_that_is_a_device_is_no_heartbeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = WindowState(window="w", bundle="b", contract="c", record="r", runner_pid=1, boot_id="x")
    state.directory.mkdir(parents=True)
    (state.directory / "heartbeat").symlink_to("/dev/zero")
    assert state.last_beat() is None


def test_a_ledger_that_is_a_fifo_is_one_input_error(tmp_path: Path) -> None:
    ledger = Ledger(_fifo(tmp_path / "ledger.jsonl"))
    started = time.monotonic()
    with pytest.raises(InputError, match=r"ledger\.jsonl: ledger is a FIFO"):
        ledger.entries()
    assert time.monotonic() - started < 2


def test_a_torn_last_ledger_line_is_not_an_entry_yet(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b'{"seq": 1}\n{"seq": 2')
    assert Ledger(path).entries() == [{"seq": 1}]
    path.write_bytes(b'{"seq": 1}\n{"seq": 2\n{"seq": 3}\n')
    with pytest.raises(InputError, match=r"ledger\.jsonl:2: unreadable record"):
        Ledger(path).entries()
