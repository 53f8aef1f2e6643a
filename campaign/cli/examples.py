"""One example per command, shown at the end of its --help (typer's epilog)."""

from __future__ import annotations

from campaign.cli._app import app

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
