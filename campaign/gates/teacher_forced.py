"""teacher_forced: let the model score its own divergences.

Live, on every lane: greedy continuations of the prompts with generation-time logprobs; each lane's own
continuation teacher-forced on its own server (the instrument check); reference texts teacher-forced
(noninferiority). On a candidate: at each prompt where its greedy tokens leave the control's, the shared
prefix is scored on the candidate's server; the control is booted again after its candidates and scores
the same prefixes (and generates once more, so its boot-to-boot drift is measured).

Offline: the instrument must give each lane's greedy tokens back at rank 1 with their generation-time
logprobs (within the frozen tolerance) before any margin counts; otherwise INCONCLUSIVE with the
evidence. The tolerance is the rule's, or each lane's default for its declared dtype (decode and
prefill kernels round differently in bf16: tenths of a nat; a broken instrument is off by nats); the
tolerance applied and the drift measured (max and mean per lane) are in every result. With ``instrument:
scoring`` (GPU engines, whose decode and prefill paths differ by more than any fixed tolerance measured
on a CPU: llama-server with CUDA on an H200 drifts up to 0.5 nats on SmolLM2-135M, with graphs on or off
and any sampler setting, growing along the continuation from an exact first token) the scores are held
to their own path: the drift is measured per lane, capped by the rule's smallest margin, and twice it is the tie
margin of the rank-1 check. Then per site: |delta logprob| between the two lanes' tokens on each server, the cross-server
|delta| for the same token, and which lane's token is rank 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from campaign.contracts.engines import ENGINES, instrument_tolerance
from campaign.contracts.gatespecs import SINCE_0_3, GateSpecBase, LoadedContract
from campaign.contracts.model import StrictModel
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, each_plot, metric_headlines, register
from campaign.gates.common.resolution import judge_bound
from campaign.gates.common.tokens import Prepared, prepared_on_control, read_prepared, score_texts
from campaign.gates.records import VisitKey, select
from campaign.gates.result import GateResult, Metric, Verdict, combine
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.scoring import Generation, Position, TokenSeq
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Bars, BarSeries, Bound, Plot, Presentation

__all__ = ["TeacherForcedGate", "TeacherForcedRule", "TeacherForcedSpec", "check_instrument", "first_divergence",
           "scoring_cap", "settle_measured"]


class TeacherForcedRule(StrictModel):
    instrument: Literal["generation", "scoring"] = Field(
        "generation", description="What the instrument check holds the teacher-forced scores to. generation: each "
                                  "lane's greedy tokens come back with their generation-time logprobs within "
                                  "instrument_tolerance, at rank 1 (CPU engines give them back exactly). scoring: "
                                  "every margin is scored on one path (teacher-forced on both servers), so the "
                                  "check is that path's own: the drift from generation is measured per lane on "
                                  "this engine and device and recorded, must stay within instrument_tolerance (or, "
                                  "left out, the rule's smallest margin), and each greedy token must be rank 1 "
                                  "within twice that drift (each of two tokens may move by it). For GPU engines, whose decode and prefill kernels "
                                  "differ (llama-server with CUDA on an H200: up to 0.5 nats on SmolLM2-135M).",
        json_schema_extra=SINCE_0_3)
    instrument_tolerance: float | None = Field(
        None, ge=0, description="nats: the most a lane's own greedy token may move between its generation-time "
                                "logprob and its teacher-forced score (and its rank-1 tie margin); beyond it the "
                                "scoring instrument is broken and the gate is INCONCLUSIVE. Left out: each lane's "
                                "default for the dtype its args declare (vLLM/SGLang `--dtype`: bfloat16 0.5, "
                                "float32 0.001, see contracts.engines.INSTRUMENT_TOLERANCE); a lane whose "
                                "dtype is not declared makes leaving it out a contract error.")
    max_site_delta: float | None = Field(
        None, ge=0, description="nats: at every divergence site, |logp(control token) - logp(candidate token)| "
                                "on the control's server is at most this: the lanes disagree only at near-ties.")
    max_cross_server_delta: float | None = Field(
        None, ge=0, description="nats: the same token at the same site scored on both servers differs by at "
                                "most this (0.0: the servers share prefill numerics).")
    noninferiority_max: float | None = Field(
        None, ge=0, description="nats: max |delta logprob| over all reference-text tokens, candidate vs control.")
    noninferiority_mean: float | None = Field(
        None, ge=0, description="nats: mean |delta logprob| over all reference-text tokens.")
    min_self_fidelity: float | None = Field(
        None, ge=0, le=1, description="Fraction of the candidate's greedy tokens that are strictly rank 1 "
                                      "when teacher-forced on its own server.")
    nothing_to_weigh: Literal["INCONCLUSIVE", "PASS"] = Field(
        "INCONCLUSIVE", description="Verdict when no rule had anything to weigh (no divergence site and no "
                                    "other rule): a rule over zero items is not met. PASS says so in words.")


class TeacherForcedSpec(GateSpecBase):
    kind: Literal["teacher_forced"]
    input: str = Field(description="Input set of prompts (prompt, messages or raw context) generated greedily.")
    references: str | None = Field(None, description="Input set of reference texts (rows with `text`) "
                                                     "teacher-forced on both lanes for noninferiority.")
    max_tokens: int = Field(32, ge=1, le=4096, description="Greedy tokens generated per prompt.")
    top_k: int = Field(20, ge=2, le=200, description="Top-k logprobs asked for at every scored position.")
    rule: TeacherForcedRule


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """A rule without ``instrument_tolerance`` takes each lane's default for its dtype, so every lane must
        declare one; the default is a function of the frozen contract, written into every result."""
        if self.rule.instrument_tolerance is not None:
            return
        if self.rule.instrument == "scoring":
            if not any(getattr(self.rule, name) is not None
                       for name in ("max_site_delta", "noninferiority_max", "noninferiority_mean")):
                raise loaded.error(("gates", index, "rule"), "instrument: scoring measures its drift and caps it "
                                                             "by instrument_tolerance or the rule's smallest margin "
                                                             "(max_site_delta, noninferiority_max or "
                                                             "noninferiority_mean): give one")
            return
        for lane in loaded.lanes.values():
            try:
                instrument_tolerance(None, lane)
            except ValueError as exc:
                options = " or ".join(ENGINES[lane.engine].dtype_options) or "its engine has no dtype option here"
                raise loaded.error(("gates", index, "rule"),
                                   f"no instrument_tolerance and no default: {exc}. Give instrument_tolerance "
                                   f"in nats, or the lane's dtype ({options})") from None


_MAX_EVIDENCE = 20


def scoring_cap(rule: TeacherForcedRule) -> tuple[float, str] | None:
    """The most the scoring path may differ from generation (``instrument: scoring``): the rule's
    instrument_tolerance, else its smallest margin (an instrument whose own two paths differ by as much as
    the effect the rule decides by cannot decide it); None when the rule gives neither."""
    if rule.instrument_tolerance is not None:
        return rule.instrument_tolerance, "the scoring path, drift capped by the contract's instrument_tolerance"
    margins = {name: value for name in ("max_site_delta", "noninferiority_max", "noninferiority_mean")
               if (value := getattr(rule, name)) is not None}
    if not margins:
        return None
    name = min(margins, key=lambda key: margins[key])
    return margins[name], f"the scoring path, drift measured on this engine and device, capped by {name}"


def first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first differing token; len(shorter) when one is a strict prefix; None if equal."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class InstrumentCheck:
    tokens: int = 0
    within: int = 0
    rank1_strict: int = 0
    max_drift: float = 0.0
    sum_drift: float = 0.0
    failures: list[str] = field(default_factory=list)
    # the scoring path: each token's rank waits for the lane's measured drift (settle_measured)
    pending: list[tuple[str, Position, Position, float]] = field(default_factory=list)


def check_instrument(gen: Generation, scored: list[Position], tolerance: float, label: str,
                     check: InstrumentCheck, *, measured: bool = False) -> None:
    """A lane's own greedy tokens, teacher-forced: same token, logprob back within tolerance, rank 1.
    ``measured`` (the scoring path): the rank is judged later, against the lane's measured drift."""
    if len(scored) != len(gen.positions) + 1:
        check.failures.append(f"{label}: scored {len(scored) - 1} positions for {len(gen.positions)} tokens")
        return
    for t, (made, forced) in enumerate(zip(gen.positions, scored, strict=False)):
        check.tokens += 1
        if forced.token is not None and made.token is not None and forced.token != made.token:
            check.failures.append(f"{label} token {t}: scored token {forced.token} is not the generated "
                                  f"{made.token}")
            continue
        if made.logprob is None or forced.logprob is None:
            check.failures.append(f"{label} token {t} ({made.text!r}): no logprob "
                                  f"(generation {made.logprob}, teacher-forced {forced.logprob})")
            continue
        drift = abs(forced.logprob - made.logprob)
        check.max_drift = max(check.max_drift, drift)
        check.sum_drift += drift
        check.rank1_strict += forced.rank() == 1
        if measured:
            check.pending.append((f"{label} token {t}", made, forced, drift))
            continue
        rank = forced.rank(tie=tolerance)
        if drift > tolerance or rank != 1:
            check.failures.append(f"{label} token {t} ({made.text!r}): generation logprob {made.logprob:.6f}, "
                                  f"teacher-forced {forced.logprob:.6f} (|delta| {drift:.6f}), rank {rank}")
        else:
            check.within += 1


