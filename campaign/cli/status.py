"""What a window is doing, and ending one: status, abort."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import typer
from rich.table import Table

from campaign.cli._app import _cells, _clock, app, one_line_errors, out
from campaign.errors import InputError


@app.command()
@one_line_errors
def status(window: Optional[str] = typer.Argument(None),
           as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
           watch: bool = typer.Option(False, "--watch", help="Refresh in place until the window's runner ends, "
                                                              "then print where its bundle is."),
           every: float = typer.Option(2.0, "--every", min=0.2, help="Seconds between refreshes (--watch).")) -> None:
    """Phase, lane, gate, progress, runner pid and failsafe deadline of windows (the newest, or WINDOW)."""
    from campaign.window.status import window_status

    if as_json and watch:
        raise InputError("--watch redraws a table; --json prints once: choose one")
    rows = window_status(window)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    if not rows:
        from campaign.window.status import windows_dir

        out.print(f"no windows yet under {windows_dir()}")
        return
    if not watch:
        out.print(_status_table(rows))
        _print_decided(rows)
        return
    import contextlib

    from rich.live import Live

    # a terminal gets a redraw in place; a log or a pipe gets the table as it stood at the end
    live = Live(_status_table(rows), console=out, refresh_per_second=4) if out.is_terminal else None
    with live or contextlib.nullcontext():
        while any(row["runner_alive"] for row in rows):
            time.sleep(every)
            rows = window_status(rows[0]["window"])
            if live is not None:
                live.update(_status_table(rows))
    if live is None:
        out.print(_status_table(rows))
    for row in rows:
        ended = "signed" if row["signed"] else "not signed"
        out.print(f"window {row['window']} ended ({row['phase']}, {ended}); bundle: {row['bundle']}")
    _print_decided(rows)


def _print_decided(rows: list[dict[str, Any]]) -> None:
    """Under the table, for each ended window: what it decided per candidate, and where its report is."""
    from campaign.receipts.decision import deciding
    from campaign.window.progress import SHOWN_REASON_CHARS

    for row in rows:
        if row["runner_alive"] or not row.get("decisions"):
            continue
        for item in row["decisions"]:
            words = deciding(item["gate"], item["reason"], SHOWN_REASON_CHARS)
            out.print(f"{row['window']}: {item['candidate']}: {item['decision']}: {words}")
        out.print(f"{row['window']}: report: {row['report']}" if row["report"] else
                  f"{row['window']}: report: not published yet (campaign publish {row['bundle']})")


def _status_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("window", "boxes", "phase", "lane", "gate", "progress", "runner", "failsafe", "daily")
    for row in rows:
        runner = f"{row['runner_pid']} ({'alive' if row['runner_alive'] else 'gone'})"
        failsafe = "disarmed"
        if row["armed"]:
            left = row["deadline_wall"] - time.time() if row.get("deadline_wall") else None
            failsafe = f"armed until {row['deadline']}" + (f" (in {_clock(left)})" if left is not None else "")
        if row.get("failsafe_failed"):
            failsafe = f"restore FAILED ({row['failsafe_failed'].get('error', '')[:60]})"
        if row["armed"] and row.get("failsafe_backend") == "engine":
            failsafe += " (on the daily's box)"
        table.add_row(*_cells(row["window"], ", ".join(row.get("boxes") or []) or "-", row["phase"], row["lane"] or "-",
                              row["gate"] or "-", f"{row['gates_done']}/{row['gates_planned']}", runner, failsafe,
                              row["daily"]))
    return table



@app.command()
@one_line_errors
def abort(window: str) -> None:
    """Restore the daily now: stop the runner (orderly) or, if it is gone, restore directly."""
    from campaign.window.status import abort_window

    out.print(abort_window(window))
