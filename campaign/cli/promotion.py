"""Promotion from verified receipts: promote, rollback, ledger."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from campaign.cli._app import _cells, app, err, one_line_errors, out, register_kinds


@app.command()
@one_line_errors
def promote(bundle: Path, candidate: Optional[str] = typer.Option(None, help="Candidate lane to promote."),
            dry_run: bool = typer.Option(False, "--dry-run", help="Run every check the promotion runs, show its steps and the new daily's command; change nothing."),
            trust: list[Path] = typer.Option([], help="Also trust this public key file."),
            explain: bool = typer.Option(False, "--explain", help="Under a refused gate's headline, its full reasoning.")) -> None:
    """Promote a candidate to daily from a verified bundle whose required gates all PASS."""
    from campaign.promotion.promote import promote as do_promote

    register_kinds()
    from campaign.signing import load_signing_key, load_trusted

    key = load_signing_key()  # a dry run too: the promotion would need it to record itself
    decision, steps, entry = do_promote(bundle, key=None if dry_run else key, trusted=load_trusted(trust),
                                        candidate=candidate, dry_run=dry_run)
    if not decision.ok and entry is None:
        for reason in decision.refusals:
            err.print(f"refused: {reason}")
        for gate, reasons in decision.explained.items() if explain else ():
            err.print(f"{gate}, in full:")
            for reason in reasons:
                err.print(f"  - {reason}")
        if decision.explained and not explain:
            err.print("(--explain: each refused gate's full reasoning)")
        raise typer.Exit(1)
    if dry_run:
        out.print(f"would promote {decision.candidate} from {bundle}:")
        for number, step in enumerate(steps, 1):
            out.print(f"  {number}. {step}")
        return
    if decision.refusals:  # promoted, smoke failed, rolled back
        for reason in decision.refusals:
            err.print(f"promotion undone: {reason}")
        raise typer.Exit(1)
    assert entry is not None
    out.print(f"promoted {decision.candidate} (ledger entry {entry['seq']}); smoke: "
              f"{entry['smoke']['greedy_replayed']} greedy replies replayed byte-identical")


@app.command()
@one_line_errors
def rollback() -> None:
    """Restore the previous daily from the ledger, prove it, record it."""
    from campaign.promotion.promote import rollback as do_rollback

    register_kinds()
    from campaign.signing import load_signing_key

    entry = do_rollback(key=load_signing_key())
    proof = entry["proof"]
    serving = (f"daily container {entry['container']} ({str(proof.get('container_id'))[:12]})" if "container" in entry
               else f"daily pid {proof['pid']}")
    out.print(f"rolled back promotion {entry['undoes']} (ledger entry {entry['seq']}); {serving}")


@app.command()
@one_line_errors
def ledger(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Show the ledger of promotions and rollbacks, after checking its chain and signatures."""
    from campaign.daily.ledger import Ledger
    from campaign.signing import load_trusted

    entries = Ledger().verify(load_trusted())
    if as_json:
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
        return
    table = Table("seq", "kind", "at", "who", "lane", "from")
    for entry in entries:
        lane = (entry.get("daily_name") or entry.get("candidate") or f"undo {entry.get('undoes')}"
                if entry["kind"] != "rollback" else f"undo {entry.get('undoes')}")
        table.add_row(*_cells(entry["seq"], entry["kind"], entry["at"], entry["who"], lane,
                              Path(entry.get("bundle", "-")).name))
    out.print(table if entries else "the ledger is empty")
