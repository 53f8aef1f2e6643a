"""A history of windows: one folder listing every window published into it (``index.json`` and ``index.html``),
with, per contract, the control's figures over time.

Each window enters as ``windows/<bundle>/``: its report, its Markdown summary, its archive and ``entry.json``,
what the index says of it, derived from the verified bundle alone (its SUMMARY.json, its gate results and the
key that signed it). The index is rebuilt from every ``entry.json`` on each publish; ``rebuild`` derives every
entry again from the archives, verifying each, so the same bundles give the same page byte for byte (nothing
of the moment it was built is in it). The control is the lane a window compares against, by the seeds'
practice the daily's configuration: its figures (every ``control`` metric of every gate, e.g. decode tok/s per
speed level, a task gate's control score) are plotted over the windows of each contract.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from campaign.errors import InputError
from campaign.fsutil import atomic_write_bytes, atomic_write_json, load_json_strict
from campaign.presentation import Plot as PlotData
from campaign.presentation import Points, PointSeries
from campaign.receipts.plots import draw
from campaign.receipts.publish import SHARED, template_environment

__all__ = ["ENTRY", "INDEX_SCHEMA", "WINDOWS", "window_entry", "window_id", "write_index"]

INDEX_SCHEMA = "campaign.index/v1"
WINDOWS = "windows"
ENTRY = "entry.json"
MAX_PLOTS_PER_CONTRACT = 12  # past these the page lists the figures without plotting them
# a control figure: "C4.control.decode_tok_s", "control_self_identical" (never a control rerun's, one figure per
# window, nor the drift between its boots)
_CONTROL_METRIC = re.compile(r"^(?:[A-Za-z0-9_]+\.)?(?:control\.[A-Za-z0-9_.]+|control_(?!drift)[A-Za-z0-9_]+)$")
# the instrument's own bookkeeping, not a figure of the lane: errors, void rows, the client's CPU
_BOOKKEEPING = re.compile(r"error|void|cpu|runner|attempt")
# a window id names its folder in the index: what the tool writes ("20261203T081022Z-gpu-speed-v2-f2375500")
_WINDOW_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def window_id(summary: dict[str, Any], where: Path) -> str:
    """The window's id, checked before it names a folder."""
    window = summary.get("window")
    if not isinstance(window, str) or not _WINDOW_ID.match(window) or ".." in window:
        raise InputError(f"{where}: SUMMARY.json: window: {str(window)[:80]!r} is not a window id this tool writes")
    return window


def window_entry(data: dict[str, Any], keyid: str) -> dict[str, Any]:
    """What the index says of one window, from its report data (``load_report_data``) and the key id that
    signed it."""
    summary = data["summary"]
    name = window_id(summary, Path(data["bundle"]))
    contract = summary.get("contract") or {}
    gates = data["gates"]
    candidates = [{"name": d.candidate, "decision": d.decision, "gate": d.gate, "reason": d.reason[:300],
                   "figure": d.figure[:300], "suspect": d.suspect[:300]}
                  for d in data["decisions"]]
    control: dict[str, Any] = {}
    for gate in sorted(gates, key=lambda g: (str(g.get("gate")), str(g.get("candidate")))):
        for metric, figure in sorted((gate.get("metrics") or {}).items()):
            key = f"{gate.get('gate')} {metric}"
            value = figure.get("value") if isinstance(figure, dict) else None
            if (_CONTROL_METRIC.match(metric) and not _BOOKKEEPING.search(metric) and key not in control
                    and isinstance(value, (int, float)) and not isinstance(value, bool)):
                control[key] = {"value": value, "unit": str(figure.get("unit") or "")[:120],
                                "denominator": figure.get("denominator")}
    return {"window": name, "started_at": summary.get("started_at"),
            "status": summary.get("status"), "contract": {"name": contract.get("name"),
                                                          "version": contract.get("version")},
            "signer": keyid, "candidates": candidates, "control": control,
            "report": f"{WINDOWS}/{name}/report.html", "summary": f"{WINDOWS}/{name}/SUMMARY.md",
            "archive": f"{WINDOWS}/{name}/{name}.tar.gz"}


def write_index(folder: Path) -> dict[str, Path]:
    """index.json and index.html from every ``windows/*/entry.json`` in ``folder``, oldest window first."""
    entries = []
    for path in sorted((folder / WINDOWS).glob(f"*/{ENTRY}")):
        entry = load_json_strict(path, what="index entry")
        if not isinstance(entry, dict) or not isinstance(entry.get("window"), str):
            raise InputError(f"{path}: not an index entry (no window)")
        entries.append(entry)
    entries.sort(key=lambda e: (str(e.get("started_at")), str(e["window"])))
    index = {"schema": INDEX_SCHEMA, "windows": entries, "contracts": _histories(entries)}
    json_path, html_path = folder / "index.json", folder / "index.html"
    atomic_write_json(json_path, index, mode=SHARED)
    atomic_write_bytes(html_path, render_index(index).encode(), mode=SHARED)
    return {"index": json_path, "html": html_path}


def _histories(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per contract name, per control figure: its value in each window, oldest first."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in entries:
        family = out.setdefault(str((entry.get("contract") or {}).get("name")), {})
        for key, figure in sorted((entry.get("control") or {}).items()):
            family.setdefault(key, []).append({"window": entry["window"], "started_at": entry.get("started_at"),
                                               "version": (entry.get("contract") or {}).get("version"),
                                               "value": figure["value"], "unit": figure.get("unit", ""),
                                               "denominator": figure.get("denominator")})
    return out


def render_index(index: dict[str, Any]) -> str:
    plots: dict[str, list[Any]] = {}
    for family, figures in index["contracts"].items():
        plotted = [(key, points) for key, points in figures.items() if len(points) >= 2][:MAX_PLOTS_PER_CONTRACT]
        plots[family] = [_history_plot(family, key, points, salt=f"{family}-{n}")
                         for n, (key, points) in enumerate(plotted)]
    return template_environment().get_template("index.html.j2").render(index=index, plots=plots)


def _history_plot(family: str, key: str, points: list[dict[str, Any]], *, salt: str) -> Any:
    first = _day(points[0]["started_at"])
    days = [round(_day(p["started_at"]) - first, 3) for p in points]
    panel = Points(series=[PointSeries(name="control", x=days, y=[float(p["value"]) for p in points], role="control",
                                       line=True)],
                   xlabel=f"days since {str(points[0]['started_at'])[:10]}", ylabel=points[0].get("unit") or key)
    return draw(PlotData(title=f"{family}: {key}", panels=[panel]), salt=salt)


def _day(stamp: Any) -> float:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() / 86400
    except ValueError:
        return 0.0
