"""The `campaign` command. Each command parses, calls one function, prints; errors are one line."""

from __future__ import annotations

import os
import sys


def _interrupted_while_starting(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """Ctrl-C before main() can catch it (while typer, rich and the rest are imported): one line and 130."""
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    sys.__excepthook__(kind, value, tb)


# first, before the imports that take most of the start (typer keeps it as the hook it falls back on)
sys.excepthook = _interrupted_while_starting


def _reopen_closed_streams() -> None:
    """A standard stream the caller closed (`campaign validate X >&-`) is None in Python, and the first write or
    isatty() on it raised before any command ran (a traceback; a refusal exited 1, not 2). Such a stream goes to
    the null device instead: what would be printed is lost, as the caller asked, and the exit code is the
    command's own."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115 - lives as long as the process


_reopen_closed_streams()

import errno  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import click  # noqa: E402
import typer  # noqa: E402
from rich.table import Column, Table  # noqa: E402
from rich.text import Text  # noqa: E402

from campaign.errors import CampaignError, InputError  # noqa: E402
from campaign.terminal import console, shown, styled  # noqa: E402

# -h as well as --help, on every command (a click context passes its help option names to its children)
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Frozen-contract experiment windows for LLM inference serving.")
keys_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Signing keys.")
app.add_typer(keys_app, name="keys")
daily_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The daily (incumbent) lane.")
app.add_typer(daily_app, name="daily")
failsafe_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="The supervisor outside the runner's process tree (the periodic check).")
app.add_typer(failsafe_app, name="failsafe")
# One line stays one line, whatever the terminal width; written to a log file or CI (not a terminal),
# tables get a wide page instead of rich's 80 columns, so no metric name or window id is cut to "...".
# Every string printed through them is data (campaign/terminal.py): no markup, no emoji, controls escaped;
# our own styling is a Text (`styled`).
out = console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)
err = console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 240)


def _error(message: object) -> None:
    err.print(styled(("error:", "bold red"), " ", shown(message)), soft_wrap=True)


def _cells(*values: object) -> list[Text]:
    """A table row: every cell is shown text (a Text is ours, kept as it is)."""
    return [value if isinstance(value, Text) else Text(shown(value)) for value in values]


def _paths(kwargs: dict[str, Any]) -> list[Path]:
    found: list[Path] = []
    for value in kwargs.values():
        found.extend(v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, Path))
    return found


def _check_paths(kwargs: dict[str, Any]) -> None:
    """A path argument no system call can take is the user's to fix, named, before any work starts."""
    for path in _paths(kwargs):
        if "\x00" in str(path):
            raise InputError(f"{path}: a path cannot hold a NUL byte")
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):
                raise InputError(f"{path}: {exc.strerror}") from None
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None


_PATH_ERRNOS = {errno.ELOOP, errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES,
                errno.EPERM, errno.EEXIST}


def _input_path(exc: BaseException, kwargs: dict[str, Any]) -> str | None:
    """The user's path an OS or encoding error is about, if it is about one of the command's path arguments."""
    paths = _paths(kwargs)
    if isinstance(exc, OSError):
        if exc.errno not in _PATH_ERRNOS:  # a full disk or a broken device is a failed run, not bad input
            return None
        given = [Path(os.path.abspath(p)) for p in paths]
        for name in (exc.filename, exc.filename2):
            if not isinstance(name, (str, bytes, os.PathLike)):
                continue
            where = Path(os.path.abspath(os.fsdecode(name)))
            if any(where == p or p in where.parents or where in p.parents for p in given):
                return os.fsdecode(name)
        return None
    undecodable = [p for p in paths if "\x00" in str(p) or re.search("[\ud800-\udfff]", str(p))]
    return str(undecodable[0]) if undecodable else None


def one_line_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            _check_paths(kwargs)
            return func(*args, **kwargs)
        except CampaignError as exc:
            _error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except (OSError, UnicodeError, ValueError) as exc:
            path = _input_path(exc, kwargs)
            if path is None:
                raise  # not about the user's path: main() says "internal error" in one line
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            _error(f"{path}: {reason}")
            raise typer.Exit(2) from None
    return wrapper


