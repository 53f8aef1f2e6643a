"""A window: frozen contract -> pre-flight -> for each lane: boot, ready, gates -> stop -> judge -> sign.

Raw records are written as they arrive; judging reads only what is in the bundle, so a bundle can be
re-judged later. The journal and SUMMARY.json are written in ``finally``; only a window that reached
the end is signed, so an interrupted one fails verification as incomplete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.load import LoadedContract, load_contract
from campaign.contracts.resolve import EffectiveLane
from campaign.daily import incumbent
from campaign.daily.restore import restore, stop_window_lanes
from campaign.daily.state import LaneProcess, WindowState, boot_id, process_start_time
from campaign.errors import CampaignError, InputError, LaunchError, PreflightError, RunError
from campaign.failsafe.failsafe import arm, choose_backend, disarm, dry_run
from campaign.fsutil import (
    JsonlAppender,
    atomic_write_bytes,
    atomic_write_json,
    load_json_strict,
    read_jsonl,
)
from campaign.gates.base import Gate, LiveGate, Screen, Visit, live_gates, screens
from campaign.gates.records import VisitKey
from campaign.gates.result import GateResult, Verdict
from campaign.lanes.redact import redactor_for
from campaign.lanes.session import (
    boot_lane,
)
from campaign.receipts.bundle import sign_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.boxes import boxes_of, claim
from campaign.window.bundlecopy import copy_contract
from campaign.window.judge import (
    SCREENED_OUT,
    LaneOutcome,
    build_gates,
    judge_bundle,
    judge_one,
    predicate,
    summarize,
)
from campaign.window.preflight import preflight
from campaign.window.schedule import PAIRS_STOPPED, first_visits, most_steps, next_pair, pair_past_budget, step_seconds
from campaign.window.source import source_snapshot

__all__ = ["Window", "WindowOutcome", "first_inspect", "lane_redacted", "refuse_another_launch", "run_async", "run_window"]


@dataclass
class WindowOutcome:
    bundle: Path
    window_id: str
    verdicts: dict[str, dict[str, str]]  # candidate -> gate -> verdict
    signed: bool
    summary: dict[str, Any]


def _window_id(loaded: LoadedContract) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{loaded.contract.contract}-v{loaded.contract.version}-{loaded.canonical_sha256[:8]}"


def run_window(contract_path: Path, *, key: SigningKey, trusted: TrustedKeys, out_dir: Path = Path("runs"),
               record_path: Path | None = None, window_id: str | None = None,
               echo: Callable[[str], None] | None = None, accept_tool_defaults: bool = False) -> WindowOutcome:
    loaded = load_contract(contract_path)
    record_path = record_path or default_record_path(loaded.path)
    freeze_record = check_frozen(loaded, record_path, trusted, accept_tool_defaults=accept_tool_defaults)
    window_id = window_id or _window_id(loaded)
    boxes = boxes_of(loaded)
    # claimed before pre-flight: its model hash reads the whole model on the box, which a window measuring
    # there would feel. Held until this process ends: the kernel lets go if it dies.
    held = claim(window_id, boxes)
    model_paths = preflight(loaded)
    bundle = out_dir / window_id
    bundle.mkdir(parents=True, exist_ok=window_id is not None)
    if any(bundle.iterdir()) and list(bundle.iterdir()) != [bundle / "runner.log"]:
        raise PreflightError(f"{bundle} is not empty: a window id is used once (use `campaign resume`)")
    state = WindowState(window=window_id, bundle=str(bundle.resolve()), contract=str(loaded.path.resolve()),
                        record=str(record_path.resolve()), runner_pid=os.getpid(),
                        runner_start_time=process_start_time(os.getpid()), boot_id=boot_id(),
                        allowed_paths=[str(p) for p in loaded.allowed_roots], boxes=[b.name for b in boxes])
    state.save()
    window = Window(loaded=loaded, record_path=record_path, freeze_record=freeze_record, bundle=bundle,
                     window_id=window_id, key=key, state=state, model_paths=model_paths, echo=echo)
    try:
        return run_async(window)
    finally:
        held.release()


@dataclass
class Window:
    loaded: LoadedContract
    record_path: Path
    freeze_record: dict[str, Any]
    bundle: Path
    window_id: str
    key: SigningKey
    state: WindowState
    model_paths: dict[str, str]
    echo: Callable[[str], None] | None = None
    finished_gates: set[tuple[Any, Any]] = field(default_factory=set)
    resumed: bool = False
    escalated: bool = False


def run_async(window: Window) -> WindowOutcome:
    async def main() -> WindowOutcome:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        interrupts = 0

        def on_signal(signum: int) -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                _say(window, f"signal {signum}: stopping the window and restoring the incumbent "
                             "(send it again to stop lanes without waiting)")
                assert task is not None
                task.cancel()
            else:
                window.escalated = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        return await _execute(window)

    return asyncio.run(main())


def _say(window: Window, line: str) -> None:
    if window.echo:
        window.echo(line)


@dataclass
class _Progress:
    """What the window has to show so far; the ``finally`` of _execute summarizes whatever it holds."""

    lanes: dict[str, LaneOutcome] = field(default_factory=dict)  # by visit key
    results: list[GateResult] = field(default_factory=list)
    status: str = "interrupted"
    restore_record: dict[str, Any] | None = None


async def _execute(w: Window) -> WindowOutcome:
    from campaign.window.journal import Journal

    journal = Journal(w.bundle / "journal.jsonl", echo=w.echo)
    progress = _Progress()
    heartbeat = asyncio.create_task(_heartbeat(w.state))
    try:
        gates = _open(w, journal)
        screened_out = await _run_screens(w, screens(gates), journal, progress.lanes)
        live = _live_part(w.loaded, screened_out)
        if live is None:
            journal.done("screened", out=sorted(screened_out),
                         reason="no candidate is worth a live window: the daily was not stopped")
            progress.restore_record = {"event": "done", "action": NEVER_STOPPED}
        else:
            screens_run = len(screens(gates)) * len(w.loaded.candidates())
            await _visit_lanes(w, live, live_gates(gates), journal, progress.lanes, screens_run)
            if w.loaded.contract.incumbent is not None:
                progress.restore_record = await asyncio.to_thread(_bring_back_incumbent, w, journal,
                                                                  "window finished")
        journal.intent("judge")
        progress.results = judge_bundle(w.loaded, gates, progress.lanes, w.bundle)
        journal.done("judge", verdicts={f"{r.gate}/{r.candidate}": r.verdict.value for r in progress.results})
        progress.status = "complete"
    except asyncio.CancelledError:
        progress.status = "interrupted"
    finally:
        heartbeat.cancel()
        summary = await _close(w, journal, progress)
    if progress.status == "complete":
        sign_bundle(w.bundle, w.key, predicate(w.loaded, w.window_id), secrets=_known_secrets(w))
        _forget_api_key(w)
    verdicts: dict[str, dict[str, str]] = {}
    for result in progress.results:
        verdicts.setdefault(result.candidate, {})[result.gate] = result.verdict.value
    return WindowOutcome(bundle=w.bundle, window_id=w.window_id, verdicts=verdicts,
                         signed=progress.status == "complete", summary=summary)


def _open(w: Window, journal: Any) -> list[Gate]:
    """The start (or resume) record; the frozen contract and the tool's source copied in once; the gates."""
    loaded = w.loaded
    if w.resumed:
        # the killed runner's lanes outlive it where no failsafe restored a daily: they hold the ports the
        # resumed visits boot on (pid and start time checked, so a reused pid is never signalled)
        stopped, not_stopped = stop_window_lanes(w.state)
        journal.done("resume", window=w.window_id, finished_gates=len(w.finished_gates), stopped_lanes=stopped,
                     **({"lanes_not_stopped": not_stopped} if not_stopped else {}))
    else:
        journal.done("start", window=w.window_id, contract=loaded.contract.contract,
                     canonical_sha256=loaded.canonical_sha256)
    if not w.resumed or not (w.bundle / "source.json").exists():
        # a first start killed before source.json was written measured nothing: what runs now is the first
        copy_contract(loaded, w.record_path, w.bundle, accepted=w.freeze_record.get("accepted_tool_defaults") or [])
        for lane in loaded.lanes.values():  # every lane as meant, booted or not (a rejudge reads them all)
            atomic_write_json(w.bundle / "lanes" / lane.name / "spec.json", lane.model_dump(mode="json"))
        atomic_write_json(w.bundle / "source.json", source_snapshot())
    return build_gates(loaded, w.bundle)


