"""needle: a context ladder. Each rung is a target prompt size in tokens; each rung has three variants
(see ``needle_prompts``). A failed variant gets one retry with a fresh seed; a rung passes when all
three variants pass; the ladder stops at the first failed rung.

Each prompt is sized with the engine's own tokenizer (through the lane's adapter) to within the frozen
tolerance (1%) of its rung, and the judge holds the engine's own count at serving time
(usage.prompt_tokens) to the same tolerance: a rung measured at the wrong size is no measurement.
Requests stream, so time to first token is measured; prompt caching is switched off where the engine
allows it, and the filler is new text per case anyway.

Verdict: the candidate must pass every rung up to ``rule.reach`` (default: the top rung) and, with
``not_below_control``, reach at least as high as the control. A lane that answers nothing fails the
first rung, so it can never pass.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from campaign.contracts.engines import ENGINES, lane_context
from campaign.contracts.gatespecs import GateSpecBase, LoadedContract
from campaign.contracts.model import MAX_CONTEXT_TOKENS, MAX_SEED, StrictModel
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, each_plot, metric_headlines, register
from campaign.gates.common.streams import streamed_text
from campaign.gates.needle.prompts import VARIANTS, NeedleCase, build_case, case_seed, check_reply
from campaign.gates.result import GateResult, Metric, Verdict, combine
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Marker, Plot, Points, PointSeries, Presentation, Role

__all__ = ["NeedleGate", "NeedleRule", "NeedleSpec"]


class NeedleRule(StrictModel):
    reach: int | None = Field(None, ge=1, le=MAX_CONTEXT_TOKENS,
                              description="The candidate must pass every rung up to this one "
                                                      "(prompt tokens; one of `rungs`). Default: the top rung.")
    not_below_control: bool = Field(True, description="And its highest passed rung must be at least the control's.")


class NeedleSpec(GateSpecBase):
    kind: Literal["needle"]
    input: None = Field(None, description="None: the needle prompts are generated from the seed.")
    rungs: list[Annotated[int, Field(le=MAX_CONTEXT_TOKENS)]] = Field(
        min_length=1, max_length=64, description="Target prompt sizes in tokens, ascending (at most 64 rungs); each "
                                                 "must fit the context of every lane (checked at validation).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Filler and keys are a pure function of the seed, rung "
                                                        "and variant.")
    max_tokens: int = Field(64, ge=8, le=4096, description="Tokens per answer (five keys need about 50).")
    tolerance: float = Field(0.01, gt=0, le=0.05, description="Allowed relative miss of a rung's target, "
                                                              "counted by the engine's tokenizer.")
    rule: NeedleRule = Field(default_factory=NeedleRule)

    @field_validator("rungs")
    @classmethod
    def _ascending(cls, rungs: list[int]) -> list[int]:
        if any(r < 128 for r in rungs):
            raise ValueError("rungs are prompt sizes in tokens, at least 128 (room for five keys and a question)")
        if any(b <= a for a, b in itertools.pairwise(rungs)):
            raise ValueError("rungs must be strictly ascending")
        return rungs

    @model_validator(mode="after")
    def _reach_is_a_rung(self) -> "NeedleSpec":
        if self.rule.reach is not None and self.rule.reach not in self.rungs:
            raise ValueError(f"rule.reach {self.rule.reach} is not one of the rungs {self.rungs}")
        return self


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """Every rung, plus its answer, must fit the context of every lane that runs it. The context is read
        from the lane's args (per engine) or its declared ``context`` field; a lane that says neither is
        refused, because then a rung that does not fit could only be discovered mid-window."""
        for lane in loaded.lanes.values():
            context, source = lane_context(lane)
            if context is None:
                hint = f" ({source})" if source else ""
                options = " or ".join(ENGINES[lane.engine].context_options) or "an engine context option"
                raise loaded.error(("gates", index, "rungs"),
                                   f"lane {lane.name}'s context is not known{hint}: give it {options} in args, "
                                   "or `context:`, so rungs can be checked before the window")
            for rung_index, rung in enumerate(self.rungs):
                if rung + self.max_tokens > context:
                    raise loaded.error(("gates", index, "rungs", rung_index),
                                       f"rung {rung} tokens + max_tokens {self.max_tokens} does not fit lane "
                                       f"{lane.name}'s context of {context} tokens ({source})")


MAX_SIZING_ROUNDS = 12
ATTEMPTS = 2  # the first try and one retry with a fresh seed


@register
class NeedleGate(LiveGate):
    spec: NeedleSpec

    @classmethod
    def aa_claims(cls, rule: Any, result: dict[str, Any]) -> str | None:
        """A FAIL by ``reach`` weighs the candidate alone; with ``not_below_control`` and the candidate's highest
        rung below the control's, the FAIL claims it below its control (read from the metrics, not the words)."""
        if result.get("verdict") != "FAIL" or not getattr(rule, "not_below_control", False):
            return None
        metrics = result.get("metrics") or {}
        ours, theirs = ((metrics.get(key) or {}).get("value")
                        for key in ("highest_rung_passed", "control_highest_rung_passed"))
        if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and ours < theirs:
            return "reaching less far than its control"
        return None

    @classmethod
    def present(cls, rule: NeedleRule | None, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("highest_rung_passed",)),
                            plots=each_plot([_ladder_plot], rule, result))

    async def sized_case(self, run: LaneRun, variant: str, seed: int, target: int) -> tuple[NeedleCase, int, int]:
        """The case whose prompt the engine counts within tolerance of ``target``: (case, tokens, rounds)."""
        async def count(words: int) -> tuple[NeedleCase, int]:
            case = build_case(variant, seed, words)
            return case, await run.adapter.count_chat_tokens(run.client, run.lane, case.messages)

        allowed = target * self.spec.tolerance
        _, base = await count(0)
        if base > target + allowed:
            raise EngineError(f"the {variant} needle prompt without filler is already {base} tokens, over {target}")
        words = max(0, round((target - base) / 1.3))
        tried: dict[int, int] = {}
        for rounds in range(1, MAX_SIZING_ROUNDS + 1):
            case, tokens = await count(words)
            tried[words] = tokens
            if abs(tokens - target) <= allowed:
                return case, tokens, rounds
            per_word = (tokens - base) / words if words and tokens > base else 1.3
            step = round((target - tokens) / per_word) or (1 if tokens < target else -1)
            words = max(0, words + step)
            while words in tried:  # oscillating around the target: walk one word at a time
                words += 1 if tried[words] < target else -1
        raise EngineError(f"could not size the {variant} prompt to {target} +/- {allowed:.1f} tokens in "
                          f"{MAX_SIZING_ROUNDS} rounds (closest {min(tried.values(), key=lambda t: abs(t - target))})")

    def planned_requests(self, visit: Visit) -> int:
        """Every rung's variants, first attempts: the most when every rung passes (the ladder stops at the first
        that fails; a retry adds one)."""
        return len(self.spec.rungs) * len(VARIANTS)

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        for rung in self.spec.rungs:
            rung_passed = True
            for variant in VARIANTS:
                variant_passed = False
                for attempt in range(ATTEMPTS):
                    seed = case_seed(self.spec.seed, rung, variant, attempt)
                    tags: dict[str, Any] = {"rung": rung, "variant": variant, "attempt": attempt, "seed": seed}
                    try:
                        case, counted, rounds = await self.sized_case(run, variant, seed, rung)
                    except EngineError as exc:
                        sink.append({"lane": run.lane.name, "path": "(sizing)", "tags": tags,
                                     "error": f"sizing: {exc}"})
                        return  # nothing further can be measured validly
                    tags.update(case.tags(), counted_tokens=counted, sizing_rounds=rounds)
                    body = self.scoring_request(run, {"model": run.adapter.served_model(run.lane),
                                                      "messages": case.messages, "temperature": 0, "seed": 0,
                                                      "max_tokens": self.spec.max_tokens,
                                                      "stream_options": {"include_usage": True}})
                    record = await run.client.stream("/v1/chat/completions", body, sink=sink, tags=tags)
                    if record.get("error"):
                        return
                    variant_passed, _ = check_reply(variant, case.expected, case.decoys, streamed_text(record))
                    if variant_passed:
                        break
                rung_passed = rung_passed and variant_passed
            if not rung_passed:
                return  # the ladder stops at the first failed rung

    def ladder(self, lane: EffectiveLane) -> tuple[list[dict[str, Any]], list[str], int]:
        """Per-rung rows, instrument problems, and the highest rung passed (0 if none)."""
        adapter = adapter_for(lane.engine)
        records = self.ctx.raw_records(self.gate_id, lane.name)
        by_key: dict[tuple[int, str, int], dict[str, Any]] = {}
        problems: list[str] = []
        record: dict[str, Any] | None  # a record, then the one a rung's attempt found (None: not made)
        for record in records:
            tags = record.get("tags", {})
            key = (int(tags.get("rung", -1)), str(tags.get("variant")), int(tags.get("attempt", -1)))
            where = f"{lane.name} rung {key[0]} {key[1]} attempt {key[2]}"
            if key[0] not in self.spec.rungs or key[1] not in VARIANTS or key[2] not in range(ATTEMPTS):
                problems.append(f"{where}: not part of this ladder")
            elif key in by_key:
                problems.append(f"{where}: recorded twice")
            else:
                by_key[key] = record
        rows: list[dict[str, Any]] = []
        highest, stopped = 0, False
        for rung in self.spec.rungs:
            if stopped:
                if any(k[0] == rung for k in by_key):
                    problems.append(f"{lane.name} rung {rung}: ran after the ladder should have stopped")
                rows.append({"rung": rung, "status": "not run (ladder stopped)"})
                continue
            variants: dict[str, Any] = {}
            for variant in VARIANTS:
                attempts = []
                for attempt in range(ATTEMPTS):
                    record = by_key.get((rung, variant, attempt))
                    if record is None:
                        break
                    row, problem = self._attempt(rung, record, adapter)
                    if problem:
                        problems.append(f"{lane.name} rung {rung} {variant} attempt {attempt}: {problem}")
                    attempts.append(row)
                    if row.get("passed"):
                        break
                passed = bool(attempts) and bool(attempts[-1].get("passed"))
                if not attempts or (not passed and len(attempts) < ATTEMPTS):
                    problems.append(f"{lane.name} rung {rung} {variant}: "
                                    f"{'no record' if not attempts else 'failed without its retry'}")
                variants[variant] = {"passed": passed, "attempts": attempts}
            rung_passed = all(v["passed"] for v in variants.values())
            rows.append(_rung_row(rung, rung_passed, variants))
            if rung_passed:
                highest = rung
            else:
                stopped = True
        return rows, problems, highest

    def _attempt(self, rung: int, record: dict[str, Any], adapter: Any) -> tuple[dict[str, Any], str | None]:
        tags = record.get("tags", {})
        row: dict[str, Any] = {"attempt": tags.get("attempt"), "seed": tags.get("seed"),
                               "counted_tokens": tags.get("counted_tokens"), "wall_s": record.get("elapsed_s")}
        if record.get("error"):
            return row, str(record["error"])
        if not record.get("done_marker"):
            return row, "stream ended without its [DONE] marker (truncated)"
        final = _final_event(record)
        usage = final.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        if not isinstance(prompt_tokens, int):
            return row, "the engine did not report usage.prompt_tokens"
        row["prompt_tokens"] = prompt_tokens
        miss = abs(prompt_tokens - rung) / rung
        if miss > self.spec.tolerance:
            return row, (f"prompt was {prompt_tokens} tokens, {miss:.2%} off its rung of {rung} "
                         f"(tolerance {self.spec.tolerance:.0%})")
        content = "".join(str((record.get("request") or {}).get("messages", [{}])[-1].get("content", "")))
        planted = [k for k in [*tags.get("expected", []), *tags.get("decoys", [])] if k not in content]
        if not tags.get("expected") or planted:
            return row, f"keys recorded as planted are not in the prompt: {planted[:2]}"
        text = streamed_text(record)
        passed, why = check_reply(str(tags.get("variant")), list(tags["expected"]), list(tags.get("decoys", [])), text)
        ttft = _ttft(record)
        engine = adapter.engine_timings(final)
        row.update(passed=passed, why=why, reply=text[:300], ttft_s=ttft,
                   prefill_tok_s_client=None if not ttft else round(prompt_tokens / ttft, 2),
                   prefill_tok_s_engine=engine.get("prefill_tok_s"), cached_tokens=engine.get("cached_tokens"))
        if ttft is None and passed:
            return row, "no content event, yet a passing reply"
        return row, None

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        rungs = self.spec.rungs
        ladders: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for lane in (control, candidate):
            rows, lane_problems, highest = self.ladder(lane)
            ladders[lane.name] = {"highest_rung_passed": highest, "rungs": rows}
            problems += lane_problems
        result.details = {"ladders": ladders, "tolerance": self.spec.tolerance, "variants": list(VARIANTS)}
        if problems:
            result.reasons = ["instrument: the ladder was not measured validly", *problems[:20]]
            return result
        cand_high = ladders[candidate.name]["highest_rung_passed"]
        ctrl_high = ladders[control.name]["highest_rung_passed"]
        n = len(rungs)
        passed_count = sum(1 for r in ladders[candidate.name]["rungs"] if r.get("passed"))
        result.metrics = {
            "highest_rung_passed": Metric(value=cand_high, unit="prompt tokens",
                                          note="largest rung whose three variants all passed (0: none)"),
            "control_highest_rung_passed": Metric(value=ctrl_high, unit="prompt tokens"),
            "rungs_passed": Metric(value=passed_count, denominator=n, unit="rungs"),
            "control_rungs_passed": Metric(
                value=sum(1 for r in ladders[control.name]["rungs"] if r.get("passed")), denominator=n, unit="rungs"),
            "variants_per_rung": Metric(value=len(VARIANTS), unit="variants (one retry each)"),
        }
        if cand_high == 0 and ctrl_high == 0:
            # neither lane passed a rung: the ladder measured nothing that separates them
            result.reasons = [f"neither lane passed a rung (first rung {rungs[0]} tokens): the ladder starts above "
                              "what this model can do, so it measured nothing about the candidate; start the "
                              "ladder lower"]
            return result
        reach = self.spec.rule.reach or rungs[-1]
        ok = cand_high >= reach
        verdicts = [result.weigh(Verdict.PASS if ok else Verdict.FAIL,
                                 f"candidate passed rungs up to {cand_high} tokens ({passed_count}/{n} rungs); "
                                 f"required {reach}: {'met' if ok else 'not met'}")]
        if self.spec.rule.not_below_control:
            ok = cand_high >= ctrl_high
            verdicts.append(result.weigh(Verdict.PASS if ok else Verdict.FAIL, f"control reached {ctrl_high} tokens: "
                                         f"candidate {'is not' if ok else 'is'} below it"))
        result.verdict = combine(verdicts)
        return result


