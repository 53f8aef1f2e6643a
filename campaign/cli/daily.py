"""The daily (incumbent) lane by hand: daily show, start, stop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from campaign.cli._app import daily_app, err, one_line_errors, out
from campaign.terminal import shown


@daily_app.command("show")
@one_line_errors
def daily_show(contract: Optional[Path] = typer.Argument(None, help="A contract whose incumbent is the daily.")) -> None:
    """What serves as the daily now: pid, command line, where its log is; and the last promotion."""
    import shlex

    from campaign.cli._app import load_contract
    from campaign.daily.daily import describe_daily, find_daily_pidfile
    from campaign.daily.ledger import Ledger
    from campaign.promotion.promote import unfinished_promotion
    from campaign.signing import load_trusted

    loaded = load_contract(contract) if contract is not None else None
    spec = loaded.contract.incumbent if loaded is not None else None
    if spec is not None and spec.runtime == "docker":
        _show_container_daily(spec)
        return
    pidfile = find_daily_pidfile(loaded)
    if pidfile is None:
        out.print("no daily known: give the contract whose incumbent it is (campaign daily show CONTRACT)")
    else:
        now = describe_daily(pidfile)
        if not now["running"]:
            out.print(f"daily: NOT running (pidfile {pidfile}, pid {now['pid'] or 'none'})")
        else:
            out.print(f"daily: running, pid {now['pid']} (pidfile {pidfile})")
            out.print(f"command: {shlex.join(now['argv'])}")
            out.print(f"log: {now['log'] or 'unknown'}")
    entries = Ledger().verify(load_trusted())
    unfinished = unfinished_promotion(entries)
    if unfinished is not None:
        err.print(f"warning: promotion {unfinished['seq']} of {unfinished.get('candidate')} began {unfinished['at']} and "
                  "never finished; `campaign rollback` puts the previous daily back")
    changes = [entry for entry in entries if "daily" in entry]
    if not changes:
        out.print("no promotion recorded: the daily is the one started by hand")
        return
    last = changes[-1]
    daily = last["daily"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((daily.get("declared_env") or {}).items()))
    out.print(f"last change: {last.get('daily_name') or 'previous daily (rolled back)'} (ledger entry "
              f"{last['seq']}, {last['kind']})")
    out.print("its command (credentials redacted; a rollback record refers to them as ${env:NAME}):")
    sys.stdout.write(shown(((env + " ") if env else "") + shlex.join(daily["argv"])) + "\n")


def _show_container_daily(spec: object) -> None:
    from campaign.daily.daily import describe_container_daily

    now = describe_container_daily(spec)
    if not now["running"]:
        out.print(f"daily container {now['container']}: NOT running ({now['problem']})")
        return
    out.print(f"daily container {now['container']}: running, id {now['container_id']}, image {now['image_id']}, "
              f"restart policy {now['restart_policy'] or 'no'}")
    out.print("started by hand (environment values left out; set them before running it):")
    sys.stdout.write(f"{shown(now['run_by_hand'])}\n")


@daily_app.command("start")
@one_line_errors
def daily_start(contract: Path, log: Path = typer.Option(Path("runs/daily.log"), help="The daily's log.")) -> None:
    """Start the contract's incumbent lane as the daily, detached, unless it already runs."""
    from campaign.cli._app import load_contract
    from campaign.daily.daily import start_daily

    pid, started = start_daily(load_contract(contract), log)
    out.print(f"daily {'started' if started else 'already running'}: pid {pid}")


@daily_app.command("stop")
@one_line_errors
def daily_stop(contract: Optional[Path] = typer.Argument(None, help="A contract whose incumbent is the daily."),
               force: bool = typer.Option(False, "--force", help="Also stop a daily this tool did not start (by hand, "
                                                                 "`docker run`).")) -> None:
    """Stop the daily that `campaign daily start` started (or a container `campaign promote` created), by its
    pid or container. One started otherwise is refused unless --force; so is a daily a window holds."""
    from campaign.cli._app import load_contract
    from campaign.daily.daily import find_daily_pidfile, stop_daily

    loaded = load_contract(contract, check_files=False) if contract is not None else None
    out.print(stop_daily(loaded, find_daily_pidfile(loaded), force=force))
