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

import signal  # noqa: E402
from typing import Any  # noqa: E402

import click  # noqa: E402

# the commands register on the app as their modules load, in the order `campaign --help` lists them
# isort: off
from campaign.cli import contracts, windows, status, promotion, daily, bundles, machine  # noqa: E402, F401
# isort: on
from campaign.cli._app import _error, app, err  # noqa: E402
from campaign.cli.examples import _examples_in_help  # noqa: E402
from campaign.terminal import styled  # noqa: E402

__all__ = ["app", "main"]

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