# The window ended at its screens: the daily was never stopped, so there was nothing to restore or prove.
NEVER_STOPPED = "never stopped"


async def _run_screens(w: Window, screen_gates: list[Screen], journal: Any,
                       lanes: dict[str, LaneOutcome]) -> set[str]:
    """Every screen once per candidate, before anything is stopped or booted. A candidate whose screens do
    not all PASS stays out of the live window; returns those candidates."""
    out: set[str] = set()
    for candidate in w.loaded.candidates():
        control = w.loaded.lanes[candidate.control or ""]
        for gate in screen_gates:
            if (gate.gate_id, candidate.name) not in w.finished_gates:
                raw = gate.ctx.raw_path(gate.gate_id, candidate.name)
                if raw.exists():
                    _set_aside(raw)  # a screen cut short: redone whole
                journal.intent("gate", gate=gate.gate_id, lane=candidate.name)
                with JsonlAppender(raw) as sink:
                    await asyncio.to_thread(gate.screen, candidate, control, sink)
                journal.done("gate", gate=gate.gate_id, lane=candidate.name)
            result = judge_one(w.bundle, gate, candidate, control)  # a judge's bug: INCONCLUSIVE, not a crash
            if result.verdict is not Verdict.PASS and candidate.name not in out:
                out.add(candidate.name)
                lanes[candidate.name] = LaneOutcome(status=SCREENED_OUT, cause=f"screen {gate.gate_id}: "
                                                    f"{result.verdict.value}", message="; ".join(result.reasons[:2]))
                _say(w, f"{candidate.name}: not worth a live window ({lanes[candidate.name].cause})")
    return out


