"""The CLI's face: every command's --help reads as plain help (no "<bool>" types, no "{contract}"
arguments, no "--no-no-..." flags) and every option says what it does."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

COMMANDS = ["validate", "freeze", "diff", "schema", "run", "resume", "status", "abort", "promote", "rollback",
            "ledger", "verify", "publish", "rejudge", "cleanup", "doctor", "keys init", "daily show", "daily start"]


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
