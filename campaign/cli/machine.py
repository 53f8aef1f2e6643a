"""This machine and its engines: cleanup, doctor, keys, the periodic failsafe check."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from campaign.cli._app import _cells, app, failsafe_app, keys_app, one_line_errors, out


@app.command()
@one_line_errors
def cleanup(window: Optional[str] = typer.Option(None, help="Only containers of this window id."),
            contract: Optional[str] = typer.Option(None, help="Only containers of this contract hash."),
            docker_host: Optional[str] = typer.Option(None, help="Engine URL (default: DOCKER_HOST)."),
            engines_of: Optional[Path] = typer.Option(None, "--engines-of", help="Every engine this contract "
                                                      "names (its lanes' and its daily's), with their TLS and ssh "
                                                      "settings."),
            remove: bool = typer.Option(False, "--remove", help="Stop and remove them (default: only list).")) -> None:
    """List (or remove) containers left by windows: lanes and stale box watchdogs, found by their campaign.*
    labels. A watchdog whose window is still armed on this machine is never listed."""
    from campaign.cli._app import load_contract
    from campaign.window.orphans import engines_to_sweep, leftover_containers, remove_leftover

    loaded = load_contract(engines_of, check_files=False) if engines_of is not None else None
    table = Table("engine", "container", "lane", "window", "status")
    count = 0
    for where, client, item in leftover_containers(engines_to_sweep(loaded, docker_host), window=window,
                                                   contract=contract):
        table.add_row(*_cells(where, item["name"], item["lane"] or "-", item["window"] or "-", item["status"] or "-"))
        if remove:
            remove_leftover(client, item)
        count += 1
    out.print(table if count else "no campaign containers")
    if remove and count:
        out.print(f"removed {count}")


@app.command()
@one_line_errors
def doctor(contract: Optional[Path] = typer.Argument(None, help="Also check this contract's engines, models "
                                                                 "and ports."),
           out_dir: Path = typer.Option(Path("runs"), "--out", help="Where bundles will go (free disk)."),
           no_smoke: bool = typer.Option(False, "--no-smoke", help="Find engines without starting them.")) -> None:
    """Check what a window needs before it runs: each engine starts and serves here, model digests, ports,
    the Docker engine, the signing key, the failsafe, free disk. One line per check; exit 1 if any fails."""
    from campaign.cli._app import load_contract
    from campaign.window.doctor import run_checks

    loaded = load_contract(contract) if contract is not None else None
    checks = run_checks(loaded, out_dir, smoke=not no_smoke)
    for check in checks:
        out.print(check.line())
    failed, warned = [c for c in checks if not c.ok], [c for c in checks if c.warn]
    out.print(f"{len(checks) - len(failed)}/{len(checks)} checks passed"
              + (f", {len(warned)} with a warning" if warned else ""))
    if failed:
        raise typer.Exit(1)


@keys_app.command("init")
@one_line_errors
def keys_init(force: bool = typer.Option(False, "--force", help="Replace an existing key.")) -> None:
    """Make a signing key pair under the config directory (kept if one exists)."""
    from campaign.signing import config_dir, init_keys, load_signing_key

    path = init_keys(force=force)
    out.print(f"signing key: {path} (key id {load_signing_key().keyid}); public key: {config_dir() / 'signing.pub'}")


@failsafe_app.command("install")
@one_line_errors
def failsafe_install(show: bool = typer.Option(False, "--print", help="Print the crontab line; install nothing."),
                     remove: bool = typer.Option(False, "--remove", help="Remove the line installed before.")) -> None:
    """Install the periodic check: one line in this user's crontab that runs `campaign failsafe check` every
    minute, so a window whose runner and watchdogs are all killed gets its daily back with no command typed.
    Needs a cron daemon running (where systemd runs, its timer already guards each window)."""
    from campaign.window.orphans import install_periodic_check

    for line in install_periodic_check(remove=remove, show=show):
        out.print(line)


@failsafe_app.command("check")
@one_line_errors
def failsafe_check() -> None:
    """What the periodic check runs: restore the daily of every window whose deadline passed or whose runner
    and watchdogs are all gone. Silent when there is nothing to do; exit 1 if a restore failed."""
    from campaign.window.orphans import periodic_check

    lines, failed = periodic_check()
    for line in lines:
        out.print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}")
    if failed:
        raise typer.Exit(1)
