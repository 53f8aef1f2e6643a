"""A window: frozen contract -> pre-flight -> for each lane: boot, ready, gates -> stop -> judge -> sign.

Raw records are written as they arrive; judging reads only what is in the bundle, so a bundle can be
re-judged later. The journal and SUMMARY.json are written in ``finally``; only a window that reached
the end is signed, so an interrupted one fails verification as incomplete.

This module is the window's sequence; its steps live beside it: what a run carries (``context``), the
checks before anything is touched (``begin``, ``preflight``), the daily taken down and brought back
(``takedown``), the screens (``screening``), one lane's visit (``lanevisit``, ``identity``), the order of
visits (``schedule``), the bundle's one-time copies (``bundlecopy``), judging (``judge``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.load import LoadedContract
from campaign.errors import RunError
from campaign.fsutil import atomic_write_json, read_jsonl
from campaign.gates.base import Gate, LiveGate, Visit, live_gates, screens
from campaign.receipts.bundle import sign_bundle
from campaign.signing import SigningKey, TrustedKeys
from campaign.window import takedown
from campaign.window.begin import begin_window
from campaign.window.bundlecopy import copy_once
from campaign.window.context import Progress, Window, WindowOutcome, say
from campaign.window.judge import LaneOutcome, build_gates, judge_bundle, predicate, summarize
from campaign.window.lanevisit import visit_lane
from campaign.window.plan import request_counts, restore_reserve
from campaign.window.progress import daily_words
from campaign.window.schedule import PAIRS_STOPPED, first_visits, most_steps, next_pair, pair_past_budget, step_seconds
from campaign.window.screening import live_part, run_screens

__all__ = ["Window", "WindowOutcome", "run_async", "run_window"]


def run_window(contract_path: Path, *, key: SigningKey, trusted: TrustedKeys, out_dir: Path = Path("runs"),
               record_path: Path | None = None, window_id: str | None = None,
               echo: Callable[[str], None] | None = None, accept_tool_defaults: bool = False) -> WindowOutcome:
    window, held = begin_window(contract_path, key=key, trusted=trusted, out_dir=out_dir, record_path=record_path,
                                window_id=window_id, echo=echo, accept_tool_defaults=accept_tool_defaults)
    try:
        return run_async(window)
    finally:
        held.release()


def run_async(window: Window) -> WindowOutcome:
    async def main() -> WindowOutcome:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        interrupts = 0

        def on_signal(signum: int) -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                say(window, f"signal {signum}: stopping the window and restoring the incumbent "
                             "(send it again to stop lanes without waiting)")
                assert task is not None
                task.cancel()
            else:
                window.escalated = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        return await _execute(window)

    return asyncio.run(main())


async def _execute(w: Window) -> WindowOutcome:
    from campaign.window.journal import Journal

    journal = Journal(w.bundle / "journal.jsonl", echo=w.echo)
    progress = Progress()
    heartbeat = asyncio.create_task(takedown.heartbeat(w.state))
    try:
        gates = _open(w, journal)
        screened_out = await run_screens(w, screens(gates), journal, progress.lanes)
        live = live_part(w.loaded, screened_out)
        if live is None:
            journal.done("screened", out=sorted(screened_out),
                         reason="no candidate is worth a live window: the daily was not stopped")
            progress.restore_record = {"event": "done", "action": takedown.NEVER_STOPPED}
        else:
            screens_run = len(screens(gates)) * len(w.loaded.candidates())
            await _visit_lanes(w, live, live_gates(gates), journal, progress.lanes, screens_run)
            if w.loaded.contract.incumbent is not None:
                progress.restore_record = await _bring_back(w, journal, "window finished")
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
        sign_bundle(w.bundle, w.key, predicate(w.loaded, w.window_id), secrets=takedown.known_secrets(w))
    takedown.forget_secrets(w)  # the window is over: with the daily proven back, its credentials leave the state
    verdicts: dict[str, dict[str, str]] = {}
    for result in progress.results:
        verdicts.setdefault(result.candidate, {})[result.gate] = result.verdict.value
    return WindowOutcome(bundle=w.bundle, window_id=w.window_id, verdicts=verdicts,
                         signed=progress.status == "complete", summary=summary)


def _open(w: Window, journal: Any) -> list[Gate]:
    """The start (or resume) record; the frozen contract and the tool's source copied in once; the gates."""
    loaded = w.loaded
    if w.resumed:
        journal.done("resume", window=w.window_id, finished_gates=len(w.finished_gates), **takedown.stop_lanes_left(w))
    else:
        journal.done("start", window=w.window_id, contract=loaded.contract.contract,
                     canonical_sha256=loaded.canonical_sha256)
    if not w.resumed or not (w.bundle / "source.json").exists():
        # a first start killed before source.json was written measured nothing: what runs now is the first
        copy_once(loaded, w.record_path, w.bundle, accepted=w.freeze_record.get("accepted_tool_defaults") or [])
    return build_gates(loaded, w.bundle)


