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
from urllib.parse import urlsplit

from campaign import __version__
from campaign.contracts.effective import EFFECTIVE_FILE, effective_document, read_document
from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.hashing import sha256_bytes, sha256_file
from campaign.contracts.load import LoadedContract, load_contract
from campaign.contracts.model import INPUT_FILE_BYTES
from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.yamlsafe import MAX_CONTRACT_BYTES
from campaign.daily import incumbent
from campaign.daily.restore import restore, stop_window_lanes
from campaign.daily.state import LaneProcess, WindowState, boot_id, process_start_time, windows_dir
from campaign.errors import FrozenChanged, InputError, LaunchError, PreflightError, RunError
from campaign.failsafe.failsafe import arm, choose_backend, disarm, dry_run
from campaign.fsutil import (
    MAX_JSON_BYTES,
    JsonlAppender,
    UnreadableFile,
    atomic_write_bytes,
    atomic_write_json,
    load_json_strict,
    open_regular,
    read_bounded,
    read_jsonl,
    read_text_bounded,
)
from campaign.gates.base import Gate, LiveGate, Screen, Visit, live_gates, screens
from campaign.gates.records import VisitKey
from campaign.gates.result import GateResult, Verdict
from campaign.lanes.hostcpu import check_cpus_here
from campaign.lanes.redact import redactor_for
from campaign.lanes.session import (
    boot_lane,
    check_lane,
    is_local,
    launch_command,
    local_model,
    model_sha256,
    port_is_free,
    resolve_executable,
    resolve_refs,
)
from campaign.receipts.bundle import ENVELOPE, sign_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.boxes import boxes_of, claim
from campaign.window.judge import (
    SCREENED_OUT,
    LaneOutcome,
    build_gates,
    input_copies,
    judge_bundle,
    judge_one,
    predicate,
    summarize,
)
from campaign.window.schedule import PAIRS_STOPPED, first_visits, most_steps, next_pair, pair_past_budget, step_seconds
from campaign.window.source import source_changes, source_snapshot

__all__ = ["WindowOutcome", "daily_port_of", "preflight", "resume_window", "run_window"]


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
    window = _Window(loaded=loaded, record_path=record_path, freeze_record=freeze_record, bundle=bundle,
                     window_id=window_id, key=key, state=state, model_paths=model_paths, echo=echo)
    try:
        return _run_async(window)
    finally:
        held.release()


def resume_window(target: str, *, key: SigningKey, trusted: TrustedKeys,
                  echo: Callable[[str], None] | None = None, accept_tool_defaults: bool = False) -> WindowOutcome:
    """Continue a crashed or killed window from its journal; finished gate work is not redone."""
    window_id = Path(target).name
    try:
        state = WindowState.load(window_id)
    except UnreadableFile as exc:
        if not exc.reason.startswith("no such"):
            raise  # a folder, a FIFO, too large: its own words name the file and what is wrong with it
        raise InputError(f"no window state for {window_id!r} under {windows_dir()}") from exc
    bundle = Path(state.bundle)
    try:
        records = read_jsonl(bundle / "journal.jsonl")
    except (InputError, OSError) as exc:
        restore(window_id, reason="journal unreadable at resume", by="campaign resume")
        raise RunError(f"{bundle / 'journal.jsonl'} is unreadable ({exc}); the incumbent was restored, "
                       "the window stops here") from exc
    if (bundle / ENVELOPE).exists():
        raise InputError(f"window {window_id} already finished and was signed; nothing to resume")
    loaded = load_contract(state.contract, allow_paths=[Path(p) for p in state.allowed_paths])
    _refuse_another_source(bundle)  # before the rules: another tool's defaults are not the question then
    accepted = _accepted_at_start(bundle)
    freeze_record = check_frozen(loaded, Path(state.record), trusted,
                                 accept_tool_defaults=accept_tool_defaults or bool(accepted))
    if accepted and freeze_record.get("accepted_tool_defaults") != accepted:
        raise FrozenChanged(f"{bundle / 'contract' / EFFECTIVE_FILE}: refusing to resume window {bundle.name}: this "
                            "tool's defaults differ from the ones the window accepted at its start; start a new window")
    held = claim(window_id, boxes_of(loaded))
    model_paths = preflight(loaded, ports=False)
    _refuse_a_mixed_resume(bundle, loaded, model_paths)
    done = {(r.get("gate"), r.get("lane")) for r in records if r.get("event") == "done" and r.get("step") == "gate"}
    with state.locked():
        state = state.reload()
        state.runner_pid, state.runner_start_time = os.getpid(), process_start_time(os.getpid())
        state.save()
    window = _Window(loaded=loaded, record_path=Path(state.record), freeze_record=freeze_record, bundle=bundle,
                     window_id=window_id, key=key, state=state, model_paths=model_paths, echo=echo,
                     finished_gates=done, resumed=True)
    try:
        return _run_async(window)
    finally:
        held.release()


