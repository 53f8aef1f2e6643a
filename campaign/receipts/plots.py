"""The report's plots, drawn from a gate result file only (so a bundle's report can be drawn again later).

matplotlib's SVG backend draws them: axes, ticks, legends and error bars come from a library that has
solved them, where SVG strings written by hand had drawn one bar chart and nothing else. Text stays text
(``svg.fonttype: none``), so a plot's title and axis labels can be read, searched and checked in the
browser; the figure's background is white, so a plot stays readable in a dark theme and on paper. A plot
whose data a result does not hold (an older bundle, a gate that measured nothing) is left out.
"""

from __future__ import annotations

import io
import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Plot", "plots_for"]

CONTROL, CANDIDATE = "#33629e", "#d0543a"
_salt = itertools.count()


@dataclass
class Plot:
    title: str
    xlabel: str
    ylabel: str
    svg: str


def plots_for(gate: dict[str, Any]) -> list[Plot]:
    drawers = _DRAWERS.get(str(gate.get("kind")), [])
    plots = []
    for draw in drawers:
        try:
            plots += draw(gate)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError, IndexError):
            continue  # a result without that evidence (an older bundle's shape): nothing to draw
    return plots


def _figure(height: float = 3.0, width: float = 7.2) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), facecolor="white")
    return fig


def _finish(fig: Any, ax: Any, title: str, xlabel: str, ylabel: str) -> Plot:
    import matplotlib

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    buffer = io.StringIO()
    # text stays text; ids are salted per plot so two plots on one page never share a clip path's id
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"campaign-{next(_salt)}",
                                "font.size": 8}):
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    # the RDF metadata block names the library's web site and vocabularies: nothing a report needs
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.DOTALL)
    return Plot(title, xlabel, ylabel, svg)


# --- speed --------------------------------------------------------------------------------------------

def _visit_position(key: str) -> tuple[str, int]:
    """control_rerun2 -> ("control", 4): the boot's place in the window (control@j at 2j, candidate@j at 2j+1)."""
    role, _, rerun = key.partition("_rerun")
    j = int(rerun) if rerun else 0
    return role, 2 * j + (1 if role == "candidate" else 0)


def _speed_change(gate: dict[str, Any]) -> list[Plot]:
    rule, levels = gate["rule"], gate["details"]["levels"]
    shown = [(level, entry["estimate"]) for level, entry in levels.items() if entry.get("estimate")]
    if not shown:
        return []
    fig = _figure(2.8)
    ax = fig.subplots()
    for x, (_level, est) in enumerate(shown):
        change, low, high = 100 * est["change"], 100 * est["low"], 100 * est["high"]
        ax.errorbar([x], [change], yerr=[[change - low], [high - change]], fmt="o", color=CANDIDATE, capsize=6)
        ax.annotate(f"{change:+.1f}% [{low:+.1f}, {high:+.1f}]", (x, change), textcoords="offset points",
                    xytext=(10, 0), fontsize=8)
    ax.axhline(0, color="#888", linewidth=1)
    ax.axhline(100 * float(rule.get("min_mean_change") or 0), color="#2a7", linestyle="--", label="bar (min_mean_change)")
    ax.set_xticks(range(len(shown)), [f"C{level}" for level, _ in shown])
    ax.set_xlim(-0.6, len(shown) - 0.2)
    ax.legend(loc="best", fontsize=7)
    metric = rule.get("metric", "decode_tok_s")
    return [_finish(fig, ax, f"Speed change per level with its {shown[0][1]['confidence']:.1%} CI",
                    "concurrency level", f"change in {metric} (%)")]


def _speed_boots(gate: dict[str, Any]) -> list[Plot]:
    metric = gate["rule"].get("metric", "decode_tok_s")
    out = []
    for level, entry in gate["details"]["levels"].items():
        prompts = entry.get("prompts") or []
        if not prompts:
            continue
        fig = _figure(3.0)
        ax = fig.subplots()
        means: dict[str, dict[int, list[float]]] = {"control": {}, "candidate": {}}
        for row in prompts:
            for key, value in row.items():
                if not isinstance(value, (int, float)) or not key.startswith(("control", "candidate")):
                    continue
                role, position = _visit_position(key)
                means[role].setdefault(position, []).append(float(value))
        for role, colour in (("control", CONTROL), ("candidate", CANDIDATE)):
            points = sorted(means[role].items())
            xs = [x for x, values in points for _ in values]
            ys = [v for _, values in points for v in values]
            ax.scatter(xs, ys, s=10, color=colour, alpha=0.5)
            ax.plot([x for x, _ in points], [sum(v) / len(v) for _, v in points], "-o", color=colour,
                    label=f"{role} (mean over prompts; dots: each prompt)")
        ax.legend(loc="best", fontsize=7)
        out.append(_finish(fig, ax, f"C{level}: {metric} of every boot, in window order (drift shows here)",
                           "boot (window order: control, candidate, control, ...)", "tok/s"))
    return out