ALLOW_PATH_HELP = ("Let the contract read files under this folder, outside its own (repeatable; recorded in "
                   "the bundle). Without it, inputs must lie in the contract's folder tree.")


def _allow(paths: list[Path]) -> None:
    """--allow-path reaches every part that loads the contract, the detached runner included."""
    if paths:
        from campaign.contracts.load import ALLOW_PATH_ENV

        os.environ[ALLOW_PATH_ENV] = os.pathsep.join(str(p.resolve()) for p in paths)


@app.command()
@one_line_errors
def validate(contract: Path, allow_path: list[Path] = typer.Option([], "--allow-path", help=ALLOW_PATH_HELP)) -> None:
    """Check a contract: schema, references, files, and the one-axis rule."""
    from campaign.contracts.load import load_contract
    from campaign.promotion.promote import promoted_daily_summary

    _allow(allow_path)
    loaded = load_contract(contract)
    out.print(f"{contract}: valid ({len(loaded.lanes)} lanes, {len(loaded.contract.gates)} gates, "
              f"canonical sha256 {loaded.canonical_sha256})")
    for line in promoted_daily_summary(loaded):  # lane plumbing vs the daily's endpoint: said before a window
        err.print(f"warning: {line}")


@app.command()
@one_line_errors
def freeze(contract: Path, record: Optional[Path] = typer.Option(None, help="Where to write the freeze record."),
           allow_path: list[Path] = typer.Option([], "--allow-path", help=ALLOW_PATH_HELP)) -> None:
    """Freeze a contract: record and sign its canonical hash and every referenced file's sha256."""
    _allow(allow_path)
    from campaign.contracts.freeze import freeze as do_freeze
    from campaign.contracts.load import load_contract
    from campaign.signing import load_signing_key

    path, created = do_freeze(load_contract(contract), load_signing_key(), record)
    out.print(f"{'frozen' if created else 'already frozen, unchanged'}: {path}")


@app.command()
@one_line_errors
def diff(a: Path, b: Optional[Path] = typer.Argument(None),
         lanes: Optional[str] = typer.Option(None, help="Two lanes of contract A, as NAME1,NAME2.")) -> None:
    """Show two contracts, or two lanes of one contract, side by side (only what differs)."""
    from campaign.contracts.load import load_contract

    left = load_contract(a, check_files=False)
    if lanes:
        names = lanes.split(",")
        if len(names) != 2 or any(n not in left.lanes for n in names):
            raise InputError(f"--lanes needs two lane names of {a} ({', '.join(left.lanes)})")
        rows = _side_by_side(left.serving_fields(names[0]), left.serving_fields(names[1]))
        titles = names
    else:
        if b is None:
            raise InputError("give two contracts, or one contract and --lanes A,B")
        right = load_contract(b, check_files=False)
        rows = _side_by_side(_flatten(left.canonical), _flatten(right.canonical))
        titles = [str(a), str(b)]
    table = Table("field", *(Column(header=title) for title in _cells(*titles)))
    for key, x, y in rows:
        table.add_row(*_cells(key, x, y))
    out.print(table if rows else "no differences")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        flat = {}
        for index, item in enumerate(value):
            name = item.get("name") or item.get("id") or item.get("kind") or index
            flat.update(_flatten(item, f"{prefix}[{name}]"))
        return flat
    return {prefix: value}