def settle_measured(check: InstrumentCheck, cap: float) -> None:
    """The scoring path's check, once a lane's drift between its generation and scoring paths is measured
    over all its tokens: the drift within ``cap`` (the rule's smallest margin, or its instrument_tolerance),
    and each greedy token rank 1 on the scoring path within twice that drift: each of two tokens may move
    by the drift from one path to the other, so their gap by twice it (on the H200 a ',' that generation
    picked at -1.689 scored -2.294, second to a token it had beaten)."""
    tie = 2 * check.max_drift
    for label, made, forced, drift in check.pending:
        rank = forced.rank(tie=tie)
        if drift > cap or rank != 1:
            check.failures.append(f"{label} ({made.text!r}): generation logprob {made.logprob:.6f}, teacher-forced "
                                  f"{forced.logprob:.6f} (|delta| {drift:.6f}, at most {cap}), rank {rank} "
                                  f"within twice the measured drift ({tie:.6f})")
        else:
            check.within += 1
    check.pending.clear()


@register
class TeacherForcedGate(LiveGate):
    fail_claims = "worse than its control"
    spec: TeacherForcedSpec

    @classmethod
    def present(cls, rule: TeacherForcedRule | None, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("sites", "noninferiority_max")),
                            plots=each_plot([_site_plot, _reference_plot], rule, result))
    control_reruns = 1  # the control's second boot scores the candidates' sites and shows drift

    # ---- live
    def planned_requests(self, visit: Visit) -> int:
        """First boot: each prompt generated and scored, each reference scored (a candidate scores its sites
        too, about one request per prompt); the control's second boot generates each prompt again and scores
        the candidates' sites."""
        prompts = self.input_rows(self.spec.input)
        references = self.input_rows(self.spec.references) if self.spec.references else 0
        if visit.index > 0:
            return prompts * (1 + len(self.ctx.contract.candidates())) + references
        return 2 * prompts + references + (prompts if visit.lane.role == "candidate" else 0)

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        lane = visit.lane
        prompts = await self._prepared(run, sink, "prompt", self.spec.input, need_text=False)
        if visit.index > 0:
            await self._rerun(run, sink, prompts)
            return
        gens: dict[str, Generation] = {}
        for item, prepared in prompts.items():
            if prepared.prompt is None:
                continue
            tags = {"purpose": "generate", "item": item}
            try:
                gen = await run.adapter.generate(run.client, lane, prepared.prompt, max_tokens=self.spec.max_tokens,
                                                 top_k=self.spec.top_k, sink=sink, tags=tags)
                gens[item] = gen
                await run.adapter.score(run.client, lane, prepared.prompt, gen.tokens, top_k=self.spec.top_k,
                                        sink=sink, tags={"purpose": "instrument", "item": item})
            except EngineError as exc:
                sink.append({"derived": "error", "tags": tags, "error": str(exc)})
        if self.spec.references:
            refs = await self._prepared(run, sink, "reference", self.spec.references, need_text=True)
            await score_texts(run, sink, refs, purpose="reference", top_k=self.spec.top_k)
        if lane.role == "candidate" and lane.control:
            control_gens = self._generations(lane.control, "generate")
            await self._score_sites(run, sink, prompts, control_gens, gens, candidate=lane.name)

    async def _rerun(self, run: LaneRun, sink: JsonlAppender, prompts: dict[str, Prepared]) -> None:
        """The control, booted again: generate once more (drift), score the reference texts once more (what
        the instrument resolves: the control against itself), then score each candidate's sites."""
        lane = run.lane
        if self.spec.references:
            refs = await self._prepared(run, sink, "reference", self.spec.references, need_text=True)
            await score_texts(run, sink, refs, purpose="reference", top_k=self.spec.top_k)
        for item, prepared in prompts.items():
            if prepared.prompt is None:
                continue
            tags = {"purpose": "rerun_generate", "item": item}
            try:
                await run.adapter.generate(run.client, lane, prepared.prompt, max_tokens=self.spec.max_tokens,
                                           top_k=self.spec.top_k, sink=sink, tags=tags)
            except EngineError as exc:
                sink.append({"derived": "error", "tags": tags, "error": str(exc)})
        control_gens = self._generations(lane.name, "generate")
        for candidate in self.ctx.contract.candidates():
            if candidate.control == lane.name:
                cand_gens = self._generations(candidate.name, "generate")
                await self._score_sites(run, sink, prompts, control_gens, cand_gens, candidate=candidate.name)

    async def _score_sites(self, run: LaneRun, sink: JsonlAppender, prompts: dict[str, Prepared],
                           control_gens: dict[str, Generation], cand_gens: dict[str, Generation],
                           *, candidate: str) -> None:
        for item, prepared in prompts.items():
            ctrl, cand = control_gens.get(item), cand_gens.get(item)
            if prepared.prompt is None or ctrl is None or cand is None:
                continue
            d = first_divergence(ctrl.tokens.ids, cand.tokens.ids)
            if d is None or d >= min(len(ctrl.tokens), len(cand.tokens)):
                continue  # identical, or one stopped earlier: no two tokens to weigh
            tags = {"purpose": "site", "item": item, "candidate": candidate, "site": d}
            try:
                await run.adapter.score(run.client, run.lane, prepared.prompt + ctrl.tokens.head(d), _EMPTY,
                                        top_k=self.spec.top_k, sink=sink, tags=tags)
            except EngineError as exc:
                sink.append({"derived": "error", "tags": tags, "error": str(exc)})

    async def _prepared(self, run: LaneRun, sink: JsonlAppender, purpose: str, input_name: str,
                        *, need_text: bool) -> dict[str, Prepared]:
        """Prepared once on the control; candidates (and the control's rerun) reuse its token ids."""
        lane = run.lane
        owner = lane.control if lane.role == "candidate" and lane.control else lane.name
        return await prepared_on_control(run, sink, self.ctx.raw_records(self.gate_id, owner),
                                         self.ctx.input_paths[input_name], purpose=purpose, need_text=need_text)

    def _generations(self, visit_key: str, purpose: str) -> dict[str, Generation]:
        lane = self._lane(visit_key)
        adapter = adapter_for(lane.engine)
        out = {}
        records = self.ctx.raw_records(self.gate_id, visit_key)
        for item in {str(r["tags"]["item"]) for r in select(records, purpose=purpose)}:
            try:
                out[item] = adapter.parse_generation(select(records, purpose=purpose, item=item))
            except EngineError:
                continue
        return out

    def _lane(self, visit_key: str) -> EffectiveLane:
        return self.ctx.contract.lanes[VisitKey.parse(visit_key).lane]

    # ---- offline
    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        records = {key: self.ctx.raw_records(self.gate_id, key)
                   for key in (control.name, candidate.name, str(VisitKey(control.name, 1)))}
        prompts = read_prepared(records[control.name], "prompt")
        problems: list[str] = [f"prompt {k}: {p.error}" for k, p in prompts.items() if p.prompt is None]
        if not prompts or problems:
            result.reasons = ["instrument: prompts could not be prepared as tokens on the control",
                              *problems[:_MAX_EVIDENCE]]
            return result
        tolerance = self._tolerances(result, control, candidate)
        if tolerance is None:
            return result
        gens: dict[str, dict[str, Generation]] = {}
        check: dict[str, InstrumentCheck] = {}
        for lane in (control, candidate):
            gens[lane.name], check[lane.name] = self._check_lane(lane, prompts, records[lane.name],
                                                                 tolerance[lane.name][0], problems)
        self._instrument_metrics(result, check, tolerance, control)
        if not self._instrument_holds(result, check, tolerance, problems):
            return result
        sites, site_problems = self._sites(prompts, gens, records, control, candidate,
                                           {name: value for name, (value, _) in tolerance.items()})
        details: dict[str, Any] = {"sites": sites}
        if site_problems:
            result.reasons = ["instrument: divergence sites could not be scored on both servers",
                              *site_problems[:_MAX_EVIDENCE], *result.reasons]
            result.details = details | {"problems": site_problems}
            return result
        references = self._reference_deltas(records, control, candidate, result) if self.spec.references else None
        resolution = _resolution(references.self_deltas if references else [], check[control.name], control.name,
                                 result)
        verdicts = self._site_rules(result, sites, len(prompts), resolution)
        verdicts += self._self_fidelity(result, check[control.name], check[candidate.name])
        if references is not None:
            verdicts += self._noninferiority(references, result, details, resolution)
        self._reboot_caveat(result, records, control, prompts, gens[control.name])
        result.details = details
        if not verdicts:
            # nothing was weighed: never a PASS over an empty set, unless the contract says so in words
            result.verdict = result.weigh(Verdict(self.spec.rule.nothing_to_weigh),
                                          f"nothing to weigh: no rule judged any site or token "
                                          f"(rule.nothing_to_weigh: {self.spec.rule.nothing_to_weigh})")
            return result
        result.verdict = combine(verdicts)
        return result

    def _tolerances(self, result: GateResult, control: EffectiveLane,
                    candidate: EffectiveLane) -> dict[str, tuple[float, str]] | None:
        """Each lane's instrument tolerance and where it came from, written into the result's rule; None
        (with the reason in ``result``) when a lane has none."""
        tolerance: dict[str, tuple[float, str]] = {}
        rule = self.spec.rule
        for lane in (control, candidate):
            if rule.instrument == "scoring":
                cap = scoring_cap(rule)
                if cap is None:  # validation refuses such a contract; an older bundle may still hold one
                    result.reasons = ["instrument: the scoring path needs instrument_tolerance or a margin to cap "
                                      "its measured drift"]
                    return None
                tolerance[lane.name] = cap
                continue
            try:
                tolerance[lane.name] = instrument_tolerance(rule.instrument_tolerance, lane)
            except ValueError as exc:  # validation refuses such a contract; an older bundle may still hold one
                result.reasons = [f"instrument: {exc}"]
                return None
        result.rule["instrument_tolerance_applied"] = {name: {"value": value, "source": source}
                                                       for name, (value, source) in tolerance.items()}
        return tolerance

    def _check_lane(self, lane: EffectiveLane, prompts: dict[str, Prepared], recs: list[dict[str, Any]],
                    tolerance: float, problems: list[str]) -> tuple[dict[str, Generation], InstrumentCheck]:
        """A lane's greedy generations, and how its own tokens came back when teacher-forced."""
        adapter = adapter_for(lane.engine)
        gens: dict[str, Generation] = {}
        check = InstrumentCheck()
        for item, prepared in prompts.items():
            assert prepared.prompt is not None  # for mypy: judge stops on a prompt that was not prepared
            try:
                gen = adapter.parse_generation(select(recs, purpose="generate", item=item))
                scored = adapter.parse_score(select(recs, purpose="instrument", item=item), prepared.prompt,
                                             gen.tokens)
            except EngineError as exc:
                problems.append(f"{lane.name} prompt {item}: {exc}")
                continue
            if not gen.tokens:
                problems.append(f"{lane.name} prompt {item}: generated no tokens")
                continue
            gens[item] = gen
            check_instrument(gen, scored, tolerance, f"{lane.name} prompt {item}", check,
                             measured=self.spec.rule.instrument == "scoring")
        settle_measured(check, tolerance)
        texts = {g.tokens.ids for g in gens.values()}
        if len(gens) >= 2 and len(texts) == 1:
            problems.append(f"{lane.name} gave the same continuation to all {len(gens)} prompts; "
                            "it is not answering the prompts")
        return gens, check

    @staticmethod
    def _instrument_metrics(result: GateResult, check: dict[str, InstrumentCheck],
                            tolerance: dict[str, tuple[float, str]], control: EffectiveLane) -> None:
        for name, c in check.items():
            role = "control" if name == control.name else "candidate"
            value, source = tolerance[name]
            result.metrics[f"instrument_{role}"] = Metric(
                value=c.within, denominator=c.tokens, unit="tokens",
                note=f"lane {name}: greedy tokens given back by teacher forcing within {value} nats at rank 1")
            result.metrics[f"instrument_tolerance_{role}"] = Metric(
                value=value, unit="nats", note=f"lane {name}: {source}")
            result.metrics[f"instrument_max_drift_{role}"] = Metric(
                value=round(c.max_drift, 9), unit="nats", denominator=c.tokens,
                note=f"lane {name}: max |generation-time - teacher-forced| logprob over {c.tokens} tokens")
            result.metrics[f"instrument_mean_drift_{role}"] = Metric(
                value=round(c.sum_drift / c.tokens, 9) if c.tokens else None, unit="nats", denominator=c.tokens,
                note=f"lane {name}: mean |generation-time - teacher-forced| logprob")

    @staticmethod
    def _instrument_holds(result: GateResult, check: dict[str, InstrumentCheck],
                          tolerance: dict[str, tuple[float, str]], problems: list[str]) -> bool:
        """Whether the lanes' own greedy tokens came back, so margins from this instrument may count;
        if not, ``result`` says why. If so, the instrument's reasons open the result's."""
        failures = [f for c in check.values() for f in c.failures]
        if problems or failures:
            result.reasons = ["instrument: teacher-forced scores do not give the lanes' own greedy tokens back, "
                              "so no margin from this instrument counts", *(problems + failures)[:_MAX_EVIDENCE]]
            result.details = {"instrument_failures": failures[:200], "problems": problems}
            return False
        empty = [name for name, c in check.items() if c.tokens == 0]
        if empty:
            result.reasons = [f"instrument: no greedy token of {', '.join(empty)} could be checked: nothing to "
                              "weigh, so no margin from this instrument counts"]
            return False
        for name, c in check.items():
            value, source = tolerance[name]
            result.reasons.append(f"instrument: lane {name} gave back {c.within}/{c.tokens} greedy tokens at rank 1, "
                                  f"max drift {c.max_drift:.4f} nats, mean {c.sum_drift / max(c.tokens, 1):.4f} "
                                  f"(tolerance {value}: {source})")
        return True

    def _site_rules(self, result: GateResult, sites: list[dict[str, Any]], n_prompts: int,
                    resolution: dict[str, tuple[float, str]]) -> list[Verdict]:
        """Metrics over the divergence sites, and the site rules' verdicts."""
        rule = self.spec.rule
        scored_sites = [s for s in sites if s.get("scored")]
        _site_metrics(result, sites, scored_sites, n_prompts)
        site_rules = [name for name in ("max_site_delta", "max_cross_server_delta") if getattr(rule, name) is not None]
        if site_rules and not scored_sites:
            # a rule over zero sites is not met, nor failed: it weighed nothing (no number over an empty set)
            result.reasons.append(f"no divergence site to weigh in {n_prompts} prompts "
                                  f"({'greedy tokens agree' if not sites else 'only length-only divergences'}): "
                                  f"{' and '.join(site_rules)} judged nothing")
        verdicts: list[Verdict] = []
        if rule.max_site_delta is not None and scored_sites:
            largest = max(s["delta_control_server"] for s in scored_sites)
            ok = largest <= rule.max_site_delta
            verdicts.append(result.weigh(Verdict.PASS if ok else Verdict.FAIL,
                                         f"site |delta logprob| max {largest:.4f} {'<=' if ok else '>'} "
                                         f"{rule.max_site_delta} nats over {len(scored_sites)} sites"))
        if rule.max_cross_server_delta is not None and scored_sites:
            # the same token on two servers: boot-to-boot and kernel rounding are all an A/A can show here
            largest = max(max(s["cross_server_control_token"], s["cross_server_candidate_token"]) for s in scored_sites)
            verdict, reason = judge_bound("cross-server |delta| max", largest, rule.max_cross_server_delta,
                                          resolution.get("max"))
            verdicts.append(result.weigh(verdict, f"{reason} over {len(scored_sites)} sites"))
        return verdicts

    def _self_fidelity(self, result: GateResult, control: InstrumentCheck,
                       candidate: InstrumentCheck) -> list[Verdict]:
        result.metrics["self_fidelity_candidate"] = Metric(value=candidate.rank1_strict, denominator=candidate.tokens,
                                                           unit="tokens", note="strictly rank 1 when teacher-forced")
        result.metrics["self_fidelity_control"] = Metric(value=control.rank1_strict, denominator=control.tokens,
                                                         unit="tokens")
        bound = self.spec.rule.min_self_fidelity
        if bound is None:
            return []
        share = candidate.rank1_strict / candidate.tokens if candidate.tokens else 0.0
        ok = share >= bound
        said = f"self-fidelity {candidate.rank1_strict}/{candidate.tokens} {'>=' if ok else '<'} {bound}"
        return [result.weigh(Verdict.PASS if ok else Verdict.FAIL, said)]

    def _reboot_caveat(self, result: GateResult, records: dict[str, list[dict[str, Any]]], control: EffectiveLane,
                       prompts: dict[str, Prepared], first: dict[str, Generation]) -> None:
        drift = self._reboot_drift(records, control, prompts, first)
        if drift is None:
            return
        same, n = drift
        result.metrics["control_reboot_identical"] = Metric(
            value=same, denominator=n, unit="prompts", note="control's greedy tokens after a reboot in the window")
        if same < n:
            result.caveats.append(f"the control itself changed across reboots on {n - same}/{n} prompts: "
                                  "divergences are not all the axis")

    def _sites(self, prompts: dict[str, Prepared], gens: dict[str, dict[str, Generation]],
               records: dict[str, list[dict[str, Any]]], control: EffectiveLane,
               candidate: EffectiveLane, tolerance: dict[str, float]) -> tuple[list[dict[str, Any]], list[str]]:
        sites: list[dict[str, Any]] = []
        problems: list[str] = []
        servers = {"control": (control, records[str(VisitKey(control.name, 1))]),
                   "candidate": (candidate, records[candidate.name])}
        for item, prepared in prompts.items():
            ctrl, cand = gens[control.name].get(item), gens[candidate.name].get(item)
            if ctrl is None or cand is None:
                continue
            assert prepared.prompt is not None  # for mypy: judge stops on a prompt that was not prepared
            d = first_divergence(ctrl.tokens.ids, cand.tokens.ids)
            if d is None:
                continue
            if d >= min(len(ctrl.tokens), len(cand.tokens)):
                sites.append({"prompt": item, "site": d, "scored": False,
                              "note": f"one lane stopped at token {d}; control {len(ctrl.tokens)} tokens, "
                                      f"candidate {len(cand.tokens)}"})
                continue
            site = _Site(item, d, prepared.prompt + ctrl.tokens.head(d), ctrl.positions[d], cand.positions[d])
            row = self._score_site(site, ctrl.tokens.head(d).text, servers, candidate.name, problems)
            if row is None:
                continue
            # the site's prefix is the generation's own context: the scores must match generation time
            problems += _generation_mismatches(site, row, {"control": tolerance[control.name],
                                                           "candidate": tolerance[candidate.name]})
            sites.append(row)
        return sites, problems

    def _score_site(self, site: _Site, prefix_text: str, servers: dict[str, tuple[EffectiveLane, list[dict[str, Any]]]],
                    candidate: str, problems: list[str]) -> dict[str, Any] | None:
        """Both lanes' tokens at a site, as each server scores them; None (and a problem) where a server
        did not score them."""
        a, b = site.control, site.candidate
        row: dict[str, Any] = {"prompt": site.item, "site": site.index, "scored": True,
                               "shared_prefix_text": prefix_text,
                               "control_token": {"id": a.token, "text": a.text},
                               "candidate_token": {"id": b.token, "text": b.text}}
        for server, (lane, recs) in servers.items():
            problem = self._score_on(site, server, lane, select(recs, purpose="site", item=site.item,
                                                                candidate=candidate), row)
            if problem:
                problems.append(problem)
                return None
        row["cross_server_control_token"] = abs(row["control_server"]["logprob_control_token"]
                                                - row["candidate_server"]["logprob_control_token"])
        row["cross_server_candidate_token"] = abs(row["control_server"]["logprob_candidate_token"]
                                                  - row["candidate_server"]["logprob_candidate_token"])
        return row

    def _score_on(self, site: _Site, server: str, lane: EffectiveLane, found: list[dict[str, Any]],
                  row: dict[str, Any]) -> str | None:
        """One server's scores of both tokens into ``row``; the problem, if it has none."""
        where = f"prompt {site.item} site {site.index}"
        if not found:
            return f"{where}: not scored on the {server} server ({lane.name})"
        try:
            pos = adapter_for(lane.engine).parse_score(found, site.prefix, _EMPTY)[0]
        except EngineError as exc:
            return f"{where} on the {server} server: {exc}"
        a, b = site.control, site.candidate
        la, lb = pos.lookup(a.token, a.text), pos.lookup(b.token, b.text)
        if la is None or lb is None:
            return (f"{where}: a lane's token is outside the {server} server's "
                    f"top-{self.spec.top_k} (raise top_k)")
        best = pos.best()
        # bf16 logits tie exactly often: then neither token is rank 1 alone, whatever order the
        # engine listed them in
        rank1 = ("tie" if best and la == lb == best.logprob else
                 "control" if best and best.same(a.token, a.text) else
                 "candidate" if best and best.same(b.token, b.text) else "neither")
        row[f"{server}_server"] = {"logprob_control_token": la, "logprob_candidate_token": lb, "rank1": rank1}
        row[f"delta_{server}_server"] = abs(la - lb)
        row[f"rank1_{server}_server"] = rank1
        return None

    def _reference_deltas(self, records: dict[str, list[dict[str, Any]]], control: EffectiveLane,
                          candidate: EffectiveLane, result: GateResult) -> _References:
        """Per reference text, |delta logprob| of its tokens between the control and the candidate, and between
        the control and its own rerun (what the instrument resolves); a rerun that could not score a text costs
        only that measurement (a caveat), never the comparison."""
        refs = read_prepared(records[control.name], "reference")
        rerun = str(VisitKey(control.name, 1))
        out = _References()
        for item, prepared in refs.items():
            if prepared.prompt is None or prepared.text is None:
                out.problems.append(f"reference {item}: {prepared.error}")
                continue
            scores = {}
            for key, lane in ((control.name, control), (candidate.name, candidate), (rerun, control)):
                found = select(records[key], purpose="reference", item=item)
                if key == rerun and not found:
                    continue  # a bundle from before the rerun scored references: no self-drift measured
                try:
                    scores[key] = adapter_for(lane.engine).parse_score(found, prepared.prompt, prepared.text)
                except EngineError as exc:
                    if key == rerun:
                        result.caveats.append(f"reference {item} on the control's rerun: {exc}; its boot-to-boot "
                                              "drift is not in what the instrument resolves")
                    else:
                        out.problems.append(f"reference {item} on {key}: {exc}")
            if control.name not in scores or candidate.name not in scores:
                continue
            text_deltas = _token_deltas(scores[control.name], scores[candidate.name])
            out.censored += len(prepared.text) - len(text_deltas)
            if rerun in scores:
                out.self_deltas += _token_deltas(scores[control.name], scores[rerun])
            out.deltas += text_deltas
            out.rows.append({"reference": item, "tokens": len(prepared.text), "compared": len(text_deltas),
                             "max_abs_delta": max(text_deltas, default=None),
                             "mean_abs_delta": sum(text_deltas) / len(text_deltas) if text_deltas else None})
        return out

    def _noninferiority(self, references: _References, result: GateResult, details: dict[str, Any],
                        resolution: dict[str, tuple[float, str]]) -> list[Verdict]:
        rule = self.spec.rule
        rows, deltas, censored, problems = references.rows, references.deltas, references.censored, references.problems
        details["references"] = rows
        if problems or not deltas:
            return [result.weigh(Verdict.INCONCLUSIVE, "noninferiority: reference texts could not be scored on both "
                                 "lanes: " + "; ".join(problems[:5] or ["no tokens compared"]))]
        total = sum(r["tokens"] for r in rows)
        result.metrics["noninferiority_max"] = Metric(value=round(max(deltas), 9), unit="nats", denominator=len(deltas),
                                                      note=f"max |delta logprob| over reference tokens, {len(rows)} texts")
        result.metrics["noninferiority_mean"] = Metric(value=round(sum(deltas) / len(deltas), 9), unit="nats",
                                                       denominator=len(deltas))
        result.metrics["reference_tokens"] = Metric(value=len(deltas), denominator=total, unit="tokens",
                                                    note=f"{censored} below a lane's top-{self.spec.top_k} were "
                                                         "not compared")
        verdicts = []
        for name, bound, value in (("max", rule.noninferiority_max, max(deltas)),
                                   ("mean", rule.noninferiority_mean, sum(deltas) / len(deltas))):
            if bound is None:
                continue
            verdict, reason = judge_bound(f"noninferiority {name} |delta|", value, bound, resolution.get(name))
            verdicts.append(result.weigh(verdict, f"{reason} over {len(deltas)} tokens"))
        if censored and verdicts:
            result.caveats.append(f"{censored} reference tokens fell below a lane's top-{self.spec.top_k} and "
                                  "were not compared")
        return verdicts

    def _reboot_drift(self, records: dict[str, list[dict[str, Any]]], control: EffectiveLane,
                      prompts: dict[str, Prepared], first: dict[str, Generation]) -> tuple[int, int] | None:
        recs = records[str(VisitKey(control.name, 1))]
        if not select(recs, purpose="rerun_generate"):
            return None
        adapter = adapter_for(control.engine)
        same = 0
        for item in prompts:
            try:
                again = adapter.parse_generation(select(recs, purpose="rerun_generate", item=item))
            except EngineError:
                continue
            same += item in first and again.tokens.ids == first[item].tokens.ids
        return same, len(prompts)


