"""Commands that run windows: run (one or several), plan, resume."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from campaign.cli._app import (
    ALLOW_PATH_HELP,
    EXPLAIN_HELP,
    _allow,
    _cells,
    _clock,
    _print_outcome,
    app,
    one_line_errors,
    out,
)
from campaign.cli.contracts import ACCEPT_DEFAULTS_HELP
from campaign.errors import InputError


@app.command()
@one_line_errors
def run(contracts: list[Path] = typer.Argument(..., metavar="CONTRACT...",
                                               help="One contract; or several, one window each, on separate boxes."),
        out_dir: Path = typer.Option(Path("runs"), "--out", help="Where bundles go."),
        record: Optional[Path] = typer.Option(None, help="Freeze record (default: next to the contract)."),
        detach: bool = typer.Option(False, "--detach", help="Run in the background; print the window id and return."),
        allow_path: list[Path] = typer.Option([], "--allow-path", help=ALLOW_PATH_HELP),
        accept_tool_defaults: bool = typer.Option(False, "--accept-tool-defaults", help=ACCEPT_DEFAULTS_HELP),
        exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 whenever the window completed with its "
                                                                  "daily proven back, whatever it decided (the "
                                                                  "behaviour before exit code 3)."),
        explain: bool = typer.Option(False, "--explain", help=EXPLAIN_HELP),
        window_id: Optional[str] = typer.Option(None, hidden=True)) -> None:
    """Run a window of a frozen contract and write a signed receipt bundle. Several contracts run at once,
    one window per contract, each on its own boxes (the command waits for all).

    Exit codes: 0 the window completed and a candidate is PROMOTABLE; 3 it completed and nothing is
    promotable (refused or inconclusive: the report says why); 1 the window failed (not completed, not
    signed, or the daily's restore not proven); 2 bad input (contract, freeze record, key, argument);
    130 interrupted. --exit-zero: 0 whenever the window completed with its daily proven back. --detach: 0
    once started."""
    if explain and (detach or len(contracts) > 1):  # no end is printed here to put the reasoning under
        raise InputError("--explain takes one window in the foreground; for others: "
                         "campaign promote BUNDLE --candidate NAME --dry-run --explain")
    _allow(allow_path)
    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.run import run_window

    key, trusted = load_signing_key(), load_trusted()
    if len(contracts) > 1:
        _run_several(contracts, out_dir=out_dir, record=record, detach=detach, window_id=window_id, trusted=trusted,
                     accept_tool_defaults=accept_tool_defaults, exit_zero=exit_zero)
        return
    contract = contracts[0]
    if detach:
        from campaign.window.detach import detach_window

        window, bundle, _pid = detach_window(contract, out_dir=out_dir, record=record, trusted=trusted,
                                             accept_tool_defaults=accept_tool_defaults)
        out.print(f"window {window} started in the background; log: {bundle / 'runner.log'}")
        out.print(f"follow it with: campaign status {window}")
        return
    background = window_id is not None
    from campaign.window.progress import WindowProgress

    outcome = run_window(contract, key=key, trusted=trusted, out_dir=out_dir, record_path=record,
                         window_id=window_id, echo=WindowProgress(out), accept_tool_defaults=accept_tool_defaults)
    if not background:
        _print_outcome(outcome.summary, outcome.bundle, explain)
    _exit_as_decided(outcome.summary, outcome.signed, exit_zero)


def _exit_as_decided(summary: dict[str, Any], signed: bool, exit_zero: bool) -> None:
    """`campaign run`'s exit code: what the window decided (campaign/receipts/decision.py has the table)."""
    from campaign.receipts.decision import exit_code, with_exit_zero

    code = with_exit_zero(exit_code(summary, signed=signed), exit_zero)
    if code:
        raise typer.Exit(code)


@app.command()
@one_line_errors
def plan(contract: Path,
         out_dir: Path = typer.Option(Path("runs"), "--out", help="Where bundles go (as `run --out`): earlier "
                                                                 "windows of this contract there are measured."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
         allow_path: list[Path] = typer.Option([], "--allow-path", help=ALLOW_PATH_HELP)) -> None:
    """The window's steps in order with their estimated seconds (measured by earlier windows of this contract
    under --out, else from its sizes), the restore reserve, and the check against failsafe.deadline: `run`
    refuses a window whose minimum cannot fit. Nothing is started or stopped."""
    _allow(allow_path)
    from campaign.cli._app import load_contract
    from campaign.promotion.promote import promoted_daily_summary
    from campaign.window.plan import plan_window

    # the input sets are read (request counts), the models and lane files are not: a contract is planned
    # away from its box too (the stranger's GPU contract, on a laptop); `validate` and `run` check them
    loaded = load_contract(contract, check_files=False)
    shown_plan = plan_window(loaded, out_dir)
    if loaded.contract.incumbent is not None:  # window/ never imports promotion/: the plan's spot filled here
        moved = promoted_daily_summary(loaded)
        shown_plan = shown_plan.model_copy(update={"promotion": "; ".join(moved) if moved else
                                                   "a promoted candidate serves where the daily answers now "
                                                   f"({loaded.contract.incumbent.endpoint}): every candidate "
                                                   "lane listens there"})
    if as_json:
        sys.stdout.write(shown_plan.model_dump_json(indent=2) + "\n")
        return
    _print_plan(shown_plan)


def _print_plan(plan: Any) -> None:
    table = Table("#", "phase", "step", "budget", "seconds", "from")
    rows = [s for s in plan.steps if s.pair is None]
    last_visit = max((i for i, s in enumerate(rows) if s.phase == "visit"), default=None)  # pairs follow it
    by_pair: dict[int, list[Any]] = {}
    for s in plan.steps:
        if s.pair is not None and plan.pairs_at_least < s.pair <= plan.pairs_at_most:
            by_pair.setdefault(s.pair, []).append(s)
    for number, step in enumerate(rows, start=1):
        table.add_row(*_cells(number, step.phase, step.what, f"{step.bound_s:g}s" if step.bound_s else "-",
                              f"{step.seconds:.1f}", step.source))
        if number - 1 == last_visit:
            for pair, steps in sorted(by_pair.items()):
                table.add_row(*_cells("", "pair", f"pair {pair}, only while a comparison is open: "
                                      f"{', '.join(s.lane or '' for s in steps if s.what.startswith('boot'))}",
                                      "-", f"{sum(s.seconds for s in steps):.1f}",
                                      "measured" if all(s.source == "measured" for s in steps) else "sizes"))
    out.print(table)
    pairs = (f" with {plan.pairs_at_least} boot pair(s); {_clock(plan.maximum_s)} with {plan.pairs_at_most}"
             if plan.pairs_at_most > plan.pairs_at_least else "")
    out.print(f"estimate: {_clock(plan.minimum_s)}{pairs}, start to end"
              + (f" (measured by {plan.history[0]})" if plan.history else " (from the contract's sizes)"))
    if plan.reserve is not None:
        r = plan.reserve
        how = (f"{r.times:g} x {r.measured_s:.1f}s, at least {r.floor_s:g}s, at most the daily's readiness "
               f"budget {r.budget_s:g}s" if r.measured_s is not None else "")
        out.print(f"restore reserve: {r.seconds:.0f}s ({r.source}{'; ' + how if how else ''})")
    if plan.deadline_s is not None:
        fits = ("fits" if plan.fits_minimum else "does NOT fit: `campaign run` refuses this window" if plan.refused
                else "does not fit by the assumed rates: `campaign run` goes ahead, and the failsafe restores the "
                     "daily at the deadline")
        out.print(f"deadline {_clock(plan.deadline_s)}: the minimum ({_clock(plan.deadline_minimum_s)}: take-down, "
                  f"visits, restore) {fits}; with every pair and the reserve {_clock(plan.deadline_maximum_s)}: "
                  f"{plan.pairs_fit} of {plan.pairs_at_most} pair(s) fit")
    for line in plan.assumptions:
        out.print(line)
    if plan.promotion:
        out.print(f"promotion: {plan.promotion}")


def _run_several(contracts: list[Path], *, out_dir: Path, record: Optional[Path], detach: bool,
                 window_id: Optional[str], trusted: Any, accept_tool_defaults: bool, exit_zero: bool) -> None:
    from campaign.receipts.decision import several_exit_code, with_exit_zero
    from campaign.window.several import run_several

    if record is not None or detach or window_id is not None:
        raise InputError("--record and --detach take one contract (several contracts use their own records and "
                         "are waited for; follow them with `campaign status`)")

    def show(lines: list[str]) -> None:
        for line in lines:
            out.print(line)

    outcomes = run_several(contracts, out_dir=out_dir, trusted=trusted, show=show,
                           accept_tool_defaults=accept_tool_defaults)
    table = Table("contract", "window", "signed", "daily", "decisions", "bundle")
    daily = {True: "proven back", None: "not stopped", False: "NOT proven back"}
    for item in outcomes:
        decisions = ", ".join(f"{name}: {overall}" for name, overall in item["decisions"].items()) or "-"
        table.add_row(*_cells(item["contract"], item["window"], "yes" if item["signed"] else "NO",
                              daily[item["restored"]], decisions, item["bundle"]))
    out.print(table)
    code = with_exit_zero(several_exit_code([item["exit_code"] for item in outcomes]), exit_zero)
    if code:
        raise typer.Exit(code)


@app.command()
@one_line_errors
def resume(window: str,
           accept_tool_defaults: bool = typer.Option(False, "--accept-tool-defaults", help=ACCEPT_DEFAULTS_HELP),
           explain: bool = typer.Option(False, "--explain", help=EXPLAIN_HELP)) -> None:
    """Continue a crashed or killed window from its journal (finished gates are not re-run)."""
    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.progress import WindowProgress
    from campaign.window.resume import resume_window

    outcome = resume_window(window, key=load_signing_key(), trusted=load_trusted(), echo=WindowProgress(out),
                            accept_tool_defaults=accept_tool_defaults)
    _print_outcome(outcome.summary, outcome.bundle, explain)
    if not outcome.signed:
        raise typer.Exit(1)
