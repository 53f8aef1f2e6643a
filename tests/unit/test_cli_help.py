"""The CLI's face: every command's --help reads as plain help (no "<bool>" types, no "{contract}"
arguments, no "--no-no-..." flags) and every option says what it does."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

COMMANDS = ["validate", "freeze", "diff", "schema", "plan", "manifest", "run", "resume", "status", "abort", "promote",
            "rollback", "ledger", "verify", "publish", "rejudge", "cleanup", "doctor", "keys init", "daily show",
            "daily start", "daily stop", "failsafe install", "failsafe check"]


@functools.cache  # two tests read each command's help; one interpreter start each (about 0.5 s) is enough
def help_text(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "campaign.cli", *command.split(), "--help"], capture_output=True,
                          text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_plain_and_every_option_is_described(command: str) -> None:
    text = help_text(command)
    assert "<bool>" not in text and "<path>" not in text and not re.search(r"\{[a-z_]+\}", text)
    assert "--no-no-" not in text
    for line in text.splitlines():
        match = re.match(r"^│\s+(--[a-z-]+)(?:,\s*-\w)?\s+(?:[A-Z]+\s+)?(.*?)\s*│$", line)
        if match and match.group(1) != "--help":
            assert match.group(2).strip(), f"{command}: {match.group(1)} has no description"


def test_verify_offers_one_trust_switch() -> None:
    text = help_text("verify")
    assert "--no-local-trust" in text and "Do not trust the local key" in text


def _campaign(*args: str, state: str = "") -> subprocess.CompletedProcess[str]:
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", **({"XDG_STATE_HOME": state} if state else {})}
    return subprocess.run([sys.executable, "-m", "campaign.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("command", ["", "status", "daily", "daily start", "keys init"])
def test_dash_h_is_help_on_every_level(command: str) -> None:
    short = _campaign(*command.split(), "-h")
    assert short.returncode == 0 and short.stdout == help_text(command) and "Usage: " in short.stdout, short.stderr


def test_version_prints_the_tool_version_and_exits_zero() -> None:
    from campaign import __version__

    for flag in ("--version", "-V"):
        done = _campaign(flag)
        assert done.returncode == 0 and done.stdout.strip() == f"campaign {__version__}", done.stderr


def test_status_with_no_window_yet_is_an_answer_not_an_error(tmp_path) -> None:  # noqa: ANN001
    """cron and scripts ask before any window has run: exit 0, and JSON that parses to an empty list."""
    import json

    shown = _campaign("status", state=str(tmp_path))
    assert shown.returncode == 0 and shown.stdout.startswith("no windows yet under "), shown.stderr
    as_json = _campaign("status", "--json", state=str(tmp_path))
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == [], as_json.stderr
    named = _campaign("status", "nosuch", state=str(tmp_path))  # a window asked for by name must exist
    assert named.returncode == 2 and "no window 'nosuch'" in named.stderr


def _every_command() -> list[str]:
    """Every command and group of the CLI, walked from click's tree (a command added later is included)."""
    import typer

    from campaign.cli import app

    found: list[str] = [""]

    def walk(group, prefix: str) -> None:  # noqa: ANN001 - a click group
        for name, command in group.commands.items():
            path = f"{prefix} {name}".strip()
            found.append(path)
            if hasattr(command, "commands"):
                walk(command, path)

    walk(typer.main.get_command(app), "")
    return found


def test_every_command_is_walked() -> None:
    walked = _every_command()
    assert set(COMMANDS) <= set(walked) and "daily stop" in walked


@pytest.mark.parametrize("command", _every_command())
def test_every_help_ends_with_an_example_that_names_the_command(command: str) -> None:
    text = help_text(command)
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("Example: campaign ")]
    assert examples, f"`campaign {command} --help` has no example line"
    needle = f"campaign {command} " if command else "campaign "
    assert any(needle in example + " " for example in examples), (command, examples)
