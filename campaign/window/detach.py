"""`campaign run --detach`: check everything a user can fix now, then run the window in the background.

The background runner is a new session (a lost SSH session does not end it); its output goes to
``runner.log`` in the bundle, and it prints nothing after signing so the log is final when signed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.load import load_contract
from campaign.signing import TrustedKeys
from campaign.window.boxes import boxes_of, claim
from campaign.window.context import new_window_id
from campaign.window.plan import refuse_unfit
from campaign.window.preflight import preflight

__all__ = ["detach_window"]


def detach_window(contract: Path, *, out_dir: Path, record: Path | None, trusted: TrustedKeys,
                  preflighted: bool = False, accept_tool_defaults: bool = False) -> tuple[str, Path, int]:
    """Pre-flight here (unless the caller just did), then the runner in a new session; returns the window id,
    its bundle and the runner's pid."""
    loaded = load_contract(contract)
    record = record or default_record_path(loaded.path)
    check_frozen(loaded, record, trusted, accept_tool_defaults=accept_tool_defaults)
    refuse_unfit(loaded, out_dir)  # said here, not only in the background runner's log
    window = new_window_id(loaded)
    held = claim(window, boxes_of(loaded))  # refused here, before the model is hashed on a busy box
    try:
        if not preflighted:
            preflight(loaded)
    finally:
        held.release()  # the runner claims again for the whole window

    bundle = out_dir / window
    bundle.mkdir(parents=True)
    with open(bundle / "runner.log", "ab") as log:
        runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(contract), "--out", str(out_dir),
                          "--record", str(record), "--window-id", window,
                          *(["--accept-tool-defaults"] if accept_tool_defaults else [])],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         close_fds=True)
    return window, bundle, runner.pid
