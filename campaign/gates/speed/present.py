"""What the report shows of a speed result: the change per level with its CI (headline and plot), every
boot in window order, the paired change per prompt, each lane's throughput, latency tail and good share
against the load (the knee), the draft acceptance per position and every row over the window. Built from the result as the judge wrote it (``details``) and the typed rule; a result of an
older bundle goes through the same builders (``SpeedGate.stored_presentation``)."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict

from campaign.gates.base import each_plot
from campaign.gates.speed.spec import Level, SpeedRule, level_of_key, level_tag, load_order
from campaign.presentation import (
    HEADLINE_CHARS,
    Bars,
    BarSeries,
    Bound,
    Headline,
    Interval,
    Intervals,
    Marker,
    Panel,
    Plot,
    Points,
    PointSeries,
    Presentation,
    Role,
)

__all__ = ["headline_words", "present"]


class _Open(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Estimate(_Open):  # what the headline formats as percentages: numbers, or the result is refused in one line
    change: float
    confidence: float
    low: float
    high: float


class _Level(_Open):
    estimate: _Estimate | None = None
    prompts: list[dict[str, Any]] | None = None


class _Details(_Open):
    levels: dict[str, _Level] = {}


class _Shape(_Open):
    details: _Details = _Details()


_ROLES: tuple[Role, ...] = ("control", "candidate")


def present(rule: SpeedRule | None, result: dict[str, Any]) -> Presentation:
    """Raises pydantic's ValidationError when a level's estimate is not numbers (a hand-made or damaged
    result): the report says so in one line rather than print a figure it cannot read."""
    _Shape.model_validate(result)
    stored = result.get("rule")
    metric = rule.metric if rule else str((stored if isinstance(stored, dict) else {}).get("metric") or "decode_tok_s")
    headlines = []
    for level, entry in ((result.get("details") or {}).get("levels") or {}).items():
        headline = _headline(metric, level, entry, result)
        if headline is not None:
            headlines.append(headline)
    plots = each_plot([_change, _load, _boots, _prompts, _acceptance, _rows], rule, result)
    return Presentation(headlines=headlines, plots=plots)


def headline_words(rule: SpeedRule | None, result: dict[str, Any]) -> str | None:
    """The words after a speed result's verdict: per judged level, the deciding ones first, its change with
    its CI and the pairs, then the bar ("C1 +44.7% [+31.4%, +59.5%], 2 pairs; bar +5%"); a level without an
    estimate, what each lane measured. None when no level was weighed (the reason then says why)."""
    levels = (result.get("details") or {}).get("levels")
    reasons = result.get("reasons")
    if not isinstance(levels, dict) or (isinstance(reasons, list) and reasons and str(reasons[0]).startswith(
            "instrument:")):  # the numbers were not judged: the instrument's problem is the headline
        return None
    stored = result.get("rule")
    metric = rule.metric if rule else str((stored if isinstance(stored, dict) else {}).get("metric") or "decode_tok_s")
    # one bar for every level (the rule's), said once at the end
    bar = (f"; bar {rule.min_mean_change:+.0%}" if rule is not None and rule.min_mean_change is not None else "")
    judged = [(level, entry) for level, entry in levels.items() if isinstance(entry, dict) and entry.get("judged", True)]
    judged.sort(key=lambda item: item[1].get("verdict") != result.get("verdict"))
    words = []
    for level, entry in judged:
        figure = _headline(metric, level, entry, result)
        if figure is None:
            continue
        looks = entry.get("looks")
        pairs = looks[-1].get("pairs") if isinstance(looks, list) and looks and isinstance(looks[-1], dict) else None
        if isinstance(entry.get("estimate"), dict):
            est = entry["estimate"]
            shown = f"{est['change']:+.1%} [{est['low']:+.1%}, {est['high']:+.1%}]"
            words.append(f"{figure.label} {shown}" + (f", {_pairs(pairs)}" if isinstance(pairs, int) else ""))
        else:
            words.append(f"{figure.label} {figure.value}, {figure.unit.removeprefix(f'{metric}, ')}")
    # whole levels only, the deciding first: a headline cut inside a CI would misstate it
    room = HEADLINE_CHARS - len("INCONCLUSIVE ") - len(bar)
    kept = words[:1]
    for level, more in enumerate(words[1:], start=1):
        left = f"; +{len(words) - level} more"
        if len("; ".join([*kept, more])) + (len(left) if level < len(words) - 1 else 0) > room:
            kept.append(left.removeprefix("; "))
            break
        kept.append(more)
    return "; ".join(kept) + bar if kept else None


def _pairs(count: Any) -> str:
    return "one pair" if count == 1 else f"{count} pairs"


def _headline(metric: str, level: str, entry: dict[str, Any], result: dict[str, Any]) -> Headline | None:
    """The change with its CI and the boot pairs it rests on; with no estimate (one pair, or too few boots
    counted), what each lane measured, so an undecided comparison still shows its numbers."""
    est = entry.get("estimate")
    if est:
        looks = entry.get("looks")
        pairs = looks[-1].get("pairs") if isinstance(looks, list) and looks and isinstance(looks[-1], dict) else None
        rests_on = f"{_pairs(pairs)}, " if isinstance(pairs, int) else ""
        return Headline(
            label=_label(level),
            value=f"{est['change']:+.1%} [{est['confidence']:.1%} CI {est['low']:+.1%}, {est['high']:+.1%}]",
            unit=f"{metric}, {rests_on}{est.get('boots')} boots, {est.get('prompts')} prompts")
    measured = {role: _measured(result, _label(level), role, metric) for role in _ROLES}
    if all(value is None for value, _ in measured.values()):
        return None
    unit = next((unit for _, unit in measured.values() if unit), "")
    (candidate, _), (control, _) = measured["candidate"], measured["control"]
    schedule = (result.get("details") or {}).get("schedule")
    pairs = schedule.get("pairs") if isinstance(schedule, dict) else None
    rests_on = f", {_pairs(pairs)}" if isinstance(pairs, int) and pairs > 0 else ""

    def figure(value: float | None) -> str:
        return "none counted" if value is None else f"{value:.4g}"

    return Headline(label=_label(level), value=f"{figure(candidate)} vs {figure(control)} {unit}".strip(),
                    unit=f"{metric}, candidate vs control{rests_on}, no CI")


def _measured(result: dict[str, Any], tag: str, role: str, metric: str) -> tuple[float | None, str]:
    """The mean over a lane's counted boots of its median per prompt (``C1.control_rerun1.decode_tok_s``),
    and the metric's unit; None when no boot of the lane counted at this level."""
    metrics = result.get("metrics")
    found = [m for name, m in (metrics.items() if isinstance(metrics, dict) else [])
             if isinstance(m, dict) and name.startswith(f"{tag}.{role}") and name.endswith(f".{metric}")
             and name.count(".") == 2 and isinstance(m.get("value"), (int, float))]
    if not found:
        return None, ""
    return sum(float(m["value"]) for m in found) / len(found), str(found[0].get("unit") or "")