def _live_part(loaded: LoadedContract, screened_out: set[str]) -> LoadedContract | None:
    """The contract's lanes that still go live: candidates no screen kept out and the controls they
    compare with. None when no candidate is left: the window ends at its screens."""
    if not screened_out:
        return loaded
    candidates = [lane for lane in loaded.candidates() if lane.name not in screened_out]
    if not candidates:
        return None
    used = {lane.control for lane in candidates}
    lanes = {name: lane for name, lane in loaded.lanes.items()
             if (lane.role == "candidate" and name not in screened_out) or name in used}
    return dataclasses.replace(loaded, lanes=lanes)


async def _visit_lanes(w: Window, loaded: LoadedContract, gates: list[LiveGate], journal: Any,
                       lanes: dict[str, LaneOutcome], screens_run: int = 0) -> None:
    """The daily down behind the failsafe, then every visit in the plan: boot, gates, stop."""
    if loaded.contract.incumbent is not None:
        await asyncio.to_thread(_take_down_incumbent, w, journal)
    labels = {"campaign.window": w.window_id, "campaign.contract": loaded.canonical_sha256}
    # for the progress line: one step per boot and per gate of each visit, if every pair is needed
    journal.done("plan", steps=screens_run + most_steps(loaded, gates), visits=len(first_visits(loaded, gates)))
    for visit, visit_gates in first_visits(loaded, gates):
        await _visit(w, visit, visit_gates, journal, lanes, labels)
    pairs_done = 1
    while planned := next_pair(loaded, gates, pairs_done):
        late = _pair_past_budget(w, planned)
        if late is not None:
            journal.done(PAIRS_STOPPED, after_pairs=pairs_done, reason=late)
            break
        journal.done("pair", pairs=pairs_done + 1, visits=[str(v.key) for v, _ in planned])
        for visit, visit_gates in planned:
            await _visit(w, visit, visit_gates, journal, lanes, labels)
        pairs_done += 1


def _pair_past_budget(w: Window, planned: list[tuple[Visit, list[LiveGate]]]) -> str | None:
    """With a daily behind the failsafe, the window's time budget is its deadline: no pair that would end
    after the point where the daily must be restored. A pair is estimated from the journal (so a resumed
    window estimates as the first run would): each visit's boot and its gates, as that lane's latest
    boot and runs of the same gates took."""
    spec, deadline = w.loaded.contract.incumbent, w.state.reload().deadline_wall
    if spec is None or deadline is None:
        return None
    took = step_seconds(read_jsonl(w.bundle / "journal.jsonl"))
    estimate = sum(took.get(("boot", visit.lane.name, None), 0.0)
                   + sum(took.get(("gate", visit.lane.name, gate.gate_id), 0.0) for gate in gates)
                   for visit, gates in planned)
    return pair_past_budget(seconds_left=deadline - time.time(), pair_estimate_s=estimate,
                            restore_s=spec.readiness.budget)


