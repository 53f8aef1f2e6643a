"""The report's plots, drawn from the plot data a gate result carries: the speed judge's own presentation
on hand-written records, and results of the other kinds, written before results carried a presentation, in
the shape their judges write (their gate derives it, as the report does for an older bundle). Each plot
keeps its title and axis labels as text in the SVG (what a reader searches and the browser test checks)."""

from __future__ import annotations

import re
from pathlib import Path

from campaign.receipts.plots import plots_for
from campaign.window.report import stored_presentation
from tests.support.speedrecords import TOKENS, load_gates, rates, speed_contract, write_boots

LANES = """\
- {name: base, role: control}
- {name: cand, role: candidate, axis: [args.threads], set: {args: {--threads: "2"}}}
"""


def _texts(svg: str) -> str:
    return " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


def _labelled(plot) -> bool:  # noqa: ANN001
    text = _texts(plot.svg)
    return plot.title[:40] in text and plot.xlabel[:30] in text and plot.ylabel[:30] in text


def test_speed_plots_from_the_judges_own_result(tmp_path: Path) -> None:
    loaded, (gate,) = load_gates(tmp_path, speed_contract(LANES, f"""\
        - {{kind: speed, input: p, concurrency: [1, 2], max_tokens: {TOKENS}, reps: 2, max_boot_pairs: 3}}"""))
    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [rates(1.10, wobble=0.01), rates(1.11, wobble=-0.01)])
    judged = gate.judge(loaded.lanes["cand"], loaded.lanes["base"])
    result = {**judged.dump(), "presentation": gate.presentation(judged).model_dump()}
    plots = plots_for(result)
    titles = [plot.title for plot in plots]
    assert titles[0].startswith("Speed change per level")
    assert sum(title.startswith(("C1:", "C2:")) for title in titles) == 4  # per level: boots, and prompts
    assert any(title.startswith("Every row over the window") for title in titles)
    assert all(_labelled(plot) for plot in plots), titles
    assert all(plot.svg.startswith("<svg") and "<script" not in plot.svg for plot in plots)
    change = _texts(plots[0].svg)
    assert "+10" in change or "+11" in change  # the estimate's own figure is annotated beside its CI


def test_the_other_kinds_draw_their_evidence_and_a_result_without_it_draws_nothing() -> None:
    tf = {"kind": "teacher_forced", "rule": {"max_site_delta": 1.0, "noninferiority_max": 0.5},
          "details": {"sites": [{"scored": True, "prompt": "haiku", "site": 5, "delta_control_server": 0.02,
                                 "delta_candidate_server": -0.11}],
                      "references": [{"reference": "capital", "max_abs_delta": 0.1, "mean_abs_delta": 0.02}]}}
    kl = {"kind": "kl", "rule": {"max_mean": 0.05}, "control": "base", "candidate": "kvq8",
          "details": {"texts": [{"reference": "capital", "per_position": [0.0, 0.01, 0.003]}]}}
    task = {"kind": "task", "rule": {"max_loss_upper": 0.3, "confidence": 0.95},
            "metrics": {"loss_upper_bound": {"value": 0.139}},
            "details": {"by_kind": {"humaneval": {"win": 1, "tie": 2, "loss": 1}, "user": {"win": 0, "tie": 4, "loss": 0}}}}
    needle = {"kind": "needle", "details": {"variants": ["single"], "ladders": {
        "base": {"rungs": [{"rung": 256, "attempts": {"single": [{"prefill_tok_s_client": 180.0, "passed": True}]}}]}}}}
    drawn = {name: _drawn(result) for name, result in (("tf", tf), ("kl", kl), ("task", task), ("needle", needle))}
    assert [len(plots) for plots in drawn.values()] == [2, 1, 1, 1]
    assert all(_labelled(plot) for plots in drawn.values() for plot in plots)
    assert "Clopper-Pearson" in _texts(drawn["task"][0].svg) and "max_site_delta" in _texts(drawn["tf"][0].svg)
    assert _drawn({"kind": "kl", "rule": {}, "details": {"texts": [{"reference": "x", "mean": 0.0}]}}) == []
    assert _drawn({"kind": "greedy", "details": {}}) == []
    assert _drawn({"kind": "no such kind", "details": {}}) == []  # a newer tool's kind: shown without plots


def _drawn(result: dict) -> list:
    presentation = stored_presentation(result)
    return plots_for({"presentation": presentation.model_dump() if presentation else None})


def test_the_report_draws_the_data_a_result_carries_whatever_its_kind() -> None:
    """receipts knows no gate kind: a kind it has never heard of is drawn from the plot data its result
    carries, each panel type with its bounds, legends and labels."""
    from campaign.presentation import (
        Bars,
        BarSeries,
        Bound,
        Interval,
        Intervals,
        Plot,
        Points,
        PointSeries,
        Presentation,
    )

    presentation = Presentation(plots=[
        Plot(title="Stacked outcomes", heights=[2, 1], panels=[
            Bars(categories=["a", "b"], layout="stacked", horizontal=True, xlabel="tasks", ylabel="group",
                 series=[BarSeries(name="win", role="win", values=[1, 2]), BarSeries(name="loss", role="loss", values=[2, 0])]),
            Bars(categories=["rate"], horizontal=True, value_range=[0, 100], series=[BarSeries(values=[12.5], role="loss")],
                 bounds=[Bound(value=30, label="margin (a_rule_field)", kind="target")], xlabel="bound (%)")]),
        Plot(title="Lines over positions", panels=[Points(series=[PointSeries(name="ref one", x=[0, 1, 2], y=[0.1, 0.2, 0.1], line=True)],
                                                          bounds=[Bound(value=0.15, label="max_something")],
                                                          xlabel="position", ylabel="nats")]),
        Plot(title="An estimate with its CI", panels=[Intervals(categories=["C1"], bounds=[Bound(value=0, kind="zero")],
                                                                intervals=[Interval(estimate=4.0, low=1.0, high=7.0, text="+4.0% [+1.0, +7.0]")],
                                                                xlabel="level", ylabel="change (%)")])])
    plots = plots_for({"kind": "a kind from a newer tool", "presentation": presentation.model_dump()})
    assert [plot.title for plot in plots] == ["Stacked outcomes", "Lines over positions", "An estimate with its CI"]
    assert all(_labelled(plot) for plot in plots)
    texts = [_texts(plot.svg) for plot in plots]
    assert "margin (a_rule_field)" in texts[0] and "max_something" in texts[1] and "+4.0% [+1.0, +7.0]" in texts[2]
