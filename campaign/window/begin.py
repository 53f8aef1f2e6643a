"""A new window begun: its contract loaded and checked against its freeze record, its boxes claimed, pre-flight
passed, its bundle folder new and its state saved. Nothing is stopped or started yet: any refusal here
leaves the daily as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.load import load_contract
from campaign.daily.state import WindowState, boot_id, process_start_time
from campaign.errors import PreflightError
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.boxes import BoxClaim, boxes_of, claim
from campaign.window.context import Window, new_window_id
from campaign.window.plan import refuse_unfit
from campaign.window.preflight import preflight

__all__ = ["begin_window"]


def begin_window(contract_path: Path, *, key: SigningKey, trusted: TrustedKeys, out_dir: Path,
                 record_path: Path | None, window_id: str | None, echo: Callable[[str], None] | None,
                 accept_tool_defaults: bool) -> tuple[Window, BoxClaim]:
    """The window, and its boxes' claim: the caller releases it when the window is over."""
    loaded = load_contract(contract_path)
    record_path = record_path or default_record_path(loaded.path)
    freeze_record = check_frozen(loaded, record_path, trusted, accept_tool_defaults=accept_tool_defaults)
    refuse_unfit(loaded, out_dir)  # a window whose minimum cannot fit its deadline: refused, the daily untouched
    window_id = window_id or new_window_id(loaded)
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
    return window, held
