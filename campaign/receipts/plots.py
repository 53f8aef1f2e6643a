"""The report's plots, drawn from the plot data a gate result carries (``campaign.presentation``): bars,
points and intervals, with no knowledge of gate kinds. A gate builds its plots' data from its own judging;
this module only draws them, so a bundle's report can be drawn again later from its files.

matplotlib's SVG backend draws them: axes, ticks, legends and error bars come from a library that has
solved them, where SVG strings written by hand had drawn one bar chart and nothing else. Text stays text
(``svg.fonttype: none``), so a plot's title and axis labels can be read, searched and checked in the
browser; the figure's background is white, so a plot stays readable in a dark theme and on paper.
"""

from __future__ import annotations

import io
import itertools
import re
from dataclasses import dataclass
from typing import Any

from campaign.presentation import Bars, Bound, Intervals, Points, Presentation
from campaign.presentation import Plot as PlotData

__all__ = ["Plot", "draw", "plots_for"]

CONTROL, CANDIDATE = "#33629e", "#d0543a"
COLOURS = {"control": CONTROL, "candidate": CANDIDATE, "other": "#777", "win": "#2a7", "tie": "#bbb", "loss": "#c44"}
_BOUNDS = {"limit": {"color": "#b22", "linestyle": "--", "linewidth": 1},
           "target": {"color": "#2a7", "linestyle": "--", "linewidth": 1},
           "zero": {"color": "#888", "linewidth": 1}}
_salt = itertools.count()


@dataclass
class Plot:
    title: str
    xlabel: str
    ylabel: str
    svg: str


def plots_for(gate: dict[str, Any]) -> list[Plot]:
    """The plots of one gate result (as the report reads it: its ``presentation`` checked by shapes.py);
    none when it carries none."""
    presentation = Presentation.model_validate(gate.get("presentation") or {})
    return [draw(plot) for plot in presentation.plots]


def draw(plot: PlotData, *, salt: str | None = None) -> Plot:
    """``salt`` names the plot's SVG ids (default: a count in this process): a page drawn again with the
    same salts is the same bytes."""
    fig = _figure(plot.height)
    axes = fig.subplots(len(plot.panels), 1, squeeze=False,
                        gridspec_kw={"height_ratios": plot.heights} if plot.heights else None)[:, 0]
    for panel, ax in zip(plot.panels, axes, strict=True):
        if isinstance(panel, Bars):
            _bars(ax, panel)
        elif isinstance(panel, Points):
            _points(ax, panel)
        else:
            _intervals(ax, panel)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        labels = ax.get_legend_handles_labels()[1]
        if labels:
            many = len(labels) >= 6
            ax.legend(loc="best", fontsize=6 if many else 7, ncol=2 if many else 1)
    main = plot.panels[0]
    axes[0].set_title(plot.title, fontsize=10)
    return _finish(fig, plot.title, main.xlabel, main.ylabel, salt)


def _colour(role: str | None) -> str | None:
    return COLOURS[role] if role else None


def _bounds(ax: Any, bounds: list[Bound], *, vertical: bool) -> None:
    """Reference lines on the value axis: vertical ones when the values run along x (horizontal bars)."""
    for bound in bounds:
        line = ax.axvline if vertical else ax.axhline
        line(bound.value, label=bound.label, **_BOUNDS[bound.kind])


def _bars(ax: Any, panel: Bars) -> None:
    n, count = len(panel.categories), max(1, len(panel.series))
    positions = list(range(n))
    width = 0.8 / count if panel.layout == "grouped" else 0.8
    base = [0.0] * n
    for index, series in enumerate(panel.series):
        colours = [COLOURS[r] for r in series.roles] if series.roles else _colour(series.role)
        offset = (index - (count - 1) / 2) * width if panel.layout == "grouped" else 0.0
        where = [p + offset for p in positions]
        if panel.horizontal:
            ax.barh(where, series.values, height=width, left=base if panel.layout == "stacked" else None,
                    color=colours, label=series.name)
        else:
            ax.bar(where, series.values, width=width, bottom=base if panel.layout == "stacked" else None,
                   color=colours, label=series.name)
        if panel.layout == "stacked":
            base = [a + b for a, b in zip(base, series.values, strict=True)]
    if panel.horizontal:
        ax.set_yticks(positions, panel.categories)
    else:
        long = any(len(c) > 6 for c in panel.categories) or n > 12
        ax.set_xticks(positions, panel.categories, rotation=30 if long else 0, ha="right" if long else "center",
                      fontsize=7)
    if panel.value_range:
        (ax.set_xlim if panel.horizontal else ax.set_ylim)(*panel.value_range)
    _bounds(ax, panel.bounds, vertical=panel.horizontal)


def _points(ax: Any, panel: Points) -> None:
    for series in panel.series:
        colour = _colour(series.role)
        if series.line:
            ax.plot(series.x, series.y, "-" + series.marker, color=colour, markersize=3 if colour is None else 6,
                    label=series.name)
        elif series.hollow is not None:
            edge = colour or "#777"
            ax.scatter(series.x, series.y, marker=series.marker, s=36, edgecolors=edge,
                       facecolors=["none" if h else edge for h in series.hollow], label=series.name)
        else:
            ax.scatter(series.x, series.y, s=10 if series.faint else 24, color=colour, marker=series.marker,
                       alpha=0.5 if series.faint else 1.0, label=series.name)
    if panel.x_labels is not None:
        ax.set_xticks(range(len(panel.x_labels)), panel.x_labels, rotation=30, ha="right", fontsize=7)
    _bounds(ax, panel.bounds, vertical=False)


def _intervals(ax: Any, panel: Intervals) -> None:
    colour = COLOURS[panel.role]
    for x, item in enumerate(panel.intervals):
        ax.errorbar([x], [item.estimate], yerr=[[item.estimate - item.low], [item.high - item.estimate]], fmt="o",
                    color=colour, capsize=6)
        if item.text:
            ax.annotate(item.text, (x, item.estimate), textcoords="offset points", xytext=(10, 0), fontsize=8)
    _bounds(ax, panel.bounds, vertical=False)
    ax.set_xticks(range(len(panel.categories)), panel.categories)
    ax.set_xlim(-0.6, len(panel.categories) - 0.2)


def _figure(height: float = 3.0, width: float = 7.2) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), facecolor="white")
    return fig


def _finish(fig: Any, title: str, xlabel: str, ylabel: str, salt: str | None = None) -> Plot:
    import matplotlib

    buffer = io.StringIO()
    # text stays text; ids are salted per plot so two plots on one page never share a clip path's id
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"campaign-{salt or next(_salt)}",
                                "font.size": 8}):
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    # the RDF metadata block names the library's web site and vocabularies: nothing a report needs
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.DOTALL)
    return Plot(title, xlabel, ylabel, svg)
