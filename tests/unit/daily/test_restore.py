"""Stopping a window's lanes before the daily comes back: fenced to this window's processes, and each one
gone (its port released) by the time the daily is started on that port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from campaign.daily.restore import stop_window_lanes
from campaign.daily.state import LaneProcess, WindowState, process_start_time

pytestmark = pytest.mark.usefixtures("state_home")

# binds a port, says so, ignores SIGTERM (a lane that will not stop politely) and holds the port
_HOLDER = """
import signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("bound", flush=True)
time.sleep(600)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _holder(port: int, window: str | None) -> subprocess.Popen:
    env = {**os.environ, **({"CAMPAIGN_WINDOW": window} if window else {})}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(port)], env=env, stdout=subprocess.PIPE,
                            start_new_session=True, text=True)
    assert proc.stdout.readline().strip() == "bound"
    return proc


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _state(window: str, lanes: list[LaneProcess]) -> WindowState:
    return WindowState(window=window, bundle="/nonexistent", contract="/c.yaml", record="/c.freeze.json",
                       runner_pid=os.getpid(), boot_id="b", lanes=lanes)


def test_a_tracked_lane_that_ignores_sigterm_is_killed_and_gone_before_it_returns() -> None:
    port = _free_port()
    lane = _holder(port, "w-tracked")
    state = _state("w-tracked", [LaneProcess(visit="spec@1", pid=lane.pid,
                                             start_time=process_start_time(lane.pid))])
    started = time.monotonic()
    assert stop_window_lanes(state, grace=0.5) == (["spec@1"], [])
    assert time.monotonic() - started >= 0.5  # it was given its grace first
    assert process_start_time(lane.pid) is None and _port_free(port)


def test_an_untracked_lane_of_this_window_is_gone_before_it_returns_and_others_are_untouched() -> None:
    ours_port, theirs_port = _free_port(), _free_port()
    ours = _holder(ours_port, "w-ours")  # started in the instant before the runner could record it
    theirs = _holder(theirs_port, "w-theirs")
    try:
        assert stop_window_lanes(_state("w-ours", []), grace=0.5) == ([f"untracked pid {ours.pid}"], [])
        assert process_start_time(ours.pid) is None and _port_free(ours_port)
        assert process_start_time(theirs.pid) is not None and not _port_free(theirs_port)
    finally:
        theirs.kill()
        theirs.wait()


def test_a_lane_container_whose_engine_cannot_be_asked_is_not_taken_for_gone() -> None:
    """An unreachable engine (nothing listens on its port) is not "the container is gone": the record says
    the lane could not be stopped, and the restore goes on to the daily (which may be on another engine)."""
    port = _free_port()  # closed: connection refused, as from an engine that is down or a box out of reach
    lane = LaneProcess(visit="spec", container="0" * 64, docker_host={"url": f"tcp://127.0.0.1:{port}"})
    stopped, (said,) = stop_window_lanes(_state("w-unreachable", [lane]))
    assert stopped == [] and said.startswith("spec: its engine could not be asked"), said


def _closed_engine() -> str:
    return f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there: connection refused, a real one


def test_a_lane_whose_engine_does_not_answer_is_not_stopped_never_gone() -> None:
    engine = _closed_engine()
    state = _state("w-unreachable", [LaneProcess(visit="cand@1", container="c" * 64, docker_host={"url": engine})])
    stopped, not_stopped = stop_window_lanes(state, grace=0.5)
    assert stopped == [] and len(not_stopped) == 1
    assert not_stopped[0].startswith("cand@1: its engine could not be asked (DockerUnreachable: docker engine "
                                     f"{engine}: inspecting lane container cccccccccccc: connection refused")


def test_a_lane_whose_recorded_engine_no_longer_reads_is_named_and_the_next_lane_is_still_stopped() -> None:
    """A state an older version wrote (its docker_host no longer a valid host) breaks that lane's stop only:
    it is named in not_stopped and the lanes after it are still stopped, so the daily's start is reached."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        lanes = [LaneProcess(visit="old", container="d" * 64, docker_host={"url": "tcp://x", "nosuch": 1}),
                 LaneProcess(visit="spec", pid=child.pid, start_time=process_start_time(child.pid))]
        stopped, not_stopped = stop_window_lanes(_state("w-old-host", lanes), grace=0.5)
        assert stopped == ["spec"] and child.wait(timeout=5) is not None
        assert len(not_stopped) == 1 and not_stopped[0].startswith("old: its engine could not be asked "
                                                                   "(ValidationError"), not_stopped
    finally:
        if child.poll() is None:
            child.kill()


def test_a_daily_on_an_engine_that_does_not_answer_is_a_failed_restore_never_a_success() -> None:
    from campaign.daily.restore import restore
    from campaign.errors import DockerUnreachable, RunError

    engine = _closed_engine()
    state = _state("w-daily-unreachable", [])
    state.incumbent = {"runtime": "docker", "container": "daily", "docker_host": {"url": engine},
                       "restart_policy": {"Name": "no"}}
    state.armed = True
    state.save()
    with pytest.raises(RunError, match=f"restore failed: docker engine {engine}: inspecting container 'daily'") as caught:
        restore("w-daily-unreachable", reason="test", by="test")
    assert isinstance(caught.value.__cause__, DockerUnreachable)
    assert not WindowState.load("w-daily-unreachable").restored


def test_a_window_restored_while_its_runner_lived_forgets_the_dailys_credentials_once_the_runner_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A watchdog restored the daily while the runner still ran (it scans its bundle for those credentials and
    forgets them at its own end); the runner was killed before that end. The next command's sweep finds the
    window over and leaves no credential in its private state, only references to the variables."""
    from campaign.daily.restore import forget_when_over
    from campaign.window.orphans import restore_orphaned_windows

    key, token = "sk-daily-" + "Wq81LmZt0aPc", "hf_" + "KeptOnlyWhileTheWindowRuns7"
    monkeypatch.setenv("DAILY_KEY", key)
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = _state("w-forget", [])
        state.runner_pid, state.runner_start_time = runner.pid, process_start_time(runner.pid)
        state.incumbent = {"runtime": "process", "argv": ["llama-server", "--api-key", key, "--port", "9"],
                           "env": {"HF_TOKEN": token, "PATH": "/usr/bin"}, "api_key_env": "DAILY_KEY"}
        state.incumbent_api_key, state.restored = key, True
        state.save()
        state_file = state.directory / "state.json"
        forget_when_over("w-forget")
        assert key in state_file.read_text() and token in state_file.read_text()  # its runner still needs them
    finally:
        runner.kill()
        runner.wait()
    assert restore_orphaned_windows() == []  # nothing to restore: it is over already
    private = state_file.read_text()
    assert key not in private and token not in private
    kept = WindowState.load("w-forget")
    assert kept.incumbent_api_key is None and kept.incumbent is not None
    assert kept.incumbent["argv"] == ["llama-server", "--api-key", "${env:DAILY_KEY}", "--port", "9"]
    assert kept.incumbent["env"] == {"HF_TOKEN": "${env:HF_TOKEN}", "PATH": "/usr/bin"}