def _refuse_another_source(bundle: Path) -> None:
    recorded = bundle / "source.json"
    if recorded.exists():
        changes = source_changes(load_json_strict(recorded))
        if changes:
            more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
            raise InputError(f"{recorded}: refusing to resume window {bundle.name}: the tool's source changed "
                             f"since it started: {changes[0]}{more}; start a new window")


def _accepted_at_start(bundle: Path) -> list[str]:
    """The tool defaults the window's first start accepted (--accept-tool-defaults): its resume accepts the same."""
    document = read_document(bundle / "contract") or {}
    accepted = document.get("accepted_tool_defaults")
    return [str(line) for line in accepted] if isinstance(accepted, list) else []


def _refuse_a_mixed_resume(bundle: Path, loaded: LoadedContract, model_paths: dict[str, str]) -> None:
    """A resumed window adds records to its first start's: refused when a lane's executable or image is no
    longer what made them (the tool's source is checked first, by the caller), or one signed bundle would hold
    two experiments as one. Checked before anything is touched, so the daily stays as the interruption left it."""
    for lane in loaded.lanes.values():
        first = _first_inspect(bundle, lane.name)
        if first is not None:
            _refuse_another_launch(bundle, lane, first, _launch_identity(lane, model_paths[lane.name]))


# What a lane's boot records about the bits it ran; a resume must find the same.
_IDENTITY = {"executable_sha256": "executable sha256", "image_id": "image id"}


def _first_inspect(bundle: Path, lane: str) -> tuple[Path, dict[str, Any]] | None:
    """The snapshot of the lane's earliest recorded boot (its first visit, else its earliest re-run)."""
    found = sorted(bundle.glob(f"lanes/{lane}@rerun*/inspect.json"), key=lambda p: VisitKey.parse(p.parent.name))
    for path in [bundle / "lanes" / lane / "inspect.json", *found]:
        if path.exists():
            return path, load_json_strict(path)
    return None


def _launch_identity(lane: EffectiveLane, model_path: str) -> dict[str, Any]:
    """What boot_lane will record as the lane's executable sha256 and image id, found without starting it."""
    from campaign.lanes.engines.registry import adapter_for

    _argv, executable = launch_command(resolve_refs(lane), adapter_for(lane.engine), model_path)
    identity: dict[str, Any] = {"executable_sha256": sha256_file(executable) if executable is not None else None}
    if lane.runtime == "docker":
        from campaign.lanes.runtimes.docker import resolve_image
        from campaign.lanes.runtimes.dockerhost import client_for

        identity["image_id"] = resolve_image(client_for(lane.docker_host), lane.image or "",
                                             where=f"lane {lane.name}: ")["Id"]
    return _redacted(identity, lane)  # recorded snapshots went through the redactor: compare like with like


def _refuse_another_launch(bundle: Path, lane: EffectiveLane, first: tuple[Path, dict[str, Any]],
                           now: dict[str, Any]) -> None:
    path, recorded = first
    for key, what in _IDENTITY.items():
        if recorded.get(key) is not None and now.get(key) != recorded[key]:
            raise InputError(f"{path}: refusing to resume window {bundle.name}: lane {lane.name}'s {what} is now "
                             f"{str(now.get(key))[:23]}, the window started with {str(recorded[key])[:23]}; "
                             "start a new window")


@dataclass
class _Window:
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


def _run_async(window: _Window) -> WindowOutcome:
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


def _say(window: _Window, line: str) -> None:
    if window.echo:
        window.echo(line)