def _side_by_side(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    show = lambda v: "-" if v is None else json.dumps(v) if not isinstance(v, str) else v  # noqa: E731
    return [(k, show(a.get(k)), show(b.get(k))) for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]


@app.command()
@one_line_errors
def manifest(directory: Path,
             out_file: Optional[Path] = typer.Option(None, "--out", help="Write the manifest here (atomically) and "
                                                                          "print the sha256 to pin; default: stdout.")
             ) -> None:
    """Write a sha256sum-format manifest of a directory's files, to pin it as a model.

    Files in one stable order; a link, a special file or more than 40,000 files are refused. Pin the result:
    models: {draft: {path: DIR, sha256_manifest: FILE, sha256: <printed>}}.
    """
    from campaign.contracts.freeze import directory_manifest
    from campaign.fsutil import atomic_write_bytes

    if out_file is not None and out_file.resolve().is_relative_to(directory.resolve()):
        raise InputError(f"--out {out_file} lies inside {directory}: the manifest would be a file it does not list")
    text, digest, count = directory_manifest(directory)
    if out_file is None:
        sys.stdout.write(text)
        err.print(f"{count} files; sha256 of this manifest: {digest}")
        return
    atomic_write_bytes(out_file, text.encode())
    out.print(f"wrote {out_file}: {count} files of {directory}; pin it as sha256_manifest: {out_file}, "
              f"sha256: {digest}")


ACCEPT_DEFAULTS_HELP = ("Run a contract whose left-out fields this tool's defaults resolve otherwise than when it "
                        "was frozen; the differences are recorded in the bundle and shown in its report.")


@app.command()
def schema(reference: bool = typer.Option(False, "--reference", help="Print the contract reference (markdown: every "
                                                                     "field, type, unit, default and since which "
                                                                     "version), as in docs/contract.md.")) -> None:
    """Print the contract JSON Schema (for editors), or with --reference the contract reference."""
    if reference:
        from campaign.contracts.reference import contract_reference

        sys.stdout.write(contract_reference() + "\n")
        return
    from campaign.contracts.schema import contract_json_schema

    sys.stdout.write(json.dumps(contract_json_schema(), indent=2) + "\n")


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
        window_id: Optional[str] = typer.Option(None, hidden=True)) -> None:
    """Run a window of a frozen contract and write a signed receipt bundle. Several contracts run at once,
    one window per contract, each on its own boxes (the command waits for all).

    Exit codes: 0 the window completed and a candidate is PROMOTABLE; 3 it completed and nothing is
    promotable (refused or inconclusive: the report says why); 1 the window failed (not completed, not
    signed, or the daily's restore not proven); 2 bad input (contract, freeze record, key, argument);
    130 interrupted. --exit-zero: 0 whenever the window completed with its daily proven back. --detach: 0
    once started."""
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
        _print_outcome(outcome.summary, outcome.bundle)
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
    from campaign.contracts.load import load_contract
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
           accept_tool_defaults: bool = typer.Option(False, "--accept-tool-defaults", help=ACCEPT_DEFAULTS_HELP)) -> None:
    """Continue a crashed or killed window from its journal (finished gates are not re-run)."""
    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.progress import WindowProgress
    from campaign.window.resume import resume_window

    outcome = resume_window(window, key=load_signing_key(), trusted=load_trusted(), echo=WindowProgress(out),
                            accept_tool_defaults=accept_tool_defaults)
    _print_outcome(outcome.summary, outcome.bundle)
    if not outcome.signed:
        raise typer.Exit(1)


def _print_version(shown_now: bool) -> None:
    if shown_now:
        from campaign import __version__

        out.print(f"campaign {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")) -> None:
    """Frozen-contract experiment windows for LLM inference serving."""


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


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


@app.command()
@one_line_errors
def abort(window: str) -> None:
    """Restore the daily now: stop the runner (orderly) or, if it is gone, restore directly."""
    from campaign.window.status import abort_window

    out.print(abort_window(window))


@app.command()
@one_line_errors
def promote(bundle: Path, candidate: Optional[str] = typer.Option(None, help="Candidate lane to promote."),
            dry_run: bool = typer.Option(False, "--dry-run", help="Run every check the promotion runs, show its steps and the new daily's command; change nothing."),
            trust: list[Path] = typer.Option([], help="Also trust this public key file.")) -> None:
    """Promote a candidate to daily from a verified bundle whose required gates all PASS."""
    from campaign.promotion.promote import promote as do_promote
    from campaign.signing import load_signing_key, load_trusted

    key = load_signing_key()  # a dry run too: the promotion would need it to record itself
    decision, steps, entry = do_promote(bundle, key=None if dry_run else key, trusted=load_trusted(trust),
                                        candidate=candidate, dry_run=dry_run)
    if not decision.ok and entry is None:
        for reason in decision.refusals:
            err.print(f"refused: {reason}")
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