@pytest.fixture
def scratch_root(tmp_path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001, ANN201
    """The lanes' scratch root under this test's own temp folder (tempfile.gettempdir() reads tempfile.tempdir)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"campaign-{os.getuid()}"
    root.mkdir(mode=0o700)
    return root


def _scratch(root, name: str, *, with_file: bool):  # noqa: ANN001, ANN202
    folder = root / name
    folder.mkdir()
    if with_file:
        (folder / "engine-temp").write_text("x")
    return folder


@pytest.mark.parametrize("runner_tmp", [False, True], ids=["same-temp-folder", "another-temp-folder"])
def test_a_lane_stopped_by_the_restore_takes_its_scratch_folder_with_it(scratch_root, tmp_path,  # noqa: ANN001
                                                                        runner_tmp: bool) -> None:
    """A runner killed mid-visit never reached the lane's own stop, which removes its folder: the restore does,
    also when it runs with another TMPDIR than the runner had (the systemd timer's): the folder is known by its
    shape."""
    root = scratch_root
    if runner_tmp:
        root = tmp_path / "runner-tmp" / f"campaign-{os.getuid()}"
        root.mkdir(parents=True, mode=0o700)
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    folder = _scratch(root, "lane-127.0.0.1-4001", with_file=True)
    try:
        lane = LaneProcess(visit="spec", pid=child.pid, start_time=process_start_time(child.pid), scratch=str(folder))
        assert stop_window_lanes(_state("w-scratch", [lane]), grace=0.5) == (["spec"], [])
        assert not folder.exists()
    finally:
        if child.poll() is None:
            child.kill()


def test_a_lane_already_gone_leaves_only_an_empty_folder_to_remove(scratch_root) -> None:  # noqa: ANN001
    """Gone before the restore: another lane may hold its address and folder by now, so only an empty one goes."""
    empty = _scratch(scratch_root, "lane-127.0.0.1-4002", with_file=False)
    busy = _scratch(scratch_root, "lane-127.0.0.1-4003", with_file=True)
    gone = [LaneProcess(visit="a", pid=None, scratch=str(empty)), LaneProcess(visit="b", pid=None, scratch=str(busy))]
    assert stop_window_lanes(_state("w-gone", gone), grace=0.5) == ([], [])
    assert not empty.exists() and (busy / "engine-temp").exists()


def test_a_recorded_scratch_outside_a_lane_folder_or_a_link_is_never_removed(scratch_root, tmp_path) -> None:  # noqa: ANN001
    """Removed as if its lane had just been stopped (the whole folder): only a lane's folder by its shape goes."""
    from campaign.lanes.scratch import remove_scratch

    elsewhere = _scratch(tmp_path, "lane-elsewhere", with_file=True)  # not under campaign-<uid>
    target = _scratch(tmp_path, "keep", with_file=True)
    link = scratch_root / "lane-127.0.0.1-4004"
    link.symlink_to(target, target_is_directory=True)
    climbing = _scratch(scratch_root, "lane-127.0.0.1-4005", with_file=True)
    (scratch_root / "x").mkdir()
    shared_root = tmp_path / "shared" / f"campaign-{os.getuid()}"
    shared_root.mkdir(parents=True, mode=0o755)  # a root others may read: not this user's private one
    shared = _scratch(shared_root, "lane-127.0.0.1-4006", with_file=True)
    for recorded in (elsewhere, link, scratch_root / "x" / ".." / climbing.name, shared):
        remove_scratch(str(recorded), stopped_here=True)
    assert (elsewhere / "engine-temp").exists() and link.is_symlink() and (target / "engine-temp").exists()
    assert (climbing / "engine-temp").exists() and (shared / "engine-temp").exists()
    remove_scratch(str(climbing), stopped_here=True)
    assert not climbing.exists()  # the same folder, named as scratch_path names it


def test_a_lane_that_could_not_be_stopped_keeps_its_folder(scratch_root) -> None:  # noqa: ANN001
    folder = _scratch(scratch_root, "lane-127.0.0.1-4006", with_file=False)
    lane = LaneProcess(visit="spec", container="0" * 64, docker_host={"url": f"tcp://127.0.0.1:{_free_port()}"},
                       scratch=str(folder))
    stopped, (said,) = stop_window_lanes(_state("w-unstoppable", [lane]))
    assert stopped == [] and said.startswith("spec:") and folder.is_dir()
