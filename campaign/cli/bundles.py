"""Commands on signed bundles: verify, publish, index, rejudge."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from campaign.cli._app import app, err, one_line_errors, out
from campaign.errors import InputError


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
    from campaign.receipts.bundle import verify_bundle
    from campaign.signing import load_trusted
    from campaign.window.report import load_report_data, publish_into_index
    from campaign.window.report import publish as do_publish

    if index is not None and out_dir is not None:
        raise InputError("--out and --index: give one (the index places the report itself)")
    if index is not None:
        written, data = publish_into_index(bundle, index, load_trusted(trust))
    else:
        verify_bundle(bundle, load_trusted(trust))
        data = load_report_data(bundle)
        written = do_publish(bundle, out_dir, data)
    for kind, path in written.items():
        out.print(f"{kind}: {path}")
    for decision in data["decisions"]:  # the report's first lines, decided once with it
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