async def _visit(w: Window, visit: Visit, gates: list[LiveGate], journal: Any, lanes: dict[str, LaneOutcome],
                 labels: dict[str, str]) -> None:
    visit_gates = [g for g in gates if (g.gate_id, str(visit.key)) not in w.finished_gates]
    outcome = lanes.setdefault(str(visit.key), LaneOutcome())
    if not visit_gates and w.resumed:
        outcome.status = "ran"  # every gate of this visit finished before the interruption
        return
    await _run_lane(w, visit, visit_gates, journal, outcome, labels)


async def _close(w: Window, journal: Any, progress: _Progress) -> dict[str, Any]:
    """Whatever happened: the daily back if nothing brought it back yet, SUMMARY.json, the end record."""
    loaded = w.loaded
    if loaded.contract.incumbent is not None and progress.restore_record is None:
        if w.state.reload().incumbent is None:  # ended before the daily was touched (during its screens)
            progress.restore_record = {"event": "done", "action": NEVER_STOPPED}
    if loaded.contract.incumbent is not None and progress.restore_record is None:
        try:
            progress.restore_record = await asyncio.to_thread(_bring_back_incumbent, w, journal,
                                                              f"window {progress.status}")
        except RunError as exc:
            progress.restore_record = {"event": "failed", "error": str(exc)}
    summary = summarize(loaded, w.freeze_record, w.window_id, w.state.started_at, progress.status, progress.lanes,
                        progress.results)
    summary["resumed"] = w.resumed
    summary["restore"] = _restore_summary(loaded, progress.restore_record)
    atomic_write_json(w.bundle / "SUMMARY.json", summary)
    journal.done("end", status=progress.status)
    journal.close()
    return summary


async def _heartbeat(state: WindowState) -> None:
    beats = 0
    while True:
        await asyncio.to_thread(state.beat)
        beats += 1
        fresh = await asyncio.to_thread(state.reload)
        if fresh.failsafe_backend == "engine" and fresh.armed:
            from campaign.failsafe import enginefailsafe

            try:  # a box that does not hear us for the grace restores its daily: the failsafe doing its job
                await asyncio.to_thread(enginefailsafe.beat, fresh, beats)
            except CampaignError as exc:  # a DockerError kind, or no client: any failure to reach the box is news
                _note_beat_failure(fresh, exc)
        await asyncio.sleep(2.0)


def _note_beat_failure(state: WindowState, exc: BaseException) -> None:
    from campaign.failsafe.watchdog import describe

    with open(state.directory / "heartbeat.err", "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} heartbeat to the box failed: {describe(exc)}\n")


def _take_down_incumbent(w: Window, journal: Any) -> WindowState:
    """Snapshot, failsafe dry run, arm, stop: in that order, each journaled; any failure before the
    stop leaves the daily untouched."""
    spec, failsafe_spec = w.loaded.contract.incumbent, w.loaded.contract.failsafe
    assert spec is not None and failsafe_spec is not None
    state = w.state.reload()
    if state.incumbent is None:
        journal.intent("incumbent.snapshot")
        snap = incumbent.snapshot(spec, w.loaded.base_dir)
        with state.locked():
            state = state.reload()
            state.incumbent = snap
            state.incumbent_api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
            state.heartbeat_grace = failsafe_spec.heartbeat_grace
            state.save()
        atomic_write_json(w.bundle / "incumbent" / "snapshot.json", _redacted_snapshot(snap))
        journal.done("incumbent.snapshot", **({"container": snap["container_id"]} if snap.get("runtime") == "docker"
                                               else {"pid": snap["pid"]}))
    backend = choose_backend(failsafe_spec.backend, spec)
    journal.intent("failsafe.dry_run", backend=backend)
    if backend == "engine":
        from campaign.failsafe import enginefailsafe

        journal.done("failsafe.dry_run", result=enginefailsafe.dry_run(state, failsafe_spec, spec.endpoint))
        journal.intent("failsafe.arm", backend=backend, deadline_s=failsafe_spec.deadline)
        state = enginefailsafe.arm(state, failsafe_spec, spec.endpoint)
    else:
        journal.done("failsafe.dry_run", result=dry_run(backend, state.directory))
        journal.intent("failsafe.arm", backend=backend, deadline_s=failsafe_spec.deadline)
        state = arm(state, backend, failsafe_spec.deadline)
    journal.done("failsafe.arm", backend=backend, generation=state.failsafe_generation,
                 deadline_wall=state.deadline_wall)
    journal.intent("incumbent.stop")
    stopped = incumbent.stop(state.incumbent or {}, escalate_after=1.0 if w.escalated else None)
    with state.locked():
        state = state.reload()
        state.incumbent_stopped, state.restored = True, False
        state.save()
    journal.done("incumbent.stop", pid=stopped)
    w.state = state
    return state