def _speed_prompts(gate: dict[str, Any]) -> list[Plot]:
    out = []
    for level, entry in gate["details"]["levels"].items():
        rows = [row for row in entry.get("prompts") or [] if isinstance(row.get("change"), (int, float))]
        if not rows:
            continue
        fig = _figure(0.6 + 0.28 * len(rows))
        ax = fig.subplots()
        labels = [f"{row.get('prompt')} ({row.get('class')})" for row in rows]
        values = [100 * row["change"] for row in rows]
        ax.barh(labels, values, color=[CANDIDATE if v >= 0 else CONTROL for v in values])
        ax.axvline(0, color="#888", linewidth=1)
        out.append(_finish(fig, ax, f"C{level}: paired change per prompt (candidate vs control, drift taken out)",
                           "change (%)", "prompt (class)"))
    return out


def _speed_acceptance(gate: dict[str, Any]) -> list[Plot]:
    engine = gate["details"]["engine"]
    accepted: dict[int, float] = {}
    drafts = 0.0
    for key, counters in engine.items():
        if not key.startswith("candidate") or not counters.get("spec_accepted_per_position"):
            continue
        drafts += float(counters.get("spec_drafts") or 0)
        for position, count in counters["spec_accepted_per_position"].items():
            accepted[int(position)] = accepted.get(int(position), 0.0) + float(count)
    if not accepted:
        return []
    positions = sorted(accepted)[:32]
    fig = _figure(2.8)
    ax = fig.subplots()
    if drafts > 0:
        ax.bar(positions, [accepted[p] / drafts for p in positions], color=CANDIDATE)
        ylabel = "accepted per draft"
    else:
        ax.bar(positions, [accepted[p] for p in positions], color=CANDIDATE)
        ylabel = "accepted draft tokens"
    return [_finish(fig, ax, "Draft acceptance per position (the engine's counters, every candidate boot)",
                    "draft position", ylabel)]


def _speed_rows(gate: dict[str, Any]) -> list[Plot]:
    rows = [row for row in gate["details"]["rows"] if isinstance(row.get("median_aggregate_tok_s"), (int, float))]
    order = [boot["visit"] for boot in gate["details"]["schedule"]["boots"]]
    rows = [row for row in rows if row["lane"] in order]  # row["lane"] is the visit: "base@rerun1"
    if not rows:
        return []
    fig = _figure(3.0)
    ax = fig.subplots()
    levels = sorted({row["level"] for row in rows})
    markers = dict(zip(levels, "os^Dv<>", strict=False))  # more levels than markers: unmarked
    for level, (role, colour), valid in itertools.product(levels, (("control", CONTROL), ("candidate", CANDIDATE)),
                                                          (True, False)):
        chosen = [row for row in rows if row["level"] == level and row["role"].startswith(role)
                  and (row["status"] == "valid") == valid]
        if chosen:
            ax.scatter([order.index(row["lane"]) for row in chosen], [row["median_aggregate_tok_s"] for row in chosen],
                       color=colour, marker=markers[level] if valid else "x",
                       label=f"C{level} {role}{'' if valid else ' (VOID)'}")
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=7)
    ax.legend(loc="best", fontsize=6, ncol=2)
    return [_finish(fig, ax, "Every row over the window (median aggregate tok/s; x: a row that went VOID)",
                    "visit (window order)", "tok/s")]


# --- teacher_forced, kl ------------------------------------------------------------------------------

def _tf_sites(gate: dict[str, Any]) -> list[Plot]:
    sites = [site for site in gate["details"].get("sites") or [] if site.get("scored")]
    if not sites:
        return []
    fig = _figure(3.0)
    ax = fig.subplots()
    labels = [f"{site['prompt']}@{site['site']}" for site in sites]
    xs = range(len(sites))
    ax.bar([x - 0.2 for x in xs], [abs(site["delta_control_server"]) for site in sites], width=0.4,
           color=CONTROL, label="on the control's server")
    ax.bar([x + 0.2 for x in xs], [abs(site["delta_candidate_server"]) for site in sites], width=0.4,
           color=CANDIDATE, label="on the candidate's server")
    bound = gate["rule"].get("max_site_delta")
    if bound is not None:
        ax.axhline(float(bound), color="#b22", linestyle="--", label="max_site_delta")
    ax.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=7)
    ax.legend(loc="best", fontsize=7)
    return [_finish(fig, ax, "Divergence sites: |logprob(control's token) - logprob(candidate's token)|",
                    "prompt@token where greedy paths part", "nats")]


