"""kl: for axes that are not meant to be lossless, KL(oracle || lane) of next-token distributions along
fixed reference texts, from the top-k logprobs each lane returns while the text is teacher-forced.

Tail treatment (stated in every result): the distribution is coarsened to the oracle's top-k tokens
plus one bucket for the rest of the vocabulary, on both sides. Coarsening can only lower KL (data
processing inequality), so the numbers are lower bounds of the full-vocabulary KL. A token in the
oracle's top-k that the lane did not return is given the lane's lowest returned probability (an upper
bound on its true probability); how often that happened is reported.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import StrictModel
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, each_plot, metric_headlines, register
from campaign.gates.common.resolution import judge_bound
from campaign.gates.common.stats import percentile
from campaign.gates.common.tokens import Prepared, prepared_on_control, read_prepared, score_texts
from campaign.gates.records import VisitKey, select
from campaign.gates.result import GateResult, Metric, combine
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.scoring import Position
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Bound, Plot, Points, PointSeries, Presentation

__all__ = ["TAIL_TREATMENT", "KlGate", "KlRule", "KlSpec", "kl_topk", "percentile"]


class KlRule(StrictModel):
    max_mean: float | None = Field(None, ge=0, description="nats: mean per-token KL(oracle || lane), all texts.")
    max_p99: float | None = Field(None, ge=0, description="nats: 99th percentile per-token KL, all texts.")
    max_max: float | None = Field(None, ge=0, description="nats: largest per-token KL.")

    @model_validator(mode="after")
    def _some_bound(self) -> "KlRule":
        if self.max_mean is None and self.max_p99 is None and self.max_max is None:
            raise ValueError("give at least one of max_mean, max_p99, max_max")
        return self


class KlSpec(GateSpecBase):
    kind: Literal["kl"]
    input: str = Field(description="Input set of reference texts (rows with `text`).")
    oracle: str | None = Field(None, description="Lane whose distributions are the reference; default: the "
                                                 "candidate's control.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every position.")
    rule: KlRule


TAIL_TREATMENT = ("KL over the oracle's top-k tokens plus one bucket for the rest of the vocabulary (a lower "
                  "bound of the full KL); an oracle top-k token missing from the lane's top-k gets the lane's "
                  "lowest returned probability")
_EPS = 1e-12


def kl_topk(oracle: Position, lane: Position) -> tuple[float, int]:
    """KL(oracle || lane) at one position under the stated tail treatment, and how many oracle tokens
    the lane did not return."""
    seen, p, q, missing = set(), [], [], 0
    floor = lane.floor
    for alt in oracle.top:
        key = (alt.token, alt.text) if alt.token is not None else (None, alt.text)
        if key in seen:
            continue
        seen.add(key)
        got = lane.lookup(alt.token, alt.text)
        if got is None:
            missing += 1
            got = floor if floor is not None else math.log(_EPS)
        p.append(math.exp(alt.logprob))
        q.append(math.exp(got))
    p_tail = max(0.0, 1.0 - sum(p))
    q_tail = max(_EPS, 1.0 - sum(q))
    kl = sum(pi * (math.log(max(pi, _EPS)) - math.log(max(qi, _EPS))) for pi, qi in zip(p, q, strict=False))
    if p_tail > _EPS:
        kl += p_tail * (math.log(p_tail) - math.log(q_tail))
    return max(kl, 0.0), missing


@register
class KlGate(LiveGate):
    fail_claims = "worse than its control"
    spec: KlSpec

    def planned_requests(self, visit: Visit) -> int:
        return self.requests_per_row()

    @classmethod
    def present(cls, rule: KlRule | None, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("kl_mean",)),
                            plots=each_plot([_position_plot], rule, result))

    # the control's second boot scores the texts again: KL of the control against itself is what the
    # instrument resolves on this device, and no bound finer than it can be judged
    control_reruns = 1

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        lane = run.lane
        owner = lane.control if lane.role == "candidate" and lane.control else lane.name
        refs = await prepared_on_control(run, sink, self.ctx.raw_records(self.gate_id, owner),
                                         self.ctx.input_paths[self.spec.input], purpose="reference", need_text=True)
        await score_texts(run, sink, refs, purpose="kl", top_k=self.spec.top_k)

    def _oracle(self, candidate: EffectiveLane) -> EffectiveLane:
        return self.ctx.contract.lanes[self.spec.oracle or candidate.control or ""]

    def _prepared(self) -> dict[str, Prepared]:
        for control in self.ctx.contract.controls():
            found = read_prepared(self.ctx.raw_records(self.gate_id, control.name), "reference")
            if found:
                return found
        return {}

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        oracle = self._oracle(candidate)
        result = self.new_result(candidate, control)
        result.details["tail_treatment"] = TAIL_TREATMENT
        result.details["oracle"] = oracle.name
        if oracle.name == candidate.name:
            result.reasons = ["the oracle is the candidate itself: KL is zero by construction"]
            return result
        refs = self._prepared()
        problems = [f"reference {k}: {p.error}" for k, p in refs.items() if p.prompt is None or p.text is None]
        if not refs or problems:
            result.reasons = ["instrument: reference texts could not be prepared as tokens", *problems[:10]]
            return result
        scores = self._scores(refs, (oracle, candidate), problems)
        if problems:
            result.reasons = ["instrument: not every reference text was scored with top-k logprobs on both lanes",
                              *problems[:10]]
            return result
        distinct = {tuple((a.token, a.text, round(a.logprob, 6)) for a in pos.top)
                    for item in refs for pos in scores[oracle.name][item]}
        if len(distinct) < 2:
            result.reasons = [f"instrument: the oracle {oracle.name} returned the same distribution at every "
                              "position; it is not scoring the texts"]
            return result
        values, rows, missing_total = _divergences(refs, scores[oracle.name], scores[candidate.name])
        if not values:
            result.reasons = ["instrument: no positions to compare"]
            return result
        self._weigh(result, values, rows, missing_total, oracle, candidate, self._floor(refs, oracle, scores))
        return result

    def _floor(self, refs: dict[str, Prepared], oracle: EffectiveLane,
               scores: dict[str, dict[str, list[Position]]]) -> list[float] | None:
        """Per-token KL of the oracle against its own rerun (the same texts scored after its candidates): what
        the instrument resolves. None when the oracle was not booted again (not a control, or an older bundle)."""
        rerun = str(VisitKey(oracle.name, 1))
        records = self.ctx.raw_records(self.gate_id, rerun)
        if not select(records, purpose="kl"):
            return None
        again: dict[str, list[Position]] = {}
        adapter = adapter_for(oracle.engine)
        for item, prepared in refs.items():
            assert prepared.prompt is not None and prepared.text is not None  # judge stops on unprepared texts
            try:
                again[item] = adapter.parse_score(select(records, purpose="kl", item=item), prepared.prompt,
                                                  prepared.text)[:-1]
            except EngineError:
                return None  # the floor is not measured (the caveat says so); the rule is judged as written
        values, _, _ = _divergences(refs, scores[oracle.name], again)
        return values or None

    def _scores(self, refs: dict[str, Prepared], lanes: tuple[EffectiveLane, EffectiveLane],
                problems: list[str]) -> dict[str, dict[str, list[Position]]]:
        """Each lane's positions along every reference text (the last, past the text, dropped)."""
        scores: dict[str, dict[str, list[Position]]] = {}
        for lane in lanes:
            adapter, records = adapter_for(lane.engine), self.ctx.raw_records(self.gate_id, lane.name)
            scores[lane.name] = {}
            for item, prepared in refs.items():
                # for mypy: judge stops on a text that was not prepared
                assert prepared.prompt is not None and prepared.text is not None
                try:
                    scores[lane.name][item] = adapter.parse_score(select(records, purpose="kl", item=item),
                                                                  prepared.prompt, prepared.text)[:-1]
                except EngineError as exc:
                    problems.append(f"{lane.name} reference {item}: {exc}")
                    continue
                if any(not pos.top for pos in scores[lane.name][item]):
                    problems.append(f"{lane.name} reference {item}: a position came back without top-k logprobs")
        return scores

    def _weigh(self, result: GateResult, values: list[float], rows: list[dict[str, Any]], missing_total: int,
               oracle: EffectiveLane, candidate: EffectiveLane, floor: list[float] | None) -> None:
        mean, p99, top = sum(values) / len(values), percentile(values, 99), max(values)
        result.metrics = {
            "kl_mean": Metric(value=round(mean, 9), unit="nats", denominator=len(values),
                              note=f"per-token KL({oracle.name} || {candidate.name}), {len(rows)} texts"),
            "kl_p99": Metric(value=round(p99, 9), unit="nats", denominator=len(values)),
            "kl_max": Metric(value=round(top, 9), unit="nats", denominator=len(values)),
            "oracle_tokens_missing_from_lane_topk": Metric(value=missing_total,
                                                           denominator=len(values) * self.spec.top_k,
                                                           unit="token slots"),
        }
        result.details["texts"] = rows
        resolves = _statistics(floor) if floor else None
        if resolves is not None and floor is not None:
            result.metrics["control_self_kl_mean"] = Metric(
                value=round(resolves["mean"], 9), unit="nats", denominator=len(floor),
                note=f"KL({oracle.name} || {oracle.name} booted again): what the instrument resolves here")
            result.metrics["control_self_kl_max"] = Metric(value=round(resolves["max"], 9), unit="nats",
                                                           denominator=len(floor))
        else:
            result.caveats.append(f"no rerun of the oracle {oracle.name} scored every text in this window (not a control, "
                                  "an older bundle, or a rerun that failed): what the instrument resolves on this "
                                  "device is not measured, and each bound is judged as written")
        verdicts = []
        for name, bound, value in (("mean", self.spec.rule.max_mean, mean), ("p99", self.spec.rule.max_p99, p99),
                                   ("max", self.spec.rule.max_max, top)):
            if bound is None:
                continue
            resolved = (resolves[name], f"KL of {oracle.name} against itself booted again, {name}") if resolves else None
            verdict, reason = judge_bound(f"KL {name}", value, bound, resolved)
            verdicts.append(result.weigh(verdict, f"{reason} over {len(values)} tokens"))
        result.verdict = combine(verdicts)  # the rule's validation guarantees at least one bound
        result.caveats.append("tail: " + TAIL_TREATMENT)


