"""``campaign resume``: a crashed or killed window continued from its journal, finished gate work not redone.

Refused, before anything is touched, when what made the first records is no longer what would make the
next: the tool's source, a lane's executable or image, or the tool defaults the window accepted at its
start. The killed runner's lanes are stopped before the resumed visits boot (``takedown.stop_lanes_left``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from campaign.contracts.effective import EFFECTIVE_FILE, read_document
from campaign.contracts.freeze import check_frozen
from campaign.contracts.load import load_contract
from campaign.daily.restore import restore
from campaign.daily.state import WindowState, process_start_time, windows_dir
from campaign.errors import FrozenChanged, InputError, RunError
from campaign.fsutil import UnreadableFile, load_json_strict, read_jsonl
from campaign.receipts.bundle import ENVELOPE
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.boxes import boxes_of, claim
from campaign.window.context import Window, WindowOutcome
from campaign.window.identity import refuse_a_mixed_resume
from campaign.window.preflight import preflight
from campaign.window.run import run_async
from campaign.window.source import source_changes

__all__ = ["resume_window"]


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
    refuse_a_mixed_resume(bundle, loaded, model_paths)
    done = {(r.get("gate"), r.get("lane")) for r in records if r.get("event") == "done" and r.get("step") == "gate"}
    with state.locked():
        state = state.reload()
        state.runner_pid, state.runner_start_time = os.getpid(), process_start_time(os.getpid())
        state.save()
    window = Window(loaded=loaded, record_path=Path(state.record), freeze_record=freeze_record, bundle=bundle,
                     window_id=window_id, key=key, state=state, model_paths=model_paths, echo=echo,
                     finished_gates=done, resumed=True)
    try:
        return run_async(window)
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