def _tf_references(gate: dict[str, Any]) -> list[Plot]:
    refs = gate["details"].get("references") or []
    if not refs:
        return []
    fig = _figure(0.8 + 0.3 * len(refs))
    ax = fig.subplots()
    labels = [str(ref["reference"]) for ref in refs]
    ax.barh(labels, [float(ref["max_abs_delta"]) for ref in refs], color=CANDIDATE, label="max |Δ|")
    ax.barh(labels, [float(ref["mean_abs_delta"]) for ref in refs], color=CONTROL, label="mean |Δ|")
    bound = gate["rule"].get("noninferiority_max")
    if bound is not None:
        ax.axvline(float(bound), color="#b22", linestyle="--", label="noninferiority_max")
    ax.legend(loc="best", fontsize=7)
    return [_finish(fig, ax, "Reference texts: per-token logprob change, candidate vs control",
                    "|Δ logprob| (nats)", "reference")]


def _kl_positions(gate: dict[str, Any]) -> list[Plot]:
    texts = [text for text in gate["details"].get("texts") or [] if text.get("per_position")]
    if not texts:
        return []
    fig = _figure(2.8)
    ax = fig.subplots()
    for text in texts:
        ax.plot(range(len(text["per_position"])), text["per_position"], "-o", markersize=3, label=str(text["reference"]))
    for name in ("max_mean", "max_p99", "max_max"):
        bound = gate["rule"].get(name)
        if bound is not None:
            ax.axhline(float(bound), linestyle="--", color="#b22", linewidth=1, label=name)
    ax.legend(loc="best", fontsize=7)
    return [_finish(fig, ax, f"KL({gate.get('control')} || {gate.get('candidate')}) per token position",
                    "token position in the reference", "KL (nats)")]


# --- needle, task -------------------------------------------------------------------------------------

def _needle_ladder(gate: dict[str, Any]) -> list[Plot]:
    ladders = gate["details"]["ladders"]
    fig = _figure(3.0)
    ax = fig.subplots()
    drew = False
    for (lane, ladder), colour in zip(ladders.items(), (CONTROL, CANDIDATE, "#777"), strict=False):
        for variant, marker in zip(gate["details"].get("variants") or [], "osD^v", strict=False):
            xs, ys, found = [], [], []
            for rung in ladder["rungs"]:
                attempts = (rung.get("attempts") or {}).get(variant) or []
                speeds = [a["prefill_tok_s_client"] for a in attempts if isinstance(a.get("prefill_tok_s_client"), (int, float))]
                if speeds:
                    xs.append(rung["rung"])
                    ys.append(sum(speeds) / len(speeds))
                    found.append(any(a.get("passed") for a in attempts))
            if xs:
                drew = True
                ax.scatter(xs, ys, marker=marker, s=36, edgecolors=colour,
                           facecolors=[colour if f else "none" for f in found], label=f"{lane} {variant}")
    if not drew:
        return []
    ax.legend(loc="best", fontsize=6, ncol=2)
    return [_finish(fig, ax, "Needle ladder: prefill speed per rung and variant (filled: the needle was found)",
                    "rung (prompt tokens)", "prefill tok/s (client)")]


def _task_outcomes(gate: dict[str, Any]) -> list[Plot]:
    kinds = gate["details"]["by_kind"]
    metrics, rule = gate["metrics"], gate["rule"]
    bound, margin = metrics.get("loss_upper_bound", {}).get("value"), rule.get("max_loss_upper")
    fig = _figure(1.4 + 0.35 * len(kinds))
    ax, bound_ax = fig.subplots(2, 1, gridspec_kw={"height_ratios": [max(1, len(kinds)), 1]})
    names = list(kinds)
    left = [0.0] * len(names)
    for outcome, colour in (("win", "#2a7"), ("tie", "#bbb"), ("loss", "#c44")):
        values = [float(kinds[name][outcome]) for name in names]
        ax.barh(names, values, left=left, color=colour, label=outcome)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.legend(loc="best", fontsize=7)
    if isinstance(bound, (int, float)) and margin is not None:
        confidence = float(rule.get("confidence", 0.95))
        bound_ax.barh(["loss rate"], [100 * bound], color="#c44")
        bound_ax.axvline(100 * float(margin), color="#2a7", linestyle="--", label="margin (max_loss_upper)")
        bound_ax.set_xlim(0, 100)
        bound_ax.set_xlabel(f"upper {confidence:.0%} Clopper-Pearson bound of the loss rate (%)")
        bound_ax.legend(loc="best", fontsize=7)
    else:
        bound_ax.set_visible(False)
    return [_finish(fig, ax, "Tasks: wins, ties and losses of the candidate against the control", "tasks", "kind")]


_DRAWERS: dict[str, list[Callable[[dict[str, Any]], list[Plot]]]] = {
    "speed": [_speed_change, _speed_boots, _speed_prompts, _speed_acceptance, _speed_rows],
    "teacher_forced": [_tf_sites, _tf_references],
    "kl": [_kl_positions],
    "needle": [_needle_ladder],
    "task": [_task_outcomes],
}