def preflight(loaded: LoadedContract, *, ports: bool = True) -> dict[str, str]:
    """Everything checkable before a lane starts: engines, executables, model identity, ports.
    A port held by the incumbent is fine: it is stopped before the first lane boots."""
    from campaign.lanes.engines.registry import adapter_for

    incumbent_port = daily_port_of(loaded)
    spec = loaded.contract.incumbent
    if spec is not None and spec.runtime == "docker":
        from campaign.daily import dailycontainer

        # the daily container exists on the named engine, runs, and its image is there: else nothing starts
        dailycontainer.snapshot(spec.container or "", spec.docker_host.model_dump(mode="json")
                                if spec.docker_host else None, {})

    model_paths: dict[str, str] = {}
    hashed: dict[Any, str] = {}
    for lane in loaded.lanes.values():
        adapter_for(lane.engine)
        if lane.runtime == "process":
            resolve_executable(lane)
        if is_local(lane):  # a FIFO, a device or a loop is named as such: never hashed forever, never a traceback
            model_paths[lane.name], _kind = local_model(lane, loaded.resolve(lane.model.path))
            check_lane(lane, model_paths[lane.name])
        else:
            model_paths[lane.name] = _remote_model_path(lane)
            checked = check_lane(lane, model_paths[lane.name])
        if lane.model.sha256:
            digest = (_hash_here(lane, Path(model_paths[lane.name]), hashed) if is_local(lane)
                      else _hash_there(lane, checked["image_id"], [model_paths[lane.name]], hashed)[0])
            if digest != lane.model.sha256:
                raise PreflightError(f"lane {lane.name}: model {model_paths[lane.name]} has sha256 {digest}"
                                     f"{'' if is_local(lane) else ' on ' + describe_engine(lane)}, "
                                     f"not the pinned {lane.model.sha256}")
        if lane.model.sha256_manifest:
            _check_manifest(loaded, lane, Path(model_paths[lane.name]),
                            None if is_local(lane) else (lambda paths, lane=lane, image=checked["image_id"]:
                                                         _hash_there(lane, image, paths, hashed)))
        if ports and is_local(lane) and lane.port != incumbent_port and not port_is_free(lane.host, lane.port):
            raise PreflightError(f"lane {lane.name}: port {lane.host}:{lane.port} is already in use; "
                                 "another server there would be measured instead")
    for index, gate in enumerate(loaded.contract.gates):
        if getattr(gate, "client_cpus", None):
            check_cpus_here(gate.client_cpus, f"gates[{index}] ({gate.id or gate.kind}) client_cpus")
    return model_paths


def daily_port_of(loaded: LoadedContract) -> int | None:
    incumbent = loaded.contract.incumbent
    return urlsplit(incumbent.endpoint).port if incumbent else None


def _check_manifest(loaded: LoadedContract, lane: EffectiveLane, model_dir: Path,
                    hash_there: Callable[[list[str]], list[str]] | None = None) -> None:
    manifest = loaded.resolve(lane.model.sha256_manifest or "")
    lines = _manifest_lines(manifest)
    files = [str(model_dir / name.strip().lstrip("*")) for _digest, name in lines]
    digests = hash_there(files) if hash_there else [model_sha256(lane, Path(f)) for f in files]
    bad = [Path(f).relative_to(model_dir) for f, (digest, _), seen in zip(files, lines, digests, strict=True) if seen != digest]
    if bad:
        raise PreflightError(f"lane {lane.name}: {len(bad)}/{len(lines)} model files differ from "
                             f"{manifest.name}, e.g. {bad[0]}")


# A sha256sum listing of a model's files: about 100 bytes a file, so 4 MiB is some 40,000 files.
MANIFEST_BYTES = 4 << 20


def _manifest_lines(manifest: Path) -> list[tuple[str, str]]:
    """(digest, name) per line of a ``sha256sum`` manifest, read bounded; a line of another shape is an
    InputError naming the manifest's line."""
    lines = []
    text = read_text_bounded(manifest, MANIFEST_BYTES, what="model manifest")
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split(None, 1)
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].strip().lstrip("*"):
            raise InputError(f"{manifest}:{number}: not a `sha256sum` line (<sha256>  <file>)")
        lines.append((parts[0], parts[1]))
    return lines


def _remote_model_path(lane: EffectiveLane) -> str:
    """A lane on another box loads the model from that box's disk: its path is that box's, absolute."""
    if not lane.model.path.startswith("/"):
        raise PreflightError(f"lane {lane.name}: model path {lane.model.path!r} must be absolute: the lane runs on "
                             f"{describe_engine(lane)}, and a path relative to the contract means nothing there")
    return os.path.normpath(lane.model.path)


def describe_engine(lane: EffectiveLane) -> str:
    from campaign.lanes.runtimes.dockerhost import describe

    return describe(lane.docker_host)


