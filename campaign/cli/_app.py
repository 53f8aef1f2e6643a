"""The typer app, its groups, the two consoles and what every command shares: one-line errors, path checks."""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
import typer
from rich.text import Text

from campaign.errors import CampaignError, InputError
from campaign.terminal import console, shown, styled

if TYPE_CHECKING:
    from campaign.contracts.load import LoadedContract

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


def register_kinds() -> None:
    """Every gate and engine kind registered, so the contract schema knows them: a command that reads a contract
    calls this first (imported here, not at start, so that `campaign --help` does not pay for every gate)."""
    import campaign.gates.registry  # noqa: F401


def load_contract(path: Path, **options: Any) -> "LoadedContract":
    """``contracts.load.load_contract``, once every kind is registered."""
    register_kinds()
    from campaign.contracts.load import load_contract as load

    return load(path, **options)


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


def _print_version(shown_now: bool) -> None:
    if shown_now:
        from campaign import __version__

        out.print(f"campaign {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")) -> None:
    """Frozen-contract experiment windows for LLM inference serving."""


EXPLAIN_HELP = "Under each candidate's headline, its deciding gate's full reasoning."


def _print_outcome(summary: dict[str, Any], bundle: Path, explain: bool = False) -> None:
    # one line for the daily, one per candidate (decision, headline, what to do first), then the bundle
    from campaign.window.progress import outcome_lines

    for line in outcome_lines(summary, bundle, explain=explain):
        out.print(line)


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