@dataclass
class _References:
    """The reference texts weighed: per-text rows, |delta| per token against the candidate and against the
    control's own rerun, tokens not compared, and the problems that leave the comparison unmeasured."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    self_deltas: list[float] = field(default_factory=list)
    censored: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Site:
    """Where two greedy outputs part: the prompt, the token index, the shared prefix (prompt included)
    and each lane's token there as it was generated."""

    item: str
    index: int
    prefix: TokenSeq
    control: Position
    candidate: Position


def _site_metrics(result: GateResult, sites: list[dict[str, Any]], scored_sites: list[dict[str, Any]],
                  n_prompts: int) -> None:
    result.metrics["sites"] = Metric(value=len(scored_sites), denominator=n_prompts, unit="prompts",
                                     note="prompts where the greedy outputs diverge with two tokens to weigh")
    length_only = sum(1 for s in sites if not s.get("scored"))
    if length_only:
        result.metrics["length_only_divergences"] = Metric(value=length_only, denominator=n_prompts,
                                                           unit="prompts", note="one lane stopped earlier")
    if not scored_sites:
        return
    deltas = [s["delta_control_server"] for s in scored_sites]
    cross = [max(s["cross_server_control_token"], s["cross_server_candidate_token"]) for s in scored_sites]
    result.metrics["site_delta_max"] = Metric(value=round(max(deltas), 6), unit="nats",
                                              denominator=len(scored_sites),
                                              note="|logp(control tok) - logp(candidate tok)|, control server")
    result.metrics["site_delta_mean"] = Metric(value=round(sum(deltas) / len(deltas), 6), unit="nats",
                                               denominator=len(scored_sites))
    result.metrics["cross_server_delta_max"] = Metric(value=round(max(cross), 9), unit="nats",
                                                      denominator=len(scored_sites),
                                                      note="same token, same prefix, two servers")
    for who in ("control", "candidate", "neither", "tie"):
        count = sum(1 for s in scored_sites if s["rank1_control_server"] == who)
        if who == "tie" and not count:
            continue
        result.metrics[f"rank1_{who}"] = Metric(
            value=count, denominator=len(scored_sites), unit="sites",
            note="both lanes' tokens share the top logprob exactly" if who == "tie" else
            "whose token is rank 1 on the control server")