def _rung_row(rung: int, passed: bool, variants: dict[str, Any]) -> dict[str, Any]:
    attempts = [a for v in variants.values() for a in v["attempts"]]
    first = [v["attempts"][0] for v in variants.values() if v["attempts"]]

    def mean(key: str, rows: list[dict[str, Any]]) -> float | None:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return round(statistics.fmean(values), 4) if values else None

    return {"rung": rung, "passed": passed,
            "variants": {name: v["passed"] for name, v in variants.items()},
            "prompt_tokens": {name: [a.get("prompt_tokens") for a in v["attempts"]] for name, v in variants.items()},
            "ttft_s": mean("ttft_s", first), "prefill_tok_s_client": mean("prefill_tok_s_client", first),
            "prefill_tok_s_engine": mean("prefill_tok_s_engine", first),
            "wall_s": round(sum(a.get("wall_s") or 0.0 for a in attempts), 3), "requests": len(attempts),
            "attempts": {name: v["attempts"] for name, v in variants.items()}}


def _final_event(record: dict[str, Any]) -> dict[str, Any]:
    for event in reversed(record.get("events", [])):
        data = event.get("data") or {}
        if data.get("usage"):
            return data
    return {}


def _ttft(record: dict[str, Any]) -> float | None:
    for event in record.get("events", []):
        for choice in (event.get("data") or {}).get("choices") or []:
            if (choice.get("delta") or {}).get("content"):
                return round(float(event["t"]), 4)
    return None