async def _visit_lanes(w: Window, loaded: LoadedContract, gates: list[LiveGate], journal: Any,
                       lanes: dict[str, LaneOutcome], screens_run: int = 0) -> None:
    """The daily down behind the failsafe, then every visit in the plan: boot, gates, stop."""
    if loaded.contract.incumbent is not None:
        await asyncio.to_thread(takedown.take_down_incumbent, w, journal)
    labels = {"campaign.window": w.window_id, "campaign.contract": loaded.canonical_sha256}
    # for the progress line: one step per boot and per gate of each visit, if every pair is needed
    journal.done("plan", steps=screens_run + most_steps(loaded, gates), visits=len(first_visits(loaded, gates)),
                 requests=request_counts(first_visits(loaded, gates)))
    for visit, visit_gates in first_visits(loaded, gates):
        await visit_lane(w, visit, visit_gates, journal, lanes, labels)
    pairs_done = 1
    while planned := next_pair(loaded, gates, pairs_done):
        late = _pair_past_budget(w, planned)
        if late is not None:
            journal.done(PAIRS_STOPPED, after_pairs=pairs_done, reason=late)
            break
        journal.done("pair", pairs=pairs_done + 1, visits=[str(v.key) for v, _ in planned])
        for visit, visit_gates in planned:
            await visit_lane(w, visit, visit_gates, journal, lanes, labels)
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
    reserve = restore_reserve(w.loaded, w.bundle.parent, exclude=w.bundle)  # as `campaign plan` shows it
    assert reserve is not None
    return pair_past_budget(seconds_left=deadline - time.time(), pair_estimate_s=estimate,
                            restore_s=reserve.seconds, restore_why=reserve.source)


async def _bring_back(w: Window, journal: Any, reason: str) -> dict[str, Any]:
    """The daily restored with proof, and said as it happens: the journal's restore record is written by the
    restore itself (the failsafe's too), so the console hears of it here."""
    record = await asyncio.to_thread(takedown.bring_back_incumbent, w, journal, reason)
    say(w, f"{time.strftime('%H:%M:%S')} {daily_words(record)}")
    return record


async def _close(w: Window, journal: Any, progress: Progress) -> dict[str, Any]:
    """Whatever happened: the daily back if nothing brought it back yet, SUMMARY.json, the end record."""
    loaded = w.loaded
    if loaded.contract.incumbent is not None and progress.restore_record is None:
        if w.state.reload().incumbent is None:  # ended before the daily was touched (during its screens)
            progress.restore_record = {"event": "done", "action": takedown.NEVER_STOPPED}
    if loaded.contract.incumbent is not None and progress.restore_record is None:
        try:
            progress.restore_record = await _bring_back(w, journal, f"window {progress.status}")
        except RunError as exc:
            progress.restore_record = {"event": "failed", "error": str(exc)}
    summary = summarize(loaded, w.freeze_record, w.window_id, w.state.started_at, progress.status, progress.lanes,
                        progress.results)
    summary["resumed"] = w.resumed
    summary["restore"] = takedown.restore_summary(w, progress.restore_record)
    atomic_write_json(w.bundle / "SUMMARY.json", summary)
    journal.done("end", status=progress.status)
    journal.close()
    return summary