def _generation_mismatches(site: _Site, row: dict[str, Any], allowed: dict[str, float]) -> list[str]:
    """Each server's score of its own lane's token against that token's generation-time logprob."""
    problems = []
    for server, gen_pos, key in (("control", site.control, "logprob_control_token"),
                                 ("candidate", site.candidate, "logprob_candidate_token")):
        got = row[f"{server}_server"][key]
        if gen_pos.logprob is not None and abs(got - gen_pos.logprob) > allowed[server]:
            problems.append(f"prompt {site.item} site {site.index}: the {server} server scores its own token at "
                            f"{got:.6f}, generation said {gen_pos.logprob:.6f}")
    return problems

_EMPTY = TokenSeq((), "", ())


def _token_deltas(a: list[Position], b: list[Position]) -> list[float]:
    """|logprob| differences of one text's tokens scored twice (the position past the text left out); a token
    either side did not score (below its top-k) is not compared."""
    return [abs(pa.logprob - pb.logprob) for pa, pb in zip(a[:-1], b[:-1], strict=False)
            if pa.logprob is not None and pb.logprob is not None]


def _resolution(self_deltas: list[float], control: InstrumentCheck, lane: str,
                result: GateResult) -> dict[str, tuple[float, str]]:
    """What the instrument resolves on this device, per statistic (max, mean), with where it comes from: the
    larger of the control's reference scores against its own rerun (boot to boot) and the control's own two
    kernel paths for the same tokens (generation against teacher forcing). Two lanes whose scores differ by
    less differ by no more than the device's rounding of one computation. Stated in the result's metrics."""
    out: dict[str, tuple[float, str]] = {}
    path = {"max": control.max_drift, "mean": control.sum_drift / control.tokens if control.tokens else 0.0}
    boot = {"max": max(self_deltas), "mean": sum(self_deltas) / len(self_deltas)} if self_deltas else None
    for name in ("max", "mean"):
        sources = [(path[name], f"the control's generation against its teacher forcing, {name}")]
        if boot is not None:
            sources.append((boot[name], f"the control's references against its rerun, {name}"))
        out[name] = max(sources, key=lambda source: source[0])
        result.metrics[f"instrument_resolution_{name}"] = Metric(
            value=round(out[name][0], 9), unit="nats",
            note=f"lane {lane}: {out[name][1]}" + ("" if boot is not None else
                                                  " (no rerun scored the references: boot-to-boot not measured)"))
    if boot is not None:
        result.metrics["control_self_max"] = Metric(value=round(boot["max"], 9), unit="nats",
                                                    denominator=len(self_deltas),
                                                    note=f"lane {lane}: references against its own rerun")
    return out