def _hash_here(lane: EffectiveLane, path: Path, hashed: dict[Any, str]) -> str:
    if path not in hashed:
        hashed[path] = model_sha256(lane, path)
    return hashed[path]


def _hash_there(lane: EffectiveLane, image_id: str, paths: list[str], hashed: dict[Any, str]) -> list[str]:
    """Each path hashed once per engine, on that box (lanes sharing a model share the work)."""
    from campaign.lanes.runtimes.docker import hash_on_engine

    engine = describe_engine(lane)
    todo = [p for p in paths if (engine, p) not in hashed]
    if todo:
        for path, digest in hash_on_engine(lane, image_id, todo, labels={"campaign.lane": lane.name}).items():
            hashed[(engine, path)] = digest
    return [hashed[(engine, p)] for p in paths]


@dataclass
class _Progress:
    """What the window has to show so far; the ``finally`` of _execute summarizes whatever it holds."""

    lanes: dict[str, LaneOutcome] = field(default_factory=dict)  # by visit key
    results: list[GateResult] = field(default_factory=list)
    status: str = "interrupted"
    restore_record: dict[str, Any] | None = None


async def _execute(w: _Window) -> WindowOutcome:
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


def _open(w: _Window, journal: Any) -> list[Gate]:
    """The start (or resume) record; the frozen contract and the tool's source copied in once; the gates."""
    loaded = w.loaded
    if w.resumed:
        # the killed runner's lanes outlive it where no failsafe restored a daily: they hold the ports the
        # resumed visits boot on (pid and start time checked, so a reused pid is never signalled)
        journal.done("resume", window=w.window_id, finished_gates=len(w.finished_gates),
                     stopped_lanes=stop_window_lanes(w.state))
    else:
        journal.done("start", window=w.window_id, contract=loaded.contract.contract,
                     canonical_sha256=loaded.canonical_sha256)
    if not w.resumed or not (w.bundle / "source.json").exists():
        # a first start killed before source.json was written measured nothing: what runs now is the first
        _copy_contract(loaded, w.record_path, w.bundle, accepted=w.freeze_record.get("accepted_tool_defaults") or [])
        for lane in loaded.lanes.values():  # every lane as meant, booted or not (a rejudge reads them all)
            atomic_write_json(w.bundle / "lanes" / lane.name / "spec.json", lane.model_dump(mode="json"))
        atomic_write_json(w.bundle / "source.json", source_snapshot())
    return build_gates(loaded, w.bundle)


# The window ended at its screens: the daily was never stopped, so there was nothing to restore or prove.
NEVER_STOPPED = "never stopped"


