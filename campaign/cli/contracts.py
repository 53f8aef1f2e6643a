"""Commands on contracts before any window: validate, freeze, diff, manifest, schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Column, Table

from campaign.cli._app import ALLOW_PATH_HELP, _allow, _cells, app, err, one_line_errors, out, register_kinds
from campaign.errors import InputError


@app.command()
@one_line_errors
def validate(contract: Path, allow_path: list[Path] = typer.Option([], "--allow-path", help=ALLOW_PATH_HELP)) -> None:
    """Check a contract: schema, references, files, and the one-axis rule."""
    from campaign.cli._app import load_contract
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
    from campaign.cli._app import load_contract
    from campaign.contracts.freeze import freeze as do_freeze
    from campaign.signing import load_signing_key

    path, created = do_freeze(load_contract(contract), load_signing_key(), record)
    out.print(f"{'frozen' if created else 'already frozen, unchanged'}: {path}")


@app.command()
@one_line_errors
def diff(a: Path, b: Optional[Path] = typer.Argument(None),
         lanes: Optional[str] = typer.Option(None, help="Two lanes of contract A, as NAME1,NAME2.")) -> None:
    """Show two contracts, or two lanes of one contract, side by side (only what differs)."""
    from campaign.cli._app import load_contract

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
    register_kinds()
    if reference:
        from campaign.contracts.reference import contract_reference

        sys.stdout.write(contract_reference() + "\n")
        return
    from campaign.contracts.schema import contract_json_schema

    sys.stdout.write(json.dumps(contract_json_schema(), indent=2) + "\n")
