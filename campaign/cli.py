"""The `campaign` command. Each command parses, calls one function, prints; errors are one line."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from campaign.errors import CampaignError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Frozen-contract experiment windows for LLM inference serving.")
keys_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Signing keys.")
app.add_typer(keys_app, name="keys")
out = Console()
err = Console(stderr=True)


def one_line_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CampaignError as exc:
            err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
    return wrapper


@app.command()
@one_line_errors
def validate(contract: Path) -> None:
    """Check a contract: schema, references, files, and the one-axis rule."""
    from campaign.contracts.load import load_contract

    loaded = load_contract(contract)
    out.print(f"{contract}: valid ({len(loaded.lanes)} lanes, {len(loaded.contract.gates)} gates, "
              f"canonical sha256 {loaded.canonical_sha256})")


@app.command()
@one_line_errors
def freeze(contract: Path, record: Optional[Path] = typer.Option(None, help="Where to write the freeze record.")) -> None:
    """Freeze a contract: record and sign its canonical hash and every referenced file's sha256."""
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
    from campaign.contracts.resolve import flatten_serving
    from campaign.errors import InputError

    left = load_contract(a, check_files=False)
    if lanes:
        names = lanes.split(",")
        if len(names) != 2 or any(n not in left.lanes for n in names):
            raise InputError(f"--lanes needs two lane names of {a} ({', '.join(left.lanes)})")
        rows = _side_by_side(flatten_serving(left.lanes[names[0]]), flatten_serving(left.lanes[names[1]]))
        titles = names
    else:
        if b is None:
            raise InputError("give two contracts, or one contract and --lanes A,B")
        right = load_contract(b, check_files=False)
        rows = _side_by_side(_flatten(left.canonical), _flatten(right.canonical))
        titles = [str(a), str(b)]
    table = Table("field", *titles)
    for key, x, y in rows:
        table.add_row(key, x, y)
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
def schema() -> None:
    """Print the contract JSON Schema (for editors)."""
    from campaign.contracts.schema import Contract

    sys.stdout.write(json.dumps(Contract.model_json_schema(), indent=2) + "\n")


@app.command()
@one_line_errors
def run(contract: Path, out_dir: Path = typer.Option(Path("runs"), "--out", help="Where bundles go."),
        record: Optional[Path] = typer.Option(None, help="Freeze record (default: next to the contract).")) -> None:
    """Run a window of a frozen contract and write a signed receipt bundle."""
    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.run import run_window

    outcome = run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=out_dir,
                         record_path=record)
    _print_outcome(outcome.summary, outcome.bundle)
    if not outcome.signed:
        raise typer.Exit(1)


def _print_outcome(summary: dict[str, Any], bundle: Path) -> None:
    table = Table("candidate", "gate", "verdict", "evidence", title=f"window {summary['window']}")
    for candidate, entry in summary["candidates"].items():
        for gate, result in entry["gates"].items():
            evidence = "; ".join(result["reasons"][:3])
            colour = {"PASS": "green", "FAIL": "red"}.get(result["verdict"], "yellow")
            table.add_row(candidate, gate, f"[{colour}]{result['verdict']}[/]", evidence)
        table.add_row(candidate, "[b]promotion gates[/]", f"[b]{entry['overall']}[/]", "")
    out.print(table)
    for name, lane in summary["lanes"].items():
        if lane["status"] != "ran":
            out.print(f"lane {name}: {lane['status']} ({lane['cause']}): {lane['message']}")
    for warning in summary.get("warnings", []):
        out.print(f"[bold red]WARNING:[/] {warning}")
    out.print(f"bundle: {bundle}")


@app.command()
@one_line_errors
def verify(bundle: Path, trust: list[Path] = typer.Option([], help="Also trust this public key file."),
           no_local_trust: bool = typer.Option(False, help="Do not trust the local key by default.")) -> None:
    """Verify a receipt bundle: exact file set, every digest, signature by a trusted key."""
    from campaign.receipts.bundle import verify_bundle
    from campaign.signing import load_trusted

    verified = verify_bundle(bundle, load_trusted(trust, include_local=not no_local_trust))
    out.print(f"verified: {bundle} ({verified.files} files, signed by {verified.keyid[:16]})")


@keys_app.command("init")
@one_line_errors
def keys_init(force: bool = typer.Option(False, help="Replace an existing key.")) -> None:
    """Make a signing key pair under the config directory (kept if one exists)."""
    from campaign.signing import config_dir, init_keys, load_signing_key

    path = init_keys(force=force)
    out.print(f"signing key: {path} (key id {load_signing_key().keyid}); public key: {config_dir() / 'signing.pub'}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