@daily_app.command("show")
@one_line_errors
def daily_show(contract: Optional[Path] = typer.Argument(None, help="A contract whose incumbent is the daily.")) -> None:
    """What serves as the daily now: pid, command line, where its log is; and the last promotion."""
    import shlex

    from campaign.contracts.load import load_contract
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
    from campaign.contracts.load import load_contract
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
    from campaign.contracts.load import load_contract
    from campaign.daily.daily import find_daily_pidfile, stop_daily

    loaded = load_contract(contract, check_files=False) if contract is not None else None
    out.print(stop_daily(loaded, find_daily_pidfile(loaded), force=force))


def _print_outcome(summary: dict[str, Any], bundle: Path) -> None:
    # one line for the daily, one per candidate (decision, figure, what to do first), then the bundle
    from campaign.window.progress import outcome_lines

    for line in outcome_lines(summary, bundle):
        out.print(line)


@app.command()
@one_line_errors
def verify(bundle: Path, trust: list[Path] = typer.Option([], help="Also trust this public key file."),
           no_local_trust: bool = typer.Option(False, "--no-local-trust", help="Do not trust the local key by default.")) -> None:
    """Verify a receipt bundle: exact file set, every digest, signature by a trusted key."""
    from campaign.receipts.bundle import verify_bundle
    from campaign.receipts.publish import unpacked_archive
    from campaign.signing import load_trusted

    trusted = load_trusted(trust, include_local=not no_local_trust)
    if bundle.is_file():
        with unpacked_archive(bundle) as target:  # removed whatever the verdict
            verified = verify_bundle(target, trusted)
    else:
        verified = verify_bundle(bundle, trusted)
    out.print(f"verified: {bundle} ({verified.files} files, signed by {verified.keyid[:16]})")


@app.command()
@one_line_errors
def publish(bundle: Path, out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write the report."),
            index: Optional[Path] = typer.Option(None, "--index", help="Publish into this folder's history of "
                                                                       "windows (index.html, index.json) instead."),
            trust: list[Path] = typer.Option([], help="Also trust this public key file.")) -> None:
    """Render a verified bundle: report.html (static, no network), SUMMARY.md, and a .tar.gz of the bundle; with
    --index, into a folder that lists every window published into it, with the control's figures over time."""
    from campaign.fsutil import load_json_strict
    from campaign.receipts.bundle import verify_bundle
    from campaign.receipts.decision import decisions
    from campaign.signing import load_trusted
    from campaign.window.report import publish as do_publish
    from campaign.window.report import publish_into_index

    if index is not None and out_dir is not None:
        raise InputError("--out and --index: give one (the index places the report itself)")
    if index is not None:
        written = publish_into_index(bundle, index, load_trusted(trust))
    else:
        verify_bundle(bundle, load_trusted(trust))
        written = do_publish(bundle, out_dir)
    for kind, path in written.items():
        out.print(f"{kind}: {path}")
    for decision in decisions(load_json_strict(bundle / "SUMMARY.json")):  # the report's first lines
        deciding = f"{decision.gate}: " if decision.gate else ""
        out.print(f"{decision.candidate}: {decision.decision}: {deciding}{decision.reason[:200]}")


@app.command("index")
@one_line_errors
def index_command(folder: Path, trust: list[Path] = typer.Option([], help="Also trust this public key file.")) -> None:
    """Build a history of windows (`publish --index`) again from its archives alone: each verified again, its
    entry derived again; one that does not verify leaves the index. The same archives give the same page."""
    from campaign.signing import load_trusted
    from campaign.window.report import rebuild_index

    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    written, left = rebuild_index(folder, load_trusted(trust))
    for line in left:
        err.print(line)
    for kind, path in written.items():
        out.print(f"{kind}: {path}")


