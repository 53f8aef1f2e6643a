"""A lane's visit as the window's state records it: from before the boot makes the lane's scratch folder, so a
runner killed between the folder and the lane's start leaves nothing the next command's restore cannot find
(seen in CI: a journal ending at ``boot intent base``, an empty ``lane-127.0.0.1-<port>`` no state named).
A real runner, SIGKILLed; the one thing injected is where it dies: at the lane's start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.daily.state import WindowState, process_start_time
from campaign.fsutil import read_jsonl
from campaign.gates.base import Visit
from campaign.lanes.scratch import scratch_path
from campaign.window.context import Window

pytestmark = pytest.mark.usefixtures("state_home", "own_tempdir")

ROOT = Path(__file__).resolve().parents[3]
PORT = 4101

# visits one lane as the window does and is SIGKILLed where the lane's process would be forked
_RUNNER = """
import asyncio, os, signal, sys
from pathlib import Path
from campaign.contracts.resolve import EffectiveLane
from campaign.daily.state import WindowState
from campaign.gates.base import Visit
from campaign.lanes.runtimes.process import ProcessRuntime
from campaign.window.context import Window
from campaign.window.journal import Journal
from campaign.window.lanevisit import visit_lane

def killed(self, spec):
    os.kill(os.getpid(), signal.SIGKILL)

ProcessRuntime.start = killed
window, bundle, port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
lane = EffectiveLane.model_validate({"name": "base", "role": "control", "runtime": "process", "engine": "llamacpp",
                                     "executable": "sleep", "port": port, "model": {"path": "/m"}})
w = Window(loaded=None, record_path=Path("/nonexistent"), freeze_record={}, bundle=bundle, window_id=window,
           key=None, state=WindowState.load(window), model_paths={"base": "/m"})
asyncio.run(visit_lane(w, Visit(lane), [], Journal(bundle / "journal.jsonl"), {}, {}))
"""


def _lane() -> EffectiveLane:
    return EffectiveLane.model_validate({"name": "base", "role": "control", "runtime": "process",
                                         "engine": "llamacpp", "executable": "sleep", "port": PORT,
                                         "model": {"path": "/m"}})


def _window(window: str, bundle: Path) -> WindowState:
    bundle.mkdir()
    state = WindowState(window=window, bundle=str(bundle), contract="/c.yaml", record="/c.freeze.json",
                        runner_pid=os.getpid(), boot_id="b", armed=True)
    state.save()
    return state


@pytest.mark.parametrize("left", ["empty", "written-since"])
def test_a_runner_killed_before_its_lane_started_leaves_no_scratch_folder_the_restore_cannot_find(
        tmp_path: Path, left: str) -> None:
    """The empty folder goes; one with something in it by the time the restore runs (another lane may hold its
    address by now) stays, as for any lane that was gone before the restore."""
    from campaign.daily.restore import restore

    window, bundle = f"w-killed-{left}", tmp_path / "bundle"
    _window(window, bundle)
    runner = subprocess.run([sys.executable, "-c", _RUNNER, window, str(bundle), str(PORT)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert runner.returncode == -signal.SIGKILL, runner.stderr
    folder = scratch_path(_lane())
    last = read_jsonl(bundle / "journal.jsonl")[-1]
    assert (last["event"], last["step"], last["lane"]) == ("intent", "boot", "base")
    assert folder.is_dir() and not any(folder.iterdir())  # made, and the lane never started
    if left == "written-since":
        (folder / "engine-temp").write_text("x")
    assert restore(window, reason="test", by="test")["event"] == "done"
    if left == "empty":
        assert not folder.exists()
    else:
        assert (folder / "engine-temp").read_text() == "x"


def test_a_lane_that_starts_is_tracked_in_its_visits_entry_not_a_second_one(tmp_path: Path) -> None:
    """The restore meets each lane once: the entry recorded before the boot gets the lane's pid when it starts,
    and an earlier attempt's entry of that visit that never started stays as it was."""
    from campaign.window.lanevisit import _record_visit, _track_lane

    window = "w-tracked-once"
    state = _window(window, tmp_path / "bundle")
    # what a visit reads of its window: its bundle and state (no contract, no key)
    w = Window(loaded=None, record_path=Path("/nonexistent"), freeze_record={}, bundle=tmp_path / "bundle",
               window_id=window, key=None, state=state, model_paths={"base": "/m"})
    visit = Visit(_lane())
    _record_visit(w, visit)  # an attempt killed before its lane started
    _record_visit(w, visit)
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        _track_lane(w, visit, child)
        earlier, tracked = WindowState.load(window).lanes
        assert (earlier.visit, earlier.pid, earlier.scratch) == ("base", None, str(scratch_path(visit.lane)))
        assert (tracked.visit, tracked.pid, tracked.start_time) == ("base", child.pid, process_start_time(child.pid))
        assert tracked.scratch == str(scratch_path(visit.lane)) and w.state.lanes == [earlier, tracked]
    finally:
        child.kill()
        child.wait()
