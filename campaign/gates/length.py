"""length: the candidate's reply length against the control's, on the replies another gate gathered.

It sends nothing: it reads the source gate's raw records (a greedy or task gate of the same contract, each
lane's first boot), pairs the items both lanes answered (an item is a record's tags without its repeat: a
prompt, a task), and compares the mean completion tokens the engine counted. The rule bounds the relative
change of the mean reply length with a paired bootstrap CI over items (seeded: a rejudge gives the same).

An honest instrument, INCONCLUSIVE with the reason: the source gathered nothing on a lane; more than
``max_left_out`` of the items are left out (cut at max_tokens on both lanes, a failed request, answered on
one lane only: a runaway or a timeout on the candidate must not leave only the short replies to weigh);
fewer than ``min_pairs`` items weighed; a CI that straddles a bound. A reply cut on one lane only says
"at least that long": counted at its cut length it bounds the change, so the gate can then FAIL (the bound
is already past the limit) but never PASS. An A/A (a candidate that changes nothing) gives identical or noise-only lengths: its CI stays around
zero, so it never FAILs but by the CI's own error rate.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from campaign.contracts.gatespecs import GateSpecBase, LoadedContract
from campaign.contracts.model import MAX_COUNT, NAME_PATTERN, StrictModel
from campaign.contracts.resolve import EffectiveLane
from campaign.gates.base import Gate, each_plot, register
from campaign.gates.common.replies import chat_reply
from campaign.gates.greedy import GreedySpec
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.gates.task.spec import TaskSpec
from campaign.presentation import Bars, BarSeries, Bound, Headline, Interval, Intervals, Plot, Presentation

__all__ = ["LengthGate", "LengthRule", "LengthSpec", "ratio_ci"]


class LengthRule(StrictModel):
    """The candidate's mean reply length (tokens, as the engine counts them) against the control's, over the
    items both answered: PASS when the whole CI of the relative change lies within +-max_mean_change, FAIL
    when it lies wholly beyond it, INCONCLUSIVE when it straddles a bound."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    max_mean_change: float = Field(gt=0, le=10, description="Largest relative change of the mean reply length "
                                                            "(0.2: the candidate's replies are within 20% as "
                                                            "long as the control's).")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Two-sided confidence of the paired bootstrap CI "
                                                              "(over items, seeded: a rejudge gives the same).")
    max_left_out: float = Field(0.2, ge=0, lt=1, description="Largest share of items left out of the comparison: "
                                                             "a reply cut at max_tokens on both lanes (its length "
                                                             "censored), a failed request, an item one lane did "
                                                             "not answer. More: INCONCLUSIVE. A reply cut on one "
                                                             "lane only bounds the change: FAIL or INCONCLUSIVE, "
                                                             "never PASS.")
    min_pairs: int = Field(5, ge=2, le=MAX_COUNT, description="Fewest items weighed (measured on both lanes, none "
                                                              "left out) for a verdict.")


class LengthSpec(GateSpecBase):
    """Reads the replies another gate gathered (its raw records, each lane's first boot) and sends nothing."""

    SINCE: ClassVar[str] = "0.3.0"  # the reference's "since" column for each of its fields

    kind: Literal["length"]
    input: None = Field(None, description="None: the items are the source gate's.")
    source: str = Field(pattern=NAME_PATTERN, description="Id of the gate whose replies are measured: a greedy "
                                                          "or task gate of this contract.")
    rule: LengthRule

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        gates = {gate.gate_id: gate for gate in loaded.contract.gates}
        source = gates.get(self.source)
        if source is None:
            raise loaded.error(("gates", index, "source"),
                               f"{self.source!r} names no gate of this contract (gates: {', '.join(sorted(gates))})")
        if not isinstance(source, (GreedySpec, TaskSpec)):
            raise loaded.error(("gates", index, "source"),
                               f"gate {self.source!r} is a {source.kind} gate: replies are read from a greedy or "
                               "task gate")


RESAMPLES = 10_000