@app.command()
@one_line_errors
def rejudge(bundle: Path,
            out_dir: Optional[Path] = typer.Option(None, "--out", help="Parent folder of the new bundle "
                                                                      "(default: next to BUNDLE)."),
            trust: list[Path] = typer.Option([], help="Also trust this public key file."),
            with_current_defaults: bool = typer.Option(
                False, "--with-current-defaults", help="Sign the judgement by this tool's defaults where they differ "
                                                       "from the rules the window was judged by (recorded in the new "
                                                       "bundle); without it those rules are kept and the difference "
                                                       "only shown.")) -> None:
    """Judge a verified bundle again with this version of the tool, by the rules the window was judged by, into a
    new signed bundle; show what changed, and what this tool's defaults would decide where they differ."""
    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.rejudge import rejudge as do_rejudge

    done = do_rejudge(bundle, key=load_signing_key(), trusted=load_trusted(trust), out_dir=out_dir,
                      with_current_defaults=with_current_defaults)
    for item in done.verdicts:
        change = f"  changed: {item.before or 'none'} -> {item.after}" if item.changed else ""
        out.print(f"{item.gate}/{item.candidate}: {item.after}{change}")
    if not any(item.changed for item in done.verdicts):
        out.print("no verdict changed")
    for line in done.read_as:
        out.print(f"read in today's terms: {line}")
    if done.rules == "recorded none":
        out.print("rules: the bundle records no effective contract (written before they were): this tool's defaults")
    elif done.rule_changes:
        window_rules = "the rules the window was judged by"
        signed, other = (("this tool's defaults", window_rules) if done.rules == "this tool's defaults"
                         else (window_rules, "this tool's defaults"))
        out.print(f"rules: signed by {signed}; this tool's defaults differ in {len(done.rule_changes)} field(s):")
        for line in done.rule_changes:
            out.print(f"  {line}")
        for item in done.under_current_defaults:
            verdict = f"{item.after}" + (f" (signed: {item.before})" if item.changed else " (the same)")
            out.print(f"  by {other}: {item.gate}/{item.candidate}: {verdict}")
    out.print(f"bundle: {done.bundle}")


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
    from campaign.contracts.load import load_contract
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
    from campaign.contracts.load import load_contract
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


# One example per command, shown at the end of its --help (typer's epilog). Kept here, apart from the
# commands, so a command added elsewhere adds one line; tests/unit/test_cli_help.py walks every command
# and fails on one whose help has no example naming it.
COMMAND_EXAMPLES = {
    "": "campaign validate examples/demo.yaml && campaign freeze examples/demo.yaml && campaign run examples/demo.yaml",
    "validate": "campaign validate examples/demo.yaml",
    "freeze": "campaign freeze examples/demo.yaml --record runs/freeze/demo.freeze.json",
    "diff": "campaign diff examples/demo.yaml --lanes baseline,threads-2",
    "schema": "campaign schema > contract.schema.json   (or: campaign schema --reference > docs/contract.md)",
    "run": "campaign run examples/demo.yaml --out runs; echo $?   (0 promotable, 3 nothing promotable, 1 failed)",
    "resume": "campaign resume 20260102T030000Z-demo-smollm2-ngram-spec-v4-ab12cd34",
    "status": "campaign status --json   (or: campaign status WINDOW --watch)",
    "abort": "campaign abort 20260102T030000Z-demo-smollm2-ngram-spec-v4-ab12cd34",
    "promote": "campaign promote runs/BUNDLE --candidate threads-2 --dry-run",
    "rollback": "campaign rollback",
    "ledger": "campaign ledger --json",
    "verify": "campaign verify runs/BUNDLE --trust other-box.pub",
    "publish": "campaign publish runs/BUNDLE --index site/",
    "index": "campaign index site/",
    "rejudge": "campaign rejudge runs/BUNDLE --out rejudged/",
    "cleanup": "campaign cleanup --engines-of examples/demo-docker.yaml --remove",
    "doctor": "campaign doctor examples/demo.yaml --no-smoke",
    "keys": "campaign keys init",
    "keys init": "campaign keys init",
    "daily": "campaign daily show examples/demo.yaml",
    "daily show": "campaign daily show examples/demo.yaml",
    "daily start": "campaign daily start examples/demo.yaml --log runs/daily.log",
    "daily stop": "campaign daily stop examples/demo.yaml",
    "plan": "campaign plan examples/demo.yaml --out runs",
    "manifest": "campaign manifest /srv/models/EAGLE3-LLaMA3.1-8B --out manifests/eagle3.sha256",
    "failsafe": "campaign failsafe install --print",
    "failsafe install": "campaign failsafe install --print",
    "failsafe check": "campaign failsafe check",
}