_MARKERS: tuple[Marker, ...] = ("o", "s", "D", "^", "v")


def _ladder_plot(rule: NeedleRule | None, result: dict[str, Any]) -> list[Plot]:
    ladders = result["details"]["ladders"]
    roles: tuple[Role, ...] = ("control", "candidate", "other")
    series = []
    for (lane, ladder), role in zip(ladders.items(), roles, strict=False):
        for variant, marker in zip(result["details"].get("variants") or [], _MARKERS, strict=False):
            xs, ys, found = [], [], []
            for rung in ladder["rungs"]:
                attempts = (rung.get("attempts") or {}).get(variant) or []
                speeds = [a["prefill_tok_s_client"] for a in attempts
                          if isinstance(a.get("prefill_tok_s_client"), (int, float))]
                if speeds:
                    xs.append(rung["rung"])
                    ys.append(sum(speeds) / len(speeds))
                    found.append(any(a.get("passed") for a in attempts))
            if xs:
                series.append(PointSeries(name=f"{lane} {variant}", x=xs, y=ys, role=role, marker=marker,
                                          hollow=[not f for f in found]))
    if not series:
        return []
    return [Plot(title="Needle ladder: prefill speed per rung and variant (filled: the needle was found)",
                 panels=[Points(series=series, xlabel="rung (prompt tokens)", ylabel="prefill tok/s (client)")])]