async def _run_screens(w: _Window, screen_gates: list[Screen], journal: Any,
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


async def _visit_lanes(w: _Window, loaded: LoadedContract, gates: list[LiveGate], journal: Any,
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


def _pair_past_budget(w: _Window, planned: list[tuple[Visit, list[LiveGate]]]) -> str | None:
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


async def _visit(w: _Window, visit: Visit, gates: list[LiveGate], journal: Any, lanes: dict[str, LaneOutcome],
                 labels: dict[str, str]) -> None:
    visit_gates = [g for g in gates if (g.gate_id, str(visit.key)) not in w.finished_gates]
    outcome = lanes.setdefault(str(visit.key), LaneOutcome())
    if not visit_gates and w.resumed:
        outcome.status = "ran"  # every gate of this visit finished before the interruption
        return
    await _run_lane(w, visit, visit_gates, journal, outcome, labels)


async def _close(w: _Window, journal: Any, progress: _Progress) -> dict[str, Any]:
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
            except Exception as exc:  # noqa: BLE001 - any failure to reach the box is the same news
                _note_beat_failure(fresh, exc)
        await asyncio.sleep(2.0)


def _note_beat_failure(state: WindowState, exc: BaseException) -> None:
    from campaign.failsafe.watchdog import describe

    with open(state.directory / "heartbeat.err", "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} heartbeat to the box failed: {describe(exc)}\n")


def _take_down_incumbent(w: _Window, journal: Any) -> WindowState:
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


def _bring_back_incumbent(w: _Window, journal: Any, reason: str) -> dict[str, Any]:
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


def _forget_api_key(w: _Window) -> None:
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
    return {"incumbent": loaded.contract.incumbent.endpoint, "proved": ok,
            "action": (record or {}).get("action"), "error": (record or {}).get("error")}


def _known_secrets(w: _Window) -> list[str]:
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


def _copy_contract(loaded: LoadedContract, record_path: Path, bundle: Path, *, accepted: list[str]) -> None:
    """The frozen contract, its record and its input files go into the bundle; gates read these copies. Beside
    them the effective contract this window is judged by: what judges it again later reads its rules there."""
    target = bundle / "contract"
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_json(target / EFFECTIVE_FILE, effective_document(loaded, __version__, accepted))
    # read bounded, never shutil.copyfile: a path swapped for /dev/zero since the freeze check would fill the disk
    atomic_write_bytes(target / loaded.path.name, read_bounded(loaded.path, MAX_CONTRACT_BYTES, what="contract"))
    atomic_write_bytes(target / "freeze.json", read_bounded(record_path, MAX_JSON_BYTES, what="freeze record"))
    for name, destination in input_copies(loaded, bundle).items():
        destination.parent.mkdir(exist_ok=True)
        atomic_write_bytes(destination, read_bounded(loaded.resolve(loaded.contract.inputs[name].file),
                                                     INPUT_FILE_BYTES, what=f"input {name}"))
    _copy_lane_files(loaded, target)


def _copy_lane_files(loaded: LoadedContract, target: Path) -> None:
    """Each lane file and screen input into contract/files/<sha256> (once per content), or only its digest
    when it is larger than the contract's file_copy_limit; contract/files.json says which lane (or screen)
    read which, and where."""
    pinned = [(lane.name, file, Path(file.path), lane.file_seen_at(file))
              for lane in loaded.lanes.values() for file in lane.files]
    pinned += [(f"screen {loaded.contract.gates[where[1]].gate_id}", file, loaded.resolve(file.path), None)
               for where, file in loaded.written_files() if where[0] == "gates"]
    listed: dict[str, dict[str, Any]] = {}
    for owner, file, path, seen_at in pinned:
        size, data = _read_if_small(path, loaded.contract.file_copy_limit, f"file {file.name}")
        copied = data is not None
        if data is not None and not (target / "files" / file.sha256).exists():
            if sha256_bytes(data) != file.sha256:  # changed since the freeze check a moment ago
                raise FrozenChanged(f"{owner}: file {file.name} ({path}) changed since freezing")
            (target / "files").mkdir(exist_ok=True)
            atomic_write_bytes(target / "files" / file.sha256, data)
        listed.setdefault(owner, {})[file.name] = {"sha256": file.sha256, "bytes": size, "copied": copied,
                                                   "source": path.name, **({"seen_at": seen_at} if seen_at else {})}
    if listed:
        atomic_write_json(target / "files.json", listed)


def _read_if_small(path: Path, limit: int, what: str) -> tuple[int, bytes | None]:
    """A lane file's size, and its bytes when it holds at most ``limit``: opened once, proven a regular file
    (UnreadableFile names a FIFO, a device or a loop), never read past the limit however it grows."""
    with open_regular(path, what=what) as fd:
        size = os.fstat(fd).st_size
        if size > limit:
            return size, None
        chunks, total = [], 0
        while total <= limit and (block := os.read(fd, min(1 << 20, limit + 1 - total))):
            chunks.append(block)
            total += len(block)
    return (total, None) if total > limit else (total, b"".join(chunks))


async def _run_lane(w: _Window, visit: Visit, gates: list[LiveGate], journal: Any, outcome: LaneOutcome,
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


def _record_inspect(w: _Window, visit: Visit, lane_dir: Path, snapshot: dict[str, Any]) -> None:
    """The first boot's snapshot is the one the window measured with (the one-axis check and promotion read
    it) and is never replaced; a resumed boot's goes beside it as inspect.resume<N>.json, once proven to
    run the same executable and image."""
    target = lane_dir / "inspect.json"
    if w.resumed:
        first = _first_inspect(w.bundle, visit.lane.name)
        if first is not None:
            _refuse_another_launch(w.bundle, visit.lane, first, snapshot)
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


def _track_lane(w: _Window, visit: Visit, running: Any) -> None:
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


def _redacted(snapshot: dict[str, Any], lane: EffectiveLane) -> dict[str, Any]:
    """No secret reaches the bundle: undeclared env values and credential arguments become keyed digests,
    token-shaped strings are cut (rules in campaign.lanes.redact; what boot_lane applies to each snapshot)."""
    return redactor_for(lane).snapshot(snapshot)
