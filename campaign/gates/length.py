"""length: the candidate's reply length against the control's, on the replies another gate gathered.

It sends nothing: it reads the source gate's raw records (a greedy or task gate of the same contract, each
lane's first boot), pairs the items both lanes answered (an item is a record's tags without its repeat: a
prompt, a task), and compares the mean completion tokens the engine counted. The rule bounds the relative
change of the mean reply length with a paired bootstrap CI over items (seeded: a rejudge gives the same).

An honest instrument, INCONCLUSIVE with the reason: the source gathered nothing on a lane; too many items
have a reply cut at max_tokens (a cut reply's length is censored: it only says "at least", so a mean over
cut replies hides the change); fewer than ``min_pairs`` items measured on both lanes; a CI that straddles a
bound. An A/A (a candidate that changes nothing) gives identical or noise-only lengths: its CI stays around
zero, so it never FAILs but by the CI's own error rate.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from campaign.contracts.gatespecs import LengthRule, LengthSpec
from campaign.contracts.resolve import EffectiveLane
from campaign.gates.base import Gate, each_plot
from campaign.gates.common.replies import chat_reply
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.presentation import Bars, BarSeries, Bound, Headline, Interval, Intervals, Plot, Presentation

__all__ = ["LengthGate", "ratio_ci"]

RESAMPLES = 10_000


class LengthGate(Gate):
    spec: LengthSpec

    def lengths(self, lane: str) -> tuple[dict[str, list[tuple[int, bool]]], list[str]]:
        """item -> [(completion tokens, cut at max_tokens)] over its repeats, and the replies left out."""
        items: dict[str, list[tuple[int, bool]]] = {}
        problems: list[str] = []
        for record in self.ctx.raw_records(self.spec.source, lane):
            tags = {k: v for k, v in (record.get("tags") or {}).items() if k != "repeat"}
            item = json.dumps(tags, sort_keys=True)
            _, problem = chat_reply(record, allow_empty=True)
            response = record.get("response") or {}
            tokens = (response.get("usage") or {}).get("completion_tokens")
            counted = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
            if problem is not None or not counted:
                problems.append(f"{lane} {item}: {problem or 'the engine reported no completion token count'}")
                continue
            cut = response["choices"][0].get("finish_reason") == "length"
            items.setdefault(item, []).append((tokens, bool(cut)))  # type: ignore[arg-type]  # counted: an int
        return items, problems

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        (ctrl, ctrl_problems), (cand, cand_problems) = self.lengths(control.name), self.lengths(candidate.name)
        for lane, items in ((control.name, ctrl), (candidate.name, cand)):
            if not items:
                result.reasons = [f"the {self.spec.source} gate gathered no measurable reply on lane {lane}: "
                                  "nothing to measure"]
                return result
        if ctrl_problems or cand_problems:
            result.caveats.append(f"{len(ctrl_problems) + len(cand_problems)} replies left out (a failed request "
                                  f"has no length), e.g. {(ctrl_problems + cand_problems)[0]}")
        both = sorted(set(ctrl) & set(cand))
        cut = [item for item in both if any(c for _, c in ctrl[item] + cand[item])]
        rows: list[dict[str, Any]] = [{"item": item, "control_tokens": _mean(ctrl[item]), "candidate_tokens": _mean(cand[item]),
                 "cut": item in cut, "replies": len(ctrl[item]) + len(cand[item])} for item in both]
        result.details = {"source": self.spec.source, "items": rows}
        rule = self.spec.rule
        result.metrics = {"pairs": Metric(value=len(both) - len(cut), denominator=len(both), unit="items",
                                          note="answered on both lanes, none of their replies cut"),
                          "cut": Metric(value=len(cut), denominator=len(both), unit="items",
                                        note="a reply on either lane stopped at max_tokens: length censored")}
        if not both or len(cut) / len(both) > rule.max_cut:
            result.reasons = [f"{len(cut)}/{len(both)} items have a reply cut at max_tokens (more than max_cut "
                              f"{rule.max_cut:g}): a cut reply's length is censored; raise the {self.spec.source} "
                              "gate's max_tokens"]
            return result
        kept = [row for row in rows if not row["cut"]]
        if len(kept) < rule.min_pairs:
            result.reasons = [f"{len(kept)} items measured on both lanes, fewer than min_pairs {rule.min_pairs}"]
            return result
        estimate = ratio_ci([float(r["control_tokens"]) for r in kept],
                            [float(r["candidate_tokens"]) for r in kept], rule.confidence)
        if estimate is None:
            result.reasons = ["the control's replies are empty on the items a resample draws: a relative change "
                              "of their length is not defined"]
            return result
        self._weigh(result, estimate, kept, rule)
        return result

    def _weigh(self, result: GateResult, estimate: dict[str, float], kept: list[dict[str, Any]],
               rule: LengthRule) -> None:
        change, low, high, bound = estimate["change"], estimate["low"], estimate["high"], rule.max_mean_change
        result.details["estimate"] = {**estimate, "confidence": rule.confidence, "pairs": len(kept)}
        result.metrics.update({
            "mean_change": Metric(value=change, unit="relative change of the mean reply length", denominator=len(kept),
                                  note=f"{rule.confidence:.0%} CI [{low:+.4f}, {high:+.4f}]"),
            "control_mean_tokens": Metric(value=estimate["control_mean"], unit="tokens"),
            "candidate_mean_tokens": Metric(value=estimate["candidate_mean"], unit="tokens")})
        words = (f"mean reply length {estimate['control_mean']:.1f} -> {estimate['candidate_mean']:.1f} tokens, "
                 f"{change:+.1%} [{rule.confidence:.0%} CI {low:+.1%}, {high:+.1%}] over {len(kept)} items")
        if -bound <= low and high <= bound:
            result.verdict, verdict_words = Verdict.PASS, f"within +-{bound:.1%}"
        elif low > bound or high < -bound:
            result.verdict, verdict_words = Verdict.FAIL, f"wholly beyond +-{bound:.1%}"
        else:
            verdict_words = f"the CI straddles +-{bound:.1%}: undecided (more items narrow it)"
        result.reasons = [f"{words}: {verdict_words}"]

    @classmethod
    def present(cls, rule: LengthRule | None, result: dict[str, Any]) -> Presentation:
        est = (result.get("details") or {}).get("estimate")
        headlines = [] if not isinstance(est, dict) else [Headline(
            label="mean_change", value=f"{est['change']:+.1%} [{est['confidence']:.0%} CI {est['low']:+.1%}, "
                                       f"{est['high']:+.1%}]",
            unit=f"mean reply length, {est['control_mean']:.1f} -> {est['candidate_mean']:.1f} tokens, "
                 f"{est['pairs']} items")]
        return Presentation(headlines=headlines, plots=each_plot([_change_plot, _item_plot], rule, result))


def ratio_ci(control: list[float], candidate: list[float], confidence: float) -> dict[str, float] | None:
    """The relative change of the mean, candidate over control minus 1, with a percentile bootstrap CI over
    paired items (a seeded generator: the same records give the same interval). None when a resample's
    control replies are all empty (no relative change is defined)."""
    ctrl, cand = np.asarray(control, dtype=float), np.asarray(candidate, dtype=float)
    picks = np.random.default_rng(0).integers(0, ctrl.size, size=(RESAMPLES, ctrl.size))
    ctrl_sums, cand_sums = ctrl[picks].sum(axis=1), cand[picks].sum(axis=1)
    if ctrl.sum() <= 0 or np.any(ctrl_sums <= 0):
        return None
    ratios = cand_sums / ctrl_sums - 1.0
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return {"change": float(cand.sum() / ctrl.sum() - 1.0), "low": float(low), "high": float(high),
            "control_mean": float(ctrl.mean()), "candidate_mean": float(cand.mean())}


def _mean(replies: list[tuple[int, bool]]) -> float:
    return sum(tokens for tokens, _ in replies) / len(replies)


def _change_plot(rule: LengthRule | None, result: dict[str, Any]) -> list[Plot]:
    est = result["details"]["estimate"]
    bounds = [Bound(value=0.0, kind="zero")]
    if rule is not None:
        bounds += [Bound(value=100 * rule.max_mean_change, label="max_mean_change"),
                   Bound(value=-100 * rule.max_mean_change)]
    change, low, high = 100 * est["change"], 100 * est["low"], 100 * est["high"]
    panel = Intervals(categories=["mean reply length"], bounds=bounds, xlabel="", ylabel="change (%)",
                      intervals=[Interval(estimate=change, low=low, high=high,
                                          text=f"{change:+.1f}% [{low:+.1f}, {high:+.1f}]")])
    return [Plot(title=f"Reply length: candidate vs control with its {est['confidence']:.0%} CI "
                       f"({est['pairs']} items)", panels=[panel], height=2.6)]


def _item_plot(rule: LengthRule | None, result: dict[str, Any]) -> list[Plot]:
    rows = result["details"]["items"]
    if not rows:
        return []
    names = [" ".join(str(v) for v in json.loads(row["item"]).values()) + (" (cut)" if row["cut"] else "")
             for row in rows]
    bars = Bars(categories=names, horizontal=True, xlabel="mean completion tokens over repeats", ylabel="item",
                series=[BarSeries(name="control", role="control", values=[row["control_tokens"] for row in rows]),
                        BarSeries(name="candidate", role="candidate",
                                  values=[row["candidate_tokens"] for row in rows])])
    return [Plot(title="Reply length per item (cut: a reply stopped at max_tokens, left out)", panels=[bars],
                 height=0.8 + 0.3 * len(rows))]
