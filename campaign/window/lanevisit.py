"""One visit of a lane in a window: boot it (tracked in the window's state from before its scratch folder is
made, and with what runs from the moment it starts, so the failsafe can stop it and remove the folder if the
runner dies mid-boot), record what runs, run the visit's live gates, stop it.
A launch failure is recorded as the lane's outcome, not raised: it is not a finding."""

from __future__ import annotations

from typing import Any

from campaign.daily.state import LaneProcess, process_start_time
from campaign.errors import LaunchError
from campaign.fsutil import JsonlAppender, atomic_write_bytes
from campaign.gates.base import LiveGate, Visit
from campaign.lanes.scratch import scratch_path
from campaign.lanes.session import boot_lane
from campaign.window.context import Window, set_aside
from campaign.window.identity import record_inspect
from campaign.window.judge import LaneOutcome

__all__ = ["visit_lane"]


async def visit_lane(w: Window, planned: Visit, gates: list[LiveGate], journal: Any, lanes: dict[str, LaneOutcome],
                labels: dict[str, str]) -> None:
    """The visit's gates not finished before an interruption; none left on a resumed window: nothing boots."""
    visit_gates = [g for g in gates if (g.gate_id, str(planned.key)) not in w.finished_gates]
    outcome = lanes.setdefault(str(planned.key), LaneOutcome())
    if not visit_gates and w.resumed:
        outcome.status = "ran"  # every gate of this visit finished before the interruption
        return
    await _run_lane(w, planned, visit_gates, journal, outcome, labels)


async def _run_lane(w: Window, visit: Visit, gates: list[LiveGate], journal: Any, outcome: LaneOutcome,
                    labels: dict[str, str]) -> None:
    lane, bundle = visit.lane, w.bundle
    lane_dir = bundle / "lanes" / str(visit.key)
    if w.resumed and (lane_dir / "boot.log").exists():
        set_aside(lane_dir / "boot.log")
    journal.intent("boot", lane=str(visit.key))

    def started(running: Any) -> None:
        _track_lane(w, visit, running)

    _record_visit(w, visit)
    with JsonlAppender(bundle / "raw" / "warmup" / f"{visit.key}.jsonl") as warm_sink:
        try:
            run = await boot_lane(lane, model_path=w.model_paths[lane.name], log_path=lane_dir / "boot.log",
                                  warm_sink=warm_sink, labels=labels, on_started=started)
        except LaunchError as exc:
            outcome.status, outcome.cause, outcome.message = "launch_failed", exc.cause, str(exc)
            atomic_write_bytes(lane_dir / "launch_failure.txt", f"{exc.cause}: {exc}\n\n{exc.log_tail}\n".encode())
            journal.failed("boot", lane=str(visit.key), cause=exc.cause, message=str(exc))
            return
    outcome.boot_seconds, outcome.engine_version = run.boot_seconds, run.engine_version
    journal.done("boot", lane=str(visit.key), boot_seconds=run.boot_seconds)
    try:
        # redacted once, by boot_lane
        record_inspect(w.bundle, visit.lane, lane_dir, run.inspect, resumed=w.resumed)
        for gate in gates:
            raw = gate.ctx.raw_path(gate.gate_id, str(visit.key))
            if raw.exists():
                set_aside(raw)  # a gate cut short by a crash: its records are kept, and redone whole
            journal.intent("gate", gate=gate.gate_id, lane=str(visit.key))
            with JsonlAppender(raw) as sink:
                await gate.collect(run, sink, visit)
            journal.done("gate", gate=gate.gate_id, lane=str(visit.key))
        outcome.status = "ran"
    finally:
        journal.intent("stop", lane=str(visit.key))
        code = await run.stop(timeout=1.0 if w.escalated else 20.0)
        journal.done("stop", lane=str(visit.key), exit_code=code)


def _record_visit(w: Window, visit: Visit) -> None:
    """Recorded before the boot makes the lane's scratch folder: a runner killed before the lane starts leaves
    that folder empty, and the restore removes an empty folder of a lane it finds recorded but not running."""
    with w.state.locked():
        state = w.state.reload()
        state.lanes.append(LaneProcess(visit=str(visit.key), scratch=str(scratch_path(visit.lane))))
        state.save()
        w.state = state


def _track_lane(w: Window, visit: Visit, running: Any) -> None:
    """Recorded the moment the lane starts, so the failsafe can stop it if the runner dies mid-boot: in the
    entry ``_record_visit`` made (the last of this visit's not started), so the restore meets each lane once."""
    pid = getattr(running, "pid", None)
    container = getattr(getattr(running, "container", None), "id", None)
    host = visit.lane.docker_host.model_dump(mode="json") if visit.lane.docker_host else None
    tracked = LaneProcess(visit=str(visit.key), pid=pid, start_time=process_start_time(pid) if pid else None,
                          container=container, docker_host=host, scratch=str(scratch_path(visit.lane)))
    with w.state.locked():
        state = w.state.reload()
        # an earlier attempt at this visit (a resumed window) may have left an entry that never started too
        at = max((i for i, lane in enumerate(state.lanes)
                  if lane.visit == tracked.visit and lane.pid is None and lane.container is None), default=None)
        if at is None:
            state.lanes.append(tracked)
        else:
            state.lanes[at] = tracked
        state.save()
        w.state = state