def _site_plot(rule: TeacherForcedRule | None, result: dict[str, Any]) -> list[Plot]:
    sites = [site for site in result["details"].get("sites") or [] if site.get("scored")]
    if not sites:
        return []
    bound = rule.max_site_delta if rule else None
    bars = Bars(categories=[f"{site['prompt']}@{site['site']}" for site in sites],
                series=[BarSeries(name="on the control's server", role="control",
                                  values=[abs(site["delta_control_server"]) for site in sites]),
                        BarSeries(name="on the candidate's server", role="candidate",
                                  values=[abs(site["delta_candidate_server"]) for site in sites])],
                bounds=[] if bound is None else [Bound(value=bound, label="max_site_delta")],
                xlabel="prompt@token where greedy paths part", ylabel="nats")
    return [Plot(title="Divergence sites: |logprob(control's token) - logprob(candidate's token)|", panels=[bars])]


def _reference_plot(rule: TeacherForcedRule | None, result: dict[str, Any]) -> list[Plot]:
    refs = result["details"].get("references") or []
    if not refs:
        return []
    bound = rule.noninferiority_max if rule else None
    bars = Bars(categories=[str(ref["reference"]) for ref in refs], horizontal=True, layout="overlaid",
                series=[BarSeries(name="max |Δ|", role="candidate", values=[float(r["max_abs_delta"]) for r in refs]),
                        BarSeries(name="mean |Δ|", role="control", values=[float(r["mean_abs_delta"]) for r in refs])],
                bounds=[] if bound is None else [Bound(value=bound, label="noninferiority_max")],
                xlabel="|Δ logprob| (nats)", ylabel="reference")
    return [Plot(title="Reference texts: per-token logprob change, candidate vs control", panels=[bars],
                 height=0.8 + 0.3 * len(refs))]