def _examples_in_help() -> None:
    app.info.epilog = f"Example: {COMMAND_EXAMPLES['']}"
    for group in app.registered_groups:
        assert group.typer_instance is not None  # every group here is a Typer added by add_typer
        group.typer_instance.info.epilog = f"Example: {COMMAND_EXAMPLES.get(group.name or '', '')}"
        for info in group.typer_instance.registered_commands:
            command = f"{group.name} {info.name or getattr(info.callback, '__name__', '')}"
            info.epilog = info.epilog or f"Example: {COMMAND_EXAMPLES.get(command, '')}"
    for info in app.registered_commands:
        name = str(info.name or getattr(info.callback, "__name__", ""))
        info.epilog = info.epilog or f"Example: {COMMAND_EXAMPLES.get(name, '')}"


_examples_in_help()


def _restore_orphans() -> None:
    # Whatever the command, a window whose deadline passed, or whose runner and failsafe were killed
    # together, gets its daily back first: nobody else is left to do it.
    try:
        from campaign.window.orphans import restore_orphaned_windows

        for line in restore_orphaned_windows():
            err.print(styled(("restored:", "bold yellow"), " ", line))
    except Exception as exc:  # never a traceback before the command the user asked for
        err.print(f"error: checking for orphaned windows: {exc}")


def _last_words(exc: BaseException) -> int:
    """What escaped every command's own handling, in one line; the exit code."""
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        err.print("interrupted")
        return 130
    if isinstance(exc, click.ClickException):  # a usage error: it quotes what was typed
        context = getattr(exc, "ctx", None)
        see = f" (see `{context.command_path} --help`)" if context is not None else ""
        _error(f"{exc.format_message()}{see}")
        return exc.exit_code
    typed = [arg for arg in sys.argv[1:] if "\x00" in arg]  # click's Path type stats an argument as it reads it
    if isinstance(exc, ValueError) and typed:
        _error(f"{typed[0]}: an argument cannot hold a NUL byte")
        return 2
    hint = " (run with CAMPAIGN_DEBUG=1 for the traceback)"
    if isinstance(exc, OSError):  # the machine, not the code: a full disk, a device gone
        _error(f"{exc}{hint}")
    else:  # a bug: one line here; the traceback on request
        err.print(f"internal error: {type(exc).__name__}: {exc}{hint}")
    return 1


def main() -> None:
    """The console script. Nothing reaches the terminal as a traceback unless CAMPAIGN_DEBUG is set."""
    try:
        if sys.argv[1:3] != ["failsafe", "check"]:  # the check is the sweep itself: once is enough
            _restore_orphans()
        code = app(standalone_mode=False)
    except Exception as exc:
        if os.environ.get("CAMPAIGN_DEBUG") and not isinstance(exc, click.ClickException):
            raise
        code = _last_words(exc)
    except KeyboardInterrupt as exc:
        code = _last_words(exc)
    if getattr(sys.modules.get("__main__"), "main", None) is main:
        # the program (the console script, `python -m campaign.cli`), not a host calling main() in its process,
        # which must keep its own Ctrl-C: the outcome is said, and a Ctrl-C from here on could only interrupt
        # the interpreter's exit (an atexit callback), which Python prints as a traceback the status never shows
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
