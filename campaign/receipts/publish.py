"""Publishing a bundle: a static HTML report, a Markdown summary and a .tar.gz archive.

Everything is rendered from the bundle's own files (SUMMARY.json, gates/*/*.json, lanes/*), so a
report can be re-rendered later and shows nothing the bundle does not hold. The HTML needs no network:
styles inline, plots as inline SVG (matplotlib, ``plots.py``), jinja2 autoescape on. It opens with the
decision per candidate (``decision.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from jinja2 import Environment, PackageLoader

from campaign.errors import InputError
from campaign.fsutil import atomic_write_bytes, load_json_strict
from campaign.receipts.decision import decisions
from campaign.receipts.plots import plots_for

__all__ = ["archive_bundle", "load_report_data", "publish", "render_html", "render_markdown", "unpacked_archive"]


def load_report_data(bundle: Path) -> dict[str, Any]:
    summary = load_json_strict(bundle / "SUMMARY.json")
    gates: list[dict[str, Any]] = []
    for path in sorted((bundle / "gates").glob("*/*.json")):
        gates.append(load_json_strict(path))
    lanes = {}
    for lane_dir in sorted((bundle / "lanes").iterdir()) if (bundle / "lanes").exists() else []:
        failure = lane_dir / "launch_failure.txt"
        lanes[lane_dir.name] = {"failure": failure.read_text(errors="replace")[:4000] if failure.exists() else None}
    return {"summary": summary, "gates": gates, "lanes": lanes, "bundle": bundle.name}


def _table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns and not isinstance(row[key], (dict, list)):
                columns.append(key)
    return {"columns": columns, "rows": [[row.get(c) for c in columns] for row in rows]}


def _detail_tables(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-item evidence of any gate: each list of records becomes a table, in the bundle's own words."""
    tables = []
    for name, value in details.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables.append({"name": name, **_table(value)})
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            tables.append({"name": name, **_table([{"key": k, **v} for k, v in value.items()])})
    return tables


SHARED = 0o644  # published files are for others to read; keys and private state stay 0600

_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "[": "\\[",
                             "]": "\\]", "*": "\\*", "_": "\\_", "\n": " ", "\r": " "})


def md_escape(value: Any) -> Any:
    """Bundle text in Markdown: viewers render raw HTML and links, and a pipe breaks a table row."""
    return value.translate(_MD_ESCAPES) if isinstance(value, str) else value


def quantity(metric: dict[str, Any]) -> str:
    """A metric as a person reads it: "7/8 prompts" for a count, "0.0161 nats (n = 28)" for a measure."""
    value, unit, n = metric.get("value"), metric.get("unit") or "", metric.get("denominator")
    if value is None:
        return f"not measured ({unit})" if unit else "not measured"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value} {unit}".strip()
    if isinstance(value, int) and n is not None:
        return f"{value}/{n} {unit}".strip()
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{shown} {unit}".strip() + (f" (n = {n})" if n is not None else "")


def _environment(*, html: bool = True) -> Environment:
    # autoescape is on for HTML unconditionally: bundle text (model output, boot logs) is untrusted; in
    # Markdown every value printed is escaped the Markdown way
    env = Environment(loader=PackageLoader("campaign.receipts", "templates"), autoescape=html,
                      trim_blocks=True, lstrip_blocks=True, finalize=None if html else md_escape)
    env.filters["quantity"] = quantity
    return env


def render_html(data: dict[str, Any]) -> str:
    gates = [{**g, "tables": _detail_tables(g.get("details") or {}), "plots": plots_for(g)} for g in data["gates"]]
    return _environment().get_template("report.html.j2").render(**data, gate_views=gates,
                                                                  decisions=decisions(data["summary"]))


def render_markdown(data: dict[str, Any]) -> str:
    return _environment(html=False).get_template("summary.md.j2").render(
        **data, decisions=decisions(data["summary"]), headlines=_headlines(data["gates"]))