@register
class LengthGate(Gate):
    fail_claims = "replies of another length than its control's"
    spec: LengthSpec

    def lengths(self, lane: str) -> tuple[dict[str, list[tuple[int, bool]]], dict[str, list[str]]]:
        """item -> [(completion tokens, cut at max_tokens)] over its repeats; item -> why each reply without
        a length (a failed request) has none."""
        items: dict[str, list[tuple[int, bool]]] = {}
        failed: dict[str, list[str]] = {}
        for record in self.ctx.raw_records(self.spec.source, lane):
            tags = {k: v for k, v in (record.get("tags") or {}).items() if k != "repeat"}
            item = json.dumps(tags, sort_keys=True)
            _, problem = chat_reply(record, allow_empty=True)
            response = record.get("response") or {}
            tokens = (response.get("usage") or {}).get("completion_tokens")
            if problem is not None or not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
                failed.setdefault(item, []).append(problem or "the engine reported no completion token count")
                continue
            cut = response["choices"][0].get("finish_reason") == "length"
            items.setdefault(item, []).append((tokens, bool(cut)))
        return items, failed

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        (ctrl, ctrl_failed), (cand, cand_failed) = self.lengths(control.name), self.lengths(candidate.name)
        for lane, items in ((control.name, ctrl), (candidate.name, cand)):
            if not items:
                result.reasons = [f"the {self.spec.source} gate gathered no measurable reply on lane {lane}: "
                                  "nothing to measure"]
                return result
        sorted_items = _sort(ctrl, ctrl_failed, cand, cand_failed)
        rows: list[dict[str, Any]] = [{"item": item, "control_tokens": _mean(ctrl[item]),
                                       "candidate_tokens": _mean(cand[item]), "cut": where,
                                       "replies": len(ctrl[item]) + len(cand[item])}
                                      for where, group in sorted_items.items() if where != "left_out"
                                      for item in group]
        result.details = {"source": self.spec.source, "items": sorted(rows, key=lambda row: row["item"]),
                          "left_out": {item: (ctrl_failed.get(item, []) + cand_failed.get(item, []))[:1] or
                                       ["answered on one lane only"] for item in sorted_items["left_out"]}}
        if sorted_items["left_out"]:
            first = sorted_items["left_out"][0]
            result.caveats.append(f"{len(sorted_items['left_out'])} items left out (a failed request has no length; "
                                  f"an item one lane did not answer has no pair), e.g. {first}: "
                                  f"{result.details['left_out'][first][0]}")
        total = sum(len(group) for group in sorted_items.values())
        result.metrics = {name: Metric(value=len(sorted_items[key]), denominator=total, unit="items", note=note)
                          for name, key, note in _COUNTS}
        rule = self.spec.rule
        aside = len(sorted_items["both"]) + len(sorted_items["left_out"])
        if aside / total > rule.max_left_out:
            result.reasons = [f"{aside}/{total} items are left out of the comparison (more than max_left_out "
                              f"{rule.max_left_out:g}): {len(sorted_items['both'])} cut at max_tokens on both "
                              f"lanes (a cut length is censored: raise the {self.spec.source} gate's max_tokens), "
                              f"{len(sorted_items['left_out'])} failed on a lane or answered on one lane only"]
            return result
        self._weigh(result, rows, sorted_items, rule)
        return result

    def _weigh(self, result: GateResult, rows: list[dict[str, Any]], sorted_items: dict[str, list[str]],
               rule: LengthRule) -> None:
        """A cut on one lane only says that lane's reply is at least that long: counted at its cut length, it
        gives a bound of the change, never an estimate. So a verdict then is a FAIL the bound already shows,
        or INCONCLUSIVE; a PASS needs every item it weighs measured whole on both lanes."""
        one_sided = [key for key in ("candidate", "control") if sorted_items[key]]
        weighed = [row for row in rows if row["cut"] in ("none", *one_sided)]
        if len(weighed) < rule.min_pairs:
            result.reasons = [f"{len(weighed)} items measured on both lanes, fewer than min_pairs {rule.min_pairs}"]
            return
        estimate = ratio_ci([float(r["control_tokens"]) for r in weighed],
                            [float(r["candidate_tokens"]) for r in weighed], rule.confidence)
        if estimate is None:
            result.reasons = ["the control's replies are empty on the items a resample draws: a relative change "
                              "of their length is not defined"]
            return
        change, low, high, bound = estimate["change"], estimate["low"], estimate["high"], rule.max_mean_change
        result.details["estimate"] = {**estimate, "confidence": rule.confidence, "pairs": len(weighed),
                                      "censored": one_sided}
        result.metrics.update({
            "mean_change": Metric(value=change, unit="relative change of the mean reply length", denominator=len(weighed),
                                  note=f"{rule.confidence:.0%} CI [{low:+.4f}, {high:+.4f}]"
                                       + (f"; a bound: replies cut on the {' and '.join(one_sided)} only"
                                          if one_sided else "")),
            "control_mean_tokens": Metric(value=estimate["control_mean"], unit="tokens"),
            "candidate_mean_tokens": Metric(value=estimate["candidate_mean"], unit="tokens")})
        words = (f"mean reply length {estimate['control_mean']:.1f} -> {estimate['candidate_mean']:.1f} tokens, "
                 f"{change:+.1%} [{rule.confidence:.0%} CI {low:+.1%}, {high:+.1%}] over {len(weighed)} items")
        verdict, verdict_words = _verdict(low, high, bound, one_sided, sorted_items)
        result.verdict = result.weigh(verdict, f"{words}: {verdict_words}")

    @classmethod
    def present(cls, rule: LengthRule | None, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=_headlines(result), plots=each_plot([_change_plot, _item_plot], rule, result))


def _headlines(result: dict[str, Any]) -> list[Headline]:
    est = (result.get("details") or {}).get("estimate")
    try:
        return [] if not isinstance(est, dict) else [Headline(
            label="mean_change", value=f"{est['change']:+.1%} [{est['confidence']:.0%} CI {est['low']:+.1%}, "
                                       f"{est['high']:+.1%}]",
            unit=f"mean reply length, {est['control_mean']:.1f} -> {est['candidate_mean']:.1f} tokens, "
                 f"{est['pairs']} items")]
    except (KeyError, TypeError, ValueError):  # a damaged or hand-made result: shown without its headline
        return []