def _statistics(values: list[float]) -> dict[str, float]:
    return {"mean": sum(values) / len(values), "p99": percentile(values, 99), "max": max(values)}


def _divergences(refs: dict[str, Prepared], oracle: dict[str, list[Position]],
                 lane: dict[str, list[Position]]) -> tuple[list[float], list[dict[str, Any]], int]:
    """Per-token KL over every reference text, a summary row per text, and the oracle tokens the lane
    did not return."""
    values, rows, missing_total = [], [], 0
    for item in refs:
        kls = []
        for po, pl in zip(oracle[item], lane[item], strict=False):
            kl, missing = kl_topk(po, pl)
            kls.append(kl)
            missing_total += missing
        values += kls
        rows.append({"reference": item, "tokens": len(kls), "mean": sum(kls) / len(kls) if kls else None,
                     "p99": percentile(kls, 99) if kls else None, "max": max(kls, default=None),
                     "per_position": [round(kl, 9) for kl in kls]})
    return values, rows, missing_total


def _position_plot(rule: KlRule | None, result: dict[str, Any]) -> list[Plot]:
    texts = [text for text in result["details"].get("texts") or [] if text.get("per_position")]
    if not texts:
        return []
    limits = [] if rule is None else [("max_mean", rule.max_mean), ("max_p99", rule.max_p99), ("max_max", rule.max_max)]
    bounds = [Bound(value=value, label=name) for name, value in limits if value is not None]
    series = [PointSeries(name=str(text["reference"]), x=list(range(len(text["per_position"]))),
                          y=text["per_position"], line=True) for text in texts]
    return [Plot(title=f"KL({result.get('control')} || {result.get('candidate')}) per token position",
                 panels=[Points(series=series, bounds=bounds, xlabel="token position in the reference",
                                ylabel="KL (nats)")], height=2.8)]