def _headlines(gates: list[dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per candidate, the figures a decision rests on, with their CIs and denominators: the speed change per
    level, and every gate's first metric."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for gate in gates:
        rows = out.setdefault(str(gate.get("candidate")), [])
        if gate.get("kind") == "speed":
            for level, entry in ((gate.get("details") or {}).get("levels") or {}).items():
                est = entry.get("estimate")
                if est:
                    rows.append((f"{gate['gate']} C{level}", {
                        "value": f"{est['change']:+.1%} [{est['confidence']:.1%} CI {est['low']:+.1%}, {est['high']:+.1%}]",
                        "unit": f"{gate['rule'].get('metric', '')}, {est['boots']} boots, {est['prompts']} prompts"}))
            continue
        metrics = gate.get("metrics") or {}
        rows += [(f"{gate['gate']} {name}", metrics[name]) for name in _HEADLINE.get(str(gate.get("kind")), ())
                 if name in metrics]
    return out


# the metric(s) each kind's rule weighs: what a reader of the summary wants beside the verdict
_HEADLINE = {"greedy": ("self_identical",), "teacher_forced": ("sites", "noninferiority_max"), "kl": ("kl_mean",),
             "task": ("losses", "loss_upper_bound"), "needle": ("highest_rung_passed",), "structured": ("correct",),
             "tools": ("passed",), "ruler": ("observables_differing",)}


def archive_bundle(bundle: Path, target: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(bundle.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise InputError(f"{path}: only regular files and directories are archived")
            tar.add(path, arcname=f"{bundle.name}/{path.relative_to(bundle).as_posix()}", recursive=False)
    atomic_write_bytes(target, buffer.getvalue(), mode=SHARED)
    return target


def publish(bundle: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """report.html, SUMMARY.md and <bundle>.tar.gz, written beside (not inside) the signed bundle."""
    out_dir = out_dir or bundle.parent / f"{bundle.name}.published"
    data = load_report_data(bundle)
    html = out_dir / "report.html"
    markdown = out_dir / "SUMMARY.md"
    atomic_write_bytes(html, render_html(data).encode(), mode=SHARED)
    atomic_write_bytes(markdown, render_markdown(data).encode(), mode=SHARED)
    archive = archive_bundle(bundle, out_dir / f"{bundle.name}.tar.gz")
    return {"html": html, "markdown": markdown, "archive": archive}


# An archive is refused, unread, past these: a bundle is raw records and logs, not gigabytes.
def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() else default


MAX_UNPACKED_BYTES = _env_bytes("CAMPAIGN_MAX_UNPACKED_BYTES", 2 * 1024**3)
MAX_MEMBERS = 100_000


@contextlib.contextmanager
def unpacked_archive(archive: Path) -> Iterator[Path]:
    """The bundle inside ``archive``, unpacked into a temporary folder that is always removed. Every
    member is checked as its header is read, before its data is: regular files and directories only,
    no links, no sparse members, no absolute or ``..`` names, one top folder that is a folder, at most
    MAX_MEMBERS members and MAX_UNPACKED_BYTES declared in all (a declared size over the cap is refused
    without reading the data)."""
    try:
        tar = tarfile.open(archive, mode="r:*")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise InputError(f"{archive}: not a readable archive: {exc}") from exc
    with tar, tempfile.TemporaryDirectory(prefix="campaign-verify-") as tmp:
        target = Path(tmp)
        tops: set[str] = set()
        total = count = 0
        try:
            for member in tar:
                count += 1
                total += member.size
                pure = PurePosixPath(member.name)
                if not pure.parts and member.isdir():
                    continue  # "." itself, as `tar -C dir -czf x.tgz .` writes it: nothing to unpack
                if pure.is_absolute() or ".." in pure.parts or not pure.parts:
                    raise InputError(f"{archive}: member name {member.name!r} is not allowed")
                if member.issparse() or any(k.startswith("GNU.sparse") for k in member.pax_headers):
                    raise InputError(f"{archive}: member {member.name!r} is sparse; a bundle has none")
                if not (member.isreg() or member.isdir()):
                    raise InputError(f"{archive}: member {member.name!r} is not a regular file or directory")
                if len(pure.parts) == 1 and not member.isdir():
                    raise InputError(f"{archive}: {member.name!r} must be the bundle's folder, not a file")
                if count > MAX_MEMBERS:
                    raise InputError(f"{archive}: more than {MAX_MEMBERS} members; not a bundle")
                if total > MAX_UNPACKED_BYTES:
                    raise InputError(f"{archive}: declares more than {MAX_UNPACKED_BYTES} bytes unpacked "
                                     "(CAMPAIGN_MAX_UNPACKED_BYTES); refused unread")
                tops.add(pure.parts[0])
                if len(tops) != 1:
                    raise InputError(f"{archive}: expected one bundle directory, found {len(tops)}")
                tar.extract(member, target, filter="data")
        except (OSError, tarfile.TarError, EOFError, ValueError) as exc:  # tarfile's own parse errors included
            raise InputError(f"{archive}: unreadable member: {exc}") from exc
        if not tops:
            raise InputError(f"{archive}: empty archive")
        yield target / tops.pop()