def _bring_back_incumbent(w: Window, journal: Any, reason: str) -> dict[str, Any]:
    """Restore with proof, then disarm: the failsafe stays armed until the daily is proven."""
    journal.close()  # restore appends its own intent/result records to the same journal
    try:
        record = restore(w.window_id, reason=reason, by="runner", grace=1.0 if w.escalated else 10.0)
    except RunError as exc:
        state = w.state.reload()
        if state.failsafe_backend == "engine" and state.armed:
            from campaign.contracts.schema import DockerHost
            from campaign.lanes.runtimes.dockerhost import describe

            box = describe(DockerHost.model_validate((state.incumbent or {}).get("docker_host")))
            deadline = time.strftime("%H:%M:%S", time.localtime(state.deadline_wall or 0))
            raise RunError(f"{exc}; the watchdog on {box} restores the daily by itself once this runner's heartbeat "
                           f"is silent for {state.heartbeat_grace:g}s or at the deadline {deadline} (an engine that "
                           f"went down: once it is back); then `campaign resume {w.window_id}` finishes the "
                           "window") from exc
        raise
    finally:
        journal.reopen()
    atomic_write_json(w.bundle / "incumbent" / "restore.json", record)
    journal.intent("failsafe.disarm")
    disarm(w.state)
    journal.done("failsafe.disarm")
    return record


def _forget_api_key(w: Window) -> None:
    """The daily's key was kept for a failsafe restoring in a bare environment; once the window is over, with
    the daily proven back and the bundle scanned for it, nothing needs it."""
    state = w.state.reload()
    if state.incumbent_api_key and state.restored and not state.armed:
        with state.locked():
            state = state.reload()
            state.incumbent_api_key = None
            state.save()


def _restore_summary(loaded: LoadedContract, record: dict[str, Any] | None) -> dict[str, Any]:
    if loaded.contract.incumbent is None:
        return {"incumbent": None}
    if record is not None and record.get("action") == NEVER_STOPPED:
        return {"incumbent": loaded.contract.incumbent.endpoint, "proved": None, "action": NEVER_STOPPED,
                "error": None}
    ok = bool(record and record.get("event") == "done" and record.get("proof"))
    left = (record or {}).get("lanes_not_stopped")  # a lane whose engine did not answer may still hold its GPUs
    return {"incumbent": loaded.contract.incumbent.endpoint, "proved": ok,
            "action": (record or {}).get("action"), "error": (record or {}).get("error"),
            **({"lanes_not_stopped": left} if left else {})}


def _known_secrets(w: Window) -> list[str]:
    """Every credential value this runner knows: what the lanes reference, and the daily's own."""
    from campaign.lanes.redact import lane_secrets, launch_secrets

    found = [value for lane in w.loaded.lanes.values() for value in lane_secrets(lane)]
    state = w.state.reload()
    snap = state.incumbent
    if snap:
        found += launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""])
    if state.incumbent_api_key:  # a resumed runner may not have the variable the window began with
        found.append(state.incumbent_api_key)
    return found


def _redacted_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """The bundle's copy of the daily's snapshot: credential values cut out of argv and every string, every
    environment value a keyed digest (the daily's environment is the host's, not the contract's: nothing
    in it is declared). The private copy in the state folder (0600) keeps the values, for the restore."""
    from campaign.lanes.redact import Redactor, launch_secrets

    secrets = launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""])
    redacted = Redactor(secrets).snapshot(snap)
    if snap.get("runtime") == "docker":  # the engine's own Env list: the same digests as the env above
        from campaign.daily.dailycontainer import BUNDLE_HOST_CONFIG

        redacted["config"] = {**redacted["config"], "Env": [f"{k}={v}" for k, v in redacted["env"].items()]}
        redacted["host_config"] = {k: v for k, v in redacted["host_config"].items() if k in BUNDLE_HOST_CONFIG}
        redacted.pop("env_sha256", None)  # an unkeyed digest of the values would let a guess be checked
    return redacted


