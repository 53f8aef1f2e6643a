"""A window's private state: saved atomically and privately, read back exactly; the heartbeat; the
kernel facts (boot clock, boot id, process start time) the failsafe relies on."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from campaign.daily import state as state_module
from campaign.daily.state import (
    LaneProcess,
    WindowState,
    boot_id,
    boottime,
    process_start_time,
    state_root,
    windows_dir,
)
from campaign.errors import InputError

pytestmark = pytest.mark.usefixtures("state_home")


def make_state(window: str = "w-20240101-1") -> WindowState:
    return WindowState(window=window, bundle="/runs/b", contract="/c/demo.yaml", record="/c/demo.freeze.json",
                       runner_pid=1234, runner_start_time=5678, boot_id="b00t", started_at=1700000000.25,
                       deadline_boottime=99999.5, deadline_wall=1700002400.25,
                       incumbent={"argv": ["llama-server", "--api-key", "k"], "env": {"HF_TOKEN": "t"}},
                       lanes=[LaneProcess(visit="baseline#1", pid=42, start_time=7),
                              LaneProcess(visit="ngram#1", container="abc", docker_host={"host": "unix://x"})],
                       allowed_paths=["/data"])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# where it lives


def test_state_root_follows_xdg_state_home(state_home: Path) -> None:
    assert state_root() == state_home / "campaign"
    assert windows_dir() == state_home / "campaign" / "windows"
    assert make_state("w1").directory == state_home / "campaign" / "windows" / "w1"


def test_state_root_defaults_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_root() == tmp_path / "home" / ".local" / "state" / "campaign"
    monkeypatch.setenv("XDG_STATE_HOME", "")  # empty means unset
    assert state_root() == tmp_path / "home" / ".local" / "state" / "campaign"


# save and load


def test_save_then_load_round_trips_every_field() -> None:
    saved = make_state()
    saved.save()
    loaded = WindowState.load(saved.window)
    assert loaded == saved
    assert loaded.lanes[1].docker_host == {"host": "unix://x"}
    assert loaded.incumbent == {"argv": ["llama-server", "--api-key", "k"], "env": {"HF_TOKEN": "t"}}


def test_defaults_round_trip() -> None:
    saved = WindowState(window="w2", bundle="b", contract="c", record="r", runner_pid=1, boot_id="x",
                        started_at=5.0)
    saved.save()
    loaded = WindowState.load("w2")
    assert loaded == saved
    assert (loaded.heartbeat_grace, loaded.failsafe_generation, loaded.armed, loaded.lanes) == (60.0, 0, False, [])


def test_reload_sees_a_later_save() -> None:
    first = make_state()
    first.save()
    second = WindowState.load(first.window)
    second.armed, second.failsafe_generation = True, 3
    second.save()
    assert first.armed is False  # an object is a snapshot...
    fresh = first.reload()  # ...reload reads the file
    assert (fresh.armed, fresh.failsafe_generation) == (True, 3)


def test_save_is_private() -> None:
    state = make_state()
    state.save()
    assert mode(state.directory) == 0o700
    assert mode(state.directory / "state.json") == 0o600


def test_save_tightens_an_existing_open_directory() -> None:
    state = make_state()
    state.directory.mkdir(parents=True)
    state.directory.chmod(0o755)
    state.save()
    assert mode(state.directory) == 0o700


def test_save_replaces_the_file_and_leaves_no_temporary() -> None:
    state = make_state()
    state.save()
    before = (state.directory / "state.json").stat().st_ino
    state.failsafe_generation = 2
    state.save()
    # a new file renamed over the old one, never the old one rewritten in place
    assert (state.directory / "state.json").stat().st_ino != before
    assert sorted(p.name for p in state.directory.iterdir()) == ["state.json"]
    assert json.loads((state.directory / "state.json").read_text())["failsafe_generation"] == 2


# a bad state file is reported


def test_missing_state_is_an_input_error(state_home: Path) -> None:
    with pytest.raises(InputError, match=r"windows/nope/state.json: no such file"):
        WindowState.load("nope")


def test_corrupt_state_is_an_input_error_naming_the_file() -> None:
    state = make_state()
    state.save()
    path = state.directory / "state.json"
    path.write_text(path.read_text()[:40])  # cut short
    with pytest.raises(InputError, match=r"state.json: not valid JSON"):
        WindowState.load(state.window)


def test_duplicate_key_in_state_is_refused() -> None:
    state = make_state()
    state.save()
    path = state.directory / "state.json"
    path.write_text(path.read_text().replace('"armed": false', '"armed": false, "armed": true'))
    with pytest.raises(InputError, match="duplicate JSON key 'armed'"):
        WindowState.load(state.window)


def test_unknown_field_in_state_is_refused() -> None:
    state = make_state()
    state.save()
    path = state.directory / "state.json"
    data = json.loads(path.read_text())
    data["lanes"][0]["surprise"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"state.json: lanes\.0\.surprise: ") as info:
        WindowState.load(state.window)
    assert isinstance(info.value.__cause__, ValidationError)
    assert [e["loc"] for e in info.value.__cause__.errors()] == [("lanes", 0, "surprise")]


def test_state_missing_a_required_field_is_refused() -> None:
    state = make_state()
    state.save()
    path = state.directory / "state.json"
    data = json.loads(path.read_text())
    del data["boot_id"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"state.json: boot_id: ") as info:
        WindowState.load(state.window)
    assert isinstance(info.value.__cause__, ValidationError)
    assert [e["loc"] for e in info.value.__cause__.errors()] == [("boot_id",)]


# heartbeat


def test_beat_writes_the_boot_clock_to_three_decimals(monkeypatch: pytest.MonkeyPatch) -> None:
    state = make_state()
    state.save()
    monkeypatch.setattr(state_module, "boottime", lambda: 1234.5)
    state.beat()
    assert (state.directory / "heartbeat").read_text() == "1234.500\n"
    assert state.last_beat() == 1234.5


def test_beat_is_the_current_boot_clock() -> None:
    state = make_state()
    state.save()
    before = boottime()
    state.beat()
    after = boottime()
    beat = state.last_beat()
    assert beat is not None
    assert before - 0.001 <= beat <= after + 0.001  # written to the millisecond


def test_last_beat_without_a_heartbeat() -> None:
    state = make_state()
    state.save()
    assert state.last_beat() is None
    (state.directory / "heartbeat").write_text("garbage\n")
    assert state.last_beat() is None


# lock


def test_locked_excludes_another_holder() -> None:
    state = make_state()
    with state.locked():
        with open(state.directory / "lock", "a") as other:  # another open file, as another process holds it
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(state.directory / "lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit
        fcntl.flock(other, fcntl.LOCK_UN)


def test_locked_releases_on_error() -> None:
    state = make_state()
    with pytest.raises(RuntimeError):
        with state.locked():
            raise RuntimeError("boom")
    with open(state.directory / "lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


# kernel facts


def test_boottime_is_never_behind_the_monotonic_clock() -> None:
    earlier = time.clock_gettime(time.CLOCK_MONOTONIC)
    now = boottime()
    assert now >= earlier > 0  # the boot clock is the monotonic clock plus time spent suspended
    assert boottime() >= now


def test_boot_id_is_the_kernels() -> None:
    value = boot_id()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", value)
    assert value == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot_id() == value


def test_process_start_time_of_this_process() -> None:
    mine = process_start_time(os.getpid())
    assert isinstance(mine, int)
    assert process_start_time(os.getpid()) == mine  # the same process, the same start
    ticks_now = boottime() * os.sysconf("SC_CLK_TCK")
    assert 0 <= mine <= ticks_now + 1


def test_process_start_time_of_no_process() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert process_start_time(pid_max + 1) is None


def test_process_start_time_with_a_parenthesis_and_spaces_in_the_name(tmp_path: Path) -> None:
    # the command name sits in parentheses and may itself hold ") " : fields are counted after the last one
    sleeper = tmp_path / "a) b c"
    sleeper.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(sleeper), "30"])
    try:
        stat_text = Path(f"/proc/{child.pid}/stat").read_text()
        assert "(a) b c)" in stat_text
        started = process_start_time(child.pid)
        assert isinstance(started, int)
        mine = process_start_time(os.getpid())
        assert mine is not None
        assert mine <= started <= boottime() * os.sysconf("SC_CLK_TCK") + 1
    finally:
        child.kill()
        child.wait()


def test_process_start_time_of_a_zombie_is_none() -> None:
    child = subprocess.Popen(["/bin/true"])
    try:
        # wait for it to exit without reaping it: it stays a zombie until wait()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        assert process_start_time(child.pid) is None
    finally:
        child.wait()