def ratio_ci(control: list[float], candidate: list[float], confidence: float) -> dict[str, float] | None:
    """The relative change of the mean, candidate over control minus 1, with a percentile bootstrap CI over
    paired items (a seeded generator: the same records give the same interval). None when a resample's
    control replies are all empty (no relative change is defined)."""
    ctrl, cand = np.asarray(control, dtype=float), np.asarray(candidate, dtype=float)
    rng, n = np.random.default_rng(0), ctrl.size
    ctrl_sums, cand_sums = np.empty(RESAMPLES), np.empty(RESAMPLES)
    chunk = max(1, 2_000_000 // n)  # bounded memory for many items, as stats.bootstrap_mean_ci draws
    for start in range(0, RESAMPLES, chunk):
        stop = min(RESAMPLES, start + chunk)
        picks = rng.integers(0, n, size=(stop - start, n))
        ctrl_sums[start:stop], cand_sums[start:stop] = ctrl[picks].sum(axis=1), cand[picks].sum(axis=1)
    if ctrl.sum() <= 0 or np.any(ctrl_sums <= 0):
        return None
    ratios = cand_sums / ctrl_sums - 1.0
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return {"change": float(cand.sum() / ctrl.sum() - 1.0), "low": float(low), "high": float(high),
            "control_mean": float(ctrl.mean()), "candidate_mean": float(cand.mean())}


def _mean(replies: list[tuple[int, bool]]) -> float:
    return sum(tokens for tokens, _ in replies) / len(replies)


# (metric, group, note): where each item went
_COUNTS = (("pairs", "none", "answered whole on both lanes"),
           ("cut_on_both", "both", "a reply stopped at max_tokens on both lanes: left out, its length censored"),
           ("cut_on_candidate", "candidate", "a reply stopped at max_tokens on the candidate only: at least that long"),
           ("cut_on_control", "control", "a reply stopped at max_tokens on the control only: at least that long"),
           ("left_out", "left_out", "a failed request on a lane, or answered on one lane only"))


def _sort(ctrl: dict[str, list[tuple[int, bool]]], ctrl_failed: dict[str, list[str]],
          cand: dict[str, list[tuple[int, bool]]], cand_failed: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every item either lane met, by where a cut fell: none, both, candidate, control; or left out (a failed
    request on a lane, or an item one lane never answered: a length regression can hide in either)."""
    groups: dict[str, list[str]] = {"none": [], "both": [], "candidate": [], "control": [], "left_out": []}
    for item in sorted(set(ctrl) | set(cand) | set(ctrl_failed) | set(cand_failed)):
        if item in ctrl_failed or item in cand_failed or item not in ctrl or item not in cand:
            groups["left_out"].append(item)
            continue
        ctrl_cut, cand_cut = any(c for _, c in ctrl[item]), any(c for _, c in cand[item])
        groups["both" if ctrl_cut and cand_cut else "candidate" if cand_cut else "control" if ctrl_cut
               else "none"].append(item)
    return groups


def _verdict(low: float, high: float, bound: float, one_sided: list[str],
             sorted_items: dict[str, list[str]]) -> tuple[Verdict, str]:
    if not one_sided:
        if -bound <= low and high <= bound:
            return Verdict.PASS, f"within +-{bound:.1%}"
        if low > bound or high < -bound:
            return Verdict.FAIL, f"wholly beyond +-{bound:.1%}"
        return Verdict.INCONCLUSIVE, f"the CI straddles +-{bound:.1%}: undecided (more items narrow it)"
    counts = ", ".join(f"{len(sorted_items[key])} cut on the {key} only" for key in one_sided)
    # cut lengths count at their cut: the candidate's then only grow (a lower bound of the change), the
    # control's only grow (an upper bound); a bound past the limit is a FAIL whatever the cut replies hid
    if one_sided == ["candidate"] and low > bound:
        return Verdict.FAIL, f"longer than +{bound:.1%} already with the cut replies at their cut length ({counts})"
    if one_sided == ["control"] and high < -bound:
        return Verdict.FAIL, f"shorter than -{bound:.1%} already with the cut replies at their cut length ({counts})"
    return Verdict.INCONCLUSIVE, (f"{counts}: a cut length says only 'at least', so this is a bound of the change, "
                                  "not an estimate; raise the source gate's max_tokens")


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
    names = [" ".join(str(v) for v in json.loads(row["item"]).values())
             + ("" if row["cut"] in ("none", False) else f" (cut: {row['cut']})") for row in rows]
    bars = Bars(categories=names, horizontal=True, xlabel="mean completion tokens over repeats", ylabel="item",
                series=[BarSeries(name="control", role="control", values=[row["control_tokens"] for row in rows]),
                        BarSeries(name="candidate", role="candidate",
                                  values=[row["candidate_tokens"] for row in rows])])
    return [Plot(title="Reply length per item (cut: a reply stopped at max_tokens on that lane)", panels=[bars],
                 height=0.8 + 0.3 * len(rows))]