async def _run_lane(w: Window, visit: Visit, gates: list[LiveGate], journal: Any, outcome: LaneOutcome,
                    labels: dict[str, str]) -> None:
    lane, bundle = visit.lane, w.bundle
    lane_dir = bundle / "lanes" / str(visit.key)
    if w.resumed and (lane_dir / "boot.log").exists():
        _set_aside(lane_dir / "boot.log")
    journal.intent("boot", lane=str(visit.key))

    def started(running: Any) -> None:
        _track_lane(w, visit, running)

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
        _record_inspect(w, visit, lane_dir, run.inspect)  # redacted once, by boot_lane
        for gate in gates:
            raw = gate.ctx.raw_path(gate.gate_id, str(visit.key))
            if raw.exists():
                _set_aside(raw)  # a gate cut short by a crash: its records are kept, and redone whole
            journal.intent("gate", gate=gate.gate_id, lane=str(visit.key))
            with JsonlAppender(raw) as sink:
                await gate.collect(run, sink, visit)
            journal.done("gate", gate=gate.gate_id, lane=str(visit.key))
        outcome.status = "ran"
    finally:
        journal.intent("stop", lane=str(visit.key))
        code = await run.stop(timeout=1.0 if w.escalated else 20.0)
        journal.done("stop", lane=str(visit.key), exit_code=code)


def _record_inspect(w: Window, visit: Visit, lane_dir: Path, snapshot: dict[str, Any]) -> None:
    """The first boot's snapshot is the one the window measured with (the one-axis check and promotion read
    it) and is never replaced; a resumed boot's goes beside it as inspect.resume<N>.json, once proven to
    run the same executable and image."""
    target = lane_dir / "inspect.json"
    if w.resumed:
        first = first_inspect(w.bundle, visit.lane.name)
        if first is not None:
            refuse_another_launch(w.bundle, visit.lane, first, snapshot)
        n = 1
        while target.exists():
            target, n = lane_dir / f"inspect.resume{n}.json", n + 1
    atomic_write_json(target, snapshot)


def _set_aside(path: Path) -> None:
    """Keep an interrupted attempt's file in the bundle under a new name; judges read only the final one."""
    n = 1
    while (target := path.with_name(f"{path.stem}.interrupted-{n}{path.suffix}")).exists():
        n += 1
    path.rename(target)


def _track_lane(w: Window, visit: Visit, running: Any) -> None:
    """Recorded the moment the lane starts, so the failsafe can stop it if the runner dies mid-boot."""
    pid = getattr(running, "pid", None)
    container = getattr(getattr(running, "container", None), "id", None)
    host = visit.lane.docker_host.model_dump(mode="json") if visit.lane.docker_host else None
    with w.state.locked():
        state = w.state.reload()
        state.lanes.append(LaneProcess(visit=str(visit.key), pid=pid, start_time=process_start_time(pid) if pid else None,
                                       container=container, docker_host=host))
        state.save()
        w.state = state


def lane_redacted(snapshot: dict[str, Any], lane: EffectiveLane) -> dict[str, Any]:
    """No secret reaches the bundle: undeclared env values and credential arguments become keyed digests,
    token-shaped strings are cut (rules in campaign.lanes.redact; what boot_lane applies to each snapshot)."""
    return redactor_for(lane).snapshot(snapshot)


# What a lane's boot records about the bits it ran; a resume must find the same.
_IDENTITY = {"executable_sha256": "executable sha256", "image_id": "image id"}


def first_inspect(bundle: Path, lane: str) -> tuple[Path, dict[str, Any]] | None:
    """The snapshot of the lane's earliest recorded boot (its first visit, else its earliest re-run)."""
    found = sorted(bundle.glob(f"lanes/{lane}@rerun*/inspect.json"), key=lambda p: VisitKey.parse(p.parent.name))
    for path in [bundle / "lanes" / lane / "inspect.json", *found]:
        if path.exists():
            return path, load_json_strict(path)
    return None


def refuse_another_launch(bundle: Path, lane: EffectiveLane, first: tuple[Path, dict[str, Any]],
                           now: dict[str, Any]) -> None:
    path, recorded = first
    for key, what in _IDENTITY.items():
        if recorded.get(key) is not None and now.get(key) != recorded[key]:
            raise InputError(f"{path}: refusing to resume window {bundle.name}: lane {lane.name}'s {what} is now "
                             f"{str(now.get(key))[:23]}, the window started with {str(recorded[key])[:23]}; "
                             "start a new window")