def _change(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    levels = result["details"]["levels"]
    shown = [(level, entry["estimate"]) for level, entry in levels.items() if entry.get("estimate")]
    if not shown:
        return []
    intervals = []
    for _level, est in shown:
        change, low, high = 100 * est["change"], 100 * est["low"], 100 * est["high"]
        intervals.append(Interval(estimate=change, low=low, high=high,
                                  text=f"{change:+.1f}% [{low:+.1f}, {high:+.1f}]"))
    bar = rule.min_mean_change if rule else 0.0
    metric = rule.metric if rule else "decode_tok_s"
    panel = Intervals(categories=[_label(level) for level, _ in shown], intervals=intervals,
                      bounds=[Bound(value=0.0, kind="zero"),
                              Bound(value=100 * bar, label="bar (min_mean_change)", kind="target")],
                      xlabel="level (C: users in flight; rps: requests a second)", ylabel=f"change in {metric} (%)")
    return [Plot(title=f"Speed change per level with its {shown[0][1]['confidence']:.1%} CI", panels=[panel],
                 height=2.8)]


def _label(key: str) -> str:
    """details.levels' key as the level is named: "4" -> C4, "2rps" -> 2rps."""
    return level_tag(level_of_key(key))


def _lane_mean(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.fmean(numbers) if numbers else None


def _load(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    """Each lane against the load, one plot per kind (concurrency, rate): throughput, the highest TTFT
    percentile every level measured and, with an SLO, the good share; the knee in the title."""
    details, metrics = result["details"], result.get("metrics") or {}
    out = []
    for kind, keys in (("concurrency", [k for k in details["levels"] if k.isdigit()]),
                       ("rate", [k for k in details["levels"] if not k.isdigit()])):
        keys = sorted(keys, key=lambda k: load_order(level_of_key(k)))
        if len(keys) < 2:
            continue
        tails = {key: details["levels"][key].get("tails") or {} for key in keys}
        percent = _shared_percent(tails)
        panels: list[Panel] = []
        throughput, latency, good = [], [], []
        for lane in _ROLES:
            xs = [float(i) for i in range(len(keys))]
            throughput.append(PointSeries(name=lane, role=lane, line=True, x=xs, y=[_lane_mean(
                [m.get("value") for name, m in metrics.items() if isinstance(m, dict) and name.startswith(
                    f"{_label(key)}.{lane}") and name.endswith(".aggregate_tok_s")]) or 0.0 for key in keys]))
            if percent:
                latency.append(PointSeries(name=lane, role=lane, line=True, x=xs, y=[_lane_mean(
                    [(cls.get("ttft") or {}).get(percent) for role, classes in tails[key].items()
                     if role.startswith(lane) for cls in classes.values()]) or 0.0 for key in keys]))
            shares = [((details["levels"][key].get("goodput") or {}).get(lane) or {}).get("share") for key in keys]
            if any(isinstance(v, (int, float)) for v in shares):
                good.append(PointSeries(name=lane, role=lane, line=True, x=xs,
                                        y=[float(v) if isinstance(v, (int, float)) else 0.0 for v in shares]))
        labels = [_label(key) for key in keys]
        panels.append(Points(series=throughput, x_labels=labels, xlabel=kind, ylabel="aggregate tok/s"))
        if latency:
            panels.append(Points(series=latency, x_labels=labels, xlabel=kind, ylabel=f"TTFT {percent} (s)"))
        if good:
            target = (details.get("slo") or {}).get("min_good_share")
            panels.append(Points(series=good, x_labels=labels, xlabel=kind, ylabel="good share (SLO)",
                                 bounds=[Bound(value=float(target), label="min_good_share", kind="target")]
                                 if isinstance(target, (int, float)) else []))
        knees = {lane: ((details.get("knee") or {}).get(lane) or {}).get(kind) or {} for lane in _ROLES}
        said = "; ".join(f"{lane} {level_tag(k['level']) if k.get('level') is not None else 'above the levels'}"
                         for lane, k in knees.items() if k)
        out.append(Plot(title=f"Each lane against the load ({kind}; mean over boots)"
                              + (f": knee at {said}" if said else ""), panels=panels))
    return out


def _shared_percent(tails: dict[str, Any]) -> str | None:
    """The highest TTFT percentile that every level measured (a p99 needs 500 requests a class and boot)."""
    for percent in ("p99", "p95", "p90", "p50"):
        if all(any((cls.get("ttft") or {}).get(percent) is not None for classes in roles.values()
                   for cls in classes.values()) for roles in tails.values()):
            return percent
    return None


def _visit_position(key: str) -> tuple[str, int]:
    """control_rerun2 -> ("control", 4): the boot's place in the window (control@j at 2j, candidate@j at 2j+1)."""
    role, _, rerun = key.partition("_rerun")
    j = int(rerun) if rerun else 0
    return role, 2 * j + (1 if role == "candidate" else 0)


def _boots(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    metric = rule.metric if rule else "decode_tok_s"
    out = []
    for level, entry in result["details"]["levels"].items():
        prompts = entry.get("prompts") or []
        if not prompts:
            continue
        means: dict[str, dict[int, list[float]]] = {"control": {}, "candidate": {}}
        for row in prompts:
            for key, value in row.items():
                if not isinstance(value, (int, float)) or not key.startswith(("control", "candidate")):
                    continue
                role, position = _visit_position(key)
                means[role].setdefault(position, []).append(float(value))
        series = []
        for role in _ROLES:
            points = sorted(means[role].items())
            series.append(PointSeries(x=[x for x, values in points for _ in values],
                                      y=[v for _, values in points for v in values], role=role, faint=True))
            series.append(PointSeries(name=f"{role} (mean over prompts; dots: each prompt)",
                                      x=[x for x, _ in points], y=[sum(v) / len(v) for _, v in points],
                                      role=role, line=True))
        out.append(Plot(title=f"{_label(level)}: {metric} of every boot, in window order (drift shows here)",
                        panels=[Points(series=series, xlabel="boot (window order: control, candidate, control, ...)",
                                       ylabel="tok/s" if metric.endswith("tok_s") else "s")]))
    return out


def _prompts(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    out = []
    for level, entry in result["details"]["levels"].items():
        rows = [row for row in entry.get("prompts") or [] if isinstance(row.get("change"), (int, float))]
        if not rows:
            continue
        values = [100 * row["change"] for row in rows]
        bars = Bars(categories=[f"{row.get('prompt')} ({row.get('class')})" for row in rows], horizontal=True,
                    series=[BarSeries(values=values, roles=["candidate" if v >= 0 else "control" for v in values])],
                    bounds=[Bound(value=0.0, kind="zero")], xlabel="change (%)", ylabel="prompt (class)")
        out.append(Plot(title=f"{_label(level)}: paired change per prompt (candidate vs control, drift taken out)",
                        panels=[bars], height=0.6 + 0.28 * len(rows)))
    return out


def _acceptance(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    accepted: dict[int, float] = {}
    drafts = 0.0
    for key, counters in result["details"]["engine"].items():
        if not key.startswith("candidate") or not counters.get("spec_accepted_per_position"):
            continue
        drafts += float(counters.get("spec_drafts") or 0)
        for position, count in counters["spec_accepted_per_position"].items():
            accepted[int(position)] = accepted.get(int(position), 0.0) + float(count)
    if not accepted:
        return []
    positions = sorted(accepted)[:32]
    if drafts > 0:
        values, ylabel = [accepted[p] / drafts for p in positions], "accepted per draft"
    else:
        values, ylabel = [accepted[p] for p in positions], "accepted draft tokens"
    bars = Bars(categories=[str(p) for p in positions], series=[BarSeries(values=values, role="candidate")],
                xlabel="draft position", ylabel=ylabel)
    return [Plot(title="Draft acceptance per position (the engine's counters, every candidate boot)",
                 panels=[bars], height=2.8)]


def _rows(rule: SpeedRule | None, result: dict[str, Any]) -> list[Plot]:
    details = result["details"]
    rows = [row for row in details["rows"] if isinstance(row.get("median_aggregate_tok_s"), (int, float))]
    order = [boot["visit"] for boot in details["schedule"]["boots"]]
    rows = [row for row in rows if row["lane"] in order]  # row["lane"] is the visit: "base@rerun1"
    if not rows:
        return []
    levels = sorted({row["level"] for row in rows}, key=load_order)
    markers: dict[Level, Marker] = dict(zip(levels, ("o", "s", "^", "D", "v", "<", ">"), strict=False))
    series = []
    for level, role, valid in itertools.product(levels, _ROLES, (True, False)):
        chosen = [row for row in rows if row["level"] == level and row["role"].startswith(role)
                  and (row["status"] == "valid") == valid]
        if chosen:
            series.append(PointSeries(x=[order.index(row["lane"]) for row in chosen],
                                      y=[row["median_aggregate_tok_s"] for row in chosen], role=role,
                                      marker=markers.get(level, "o") if valid else "x",
                                      name=f"{level_tag(level)} {role}{'' if valid else ' (VOID)'}"))
    return [Plot(title="Every row over the window (median aggregate tok/s; x: a row that went VOID)",
                 panels=[Points(series=series, x_labels=order, xlabel="visit (window order)", ylabel="tok/s")])]
