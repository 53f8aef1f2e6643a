"""greedy: N fixed prompts at temperature 0, R self-repeats per lane, cross-lane byte identity.

Byte identity is a kernel-shape diagnostic, not a quality verdict: a lossless axis can still diverge
at near-ties (teacher_forced tells those apart). The instrument check: every request answered with
non-empty text and a finish reason, and different prompts getting different replies, so a lane that
answers nothing (or the same thing to everything) can never pass.

Judged against the control's own variation in the same window, never against the engine's supposed
determinism: a GPU engine under ``--parallel`` batches requests differently from one to the next, so the
control itself is not self-identical there (an H200 gave 3/8), and a candidate must not be blamed for
that. A rule met is PASS; a rule missed is FAIL only when the candidate diverges on more prompts than the
control does, beyond chance: an exact one-sided sign test over the prompts where exactly one of the two
lanes diverges, at ``MARGIN_P`` (so an A/A, the control again, FAILs at most that often on any engine);
otherwise INCONCLUSIVE, saying whether the engine is not deterministic at this config (the control
itself misses the rule) or the difference is within what the control's own variation gives.
Cross-identity is judged the same way, against the control's own first two repeats.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Literal

from pydantic import Field

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import CountRule, StrictModel, parse_fraction
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, metric_headlines, register
from campaign.gates.common.inputs import load_prompts
from campaign.gates.common.replies import chat_reply
from campaign.gates.result import GateResult, Metric, Verdict, combine
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["MARGIN_P", "GreedyGate", "GreedyRule", "GreedySpec", "sign_test_p"]


class GreedyRule(StrictModel):
    self_identical: CountRule = Field(description="Prompts whose repeats are byte-identical, at least k/N, e.g. '20/20'.")
    cross_identical: CountRule | None = Field(
        None, description="Prompts byte-identical to control, at least k/N. A kernel-shape diagnostic, "
                          "not a quality verdict; omit to report without judging.")


class GreedySpec(GateSpecBase):
    kind: Literal["greedy"]
    input: str = Field(description="Name of an input set of prompts.")
    repeats: int = Field(3, ge=2, le=100, description="Self-repeats per prompt per lane.")
    max_tokens: int = Field(64, ge=1, le=65536, description="Tokens generated per prompt.")
    rule: GreedyRule


# the one-sided sign test's level for a FAIL: an A/A FAILs at most this often, whatever the engine's own
# nondeterminism (its discordant prompts split evenly under the null)
MARGIN_P = 0.01


@register
class GreedyGate(LiveGate):
    fail_claims = "worse than its control"
    spec: GreedySpec

    def planned_requests(self, visit: Visit) -> int:
        return self.requests_per_row(self.spec.repeats)

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("self_identical", "control_self_identical")))

    def prompts(self):  # noqa: ANN201 - list[Prompt]
        return load_prompts(self.ctx.input_paths[self.spec.input])

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        prompts = self.prompts()
        # repeat-major: a prompt's repeats are separated by the other prompts, as in real traffic
        for repeat in range(self.spec.repeats):
            for prompt in prompts:
                body = self.scoring_request(run, {"model": run.adapter.served_model(run.lane),
                                                  "messages": prompt.messages, "temperature": 0, "top_p": 1.0,
                                                  "seed": 0, "max_tokens": self.spec.max_tokens})
                await run.client.post("/v1/chat/completions", body, sink=sink,
                                      tags={"prompt": prompt.id, "repeat": repeat})

    def outputs(self, lane: str) -> tuple[dict[str, dict[int, str]], list[str]]:
        """prompt id -> repeat -> text, and the problems that make records unusable."""
        table: dict[str, dict[int, str]] = {}
        problems: list[str] = []
        for record in self.ctx.raw_records(self.gate_id, lane):
            tags = record.get("tags", {})
            text, problem = chat_reply(record)
            if problem:
                problems.append(f"{lane} prompt {tags.get('prompt')} repeat {tags.get('repeat')}: {problem}")
                continue
            table.setdefault(str(tags.get("prompt")), {})[int(tags.get("repeat", 0))] = text
        return table, problems

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        ids = [p.id for p in self.prompts()]
        result = self.new_result(candidate, control)
        tables, problems = self._tables((control.name, candidate.name), ids)
        if problems:
            result.reasons = ["instrument: not every request got a valid reply, so identity cannot be judged",
                              *problems[:20]]
            return result
        for lane in (control.name, candidate.name):
            first_replies = {tables[lane][pid][0] for pid in ids}
            if len(ids) >= 2 and len(first_replies) == 1:
                result.reasons = [f"instrument: lane {lane} gave the same reply to all {len(ids)} prompts; "
                                  "it is not answering the prompts"]
                return result
        flags = self._compare(result, ids, tables[control.name], tables[candidate.name])
        result.verdict = combine(self._rules(result, flags))
        cached = {lane.name: n for lane in (control, candidate) if (n := self._cached_replies(lane))}
        if cached:
            # a repeat built on another request's cached prompt ran other kernels: a difference may be the cache's
            # (an H200 under --parallel 4), so it can blame no one; identity despite it still holds
            said = ", ".join(f"{lane} {n}" for lane, n in cached.items())
            result.caveats.append(f"replies built on a cached prompt (the engine's own count): {said}; this "
                                  "bundle's requests did not keep the engine's prompt cache out")
            if result.verdict is Verdict.FAIL:
                result.overrule(Verdict.INCONCLUSIVE, f"instrument: replies were built on a cached prompt ({said}), "
                                                      "so a difference may be the cache's, not the candidate's")
        return result

    def _cached_replies(self, lane: EffectiveLane) -> int:
        """Replies whose engine reports prompt tokens taken from its cache (0 where it reports none)."""
        adapter = adapter_for(lane.engine)
        return sum(1 for record in self.ctx.raw_records(self.gate_id, lane.name)
                   if isinstance(response := record.get("response"), dict)
                   and adapter.engine_timings(response).get("cached_tokens", 0) > 0)

    def _tables(self, lanes: tuple[str, str], ids: list[str]) -> tuple[dict[str, dict[str, dict[int, str]]], list[str]]:
        """Each lane's replies; a prompt without every repeat is a problem, not a shorter comparison."""
        tables, problems = {}, []
        for lane in lanes:
            tables[lane], lane_problems = self.outputs(lane)
            problems += lane_problems
            for pid in ids:
                missing = [r for r in range(self.spec.repeats) if r not in tables[lane].get(pid, {})]
                if missing:
                    problems.append(f"{lane} prompt {pid}: no valid reply for repeats {missing}")
        return tables, problems

    def _compare(self, result: GateResult, ids: list[str], ctrl_table: dict[str, dict[int, str]],
                 cand_table: dict[str, dict[int, str]]) -> dict[str, list[bool]]:
        """Metrics and per-prompt rows; per prompt, whether each identity holds (candidate self, control self,
        candidate repeat 0 = control repeat 0, and the control's repeat 0 = its repeat 1, the baseline of the
        last)."""
        n, repeats = len(ids), self.spec.repeats
        rows: list[dict[str, Any]] = []
        flags: dict[str, list[bool]] = {"self": [], "control_self": [], "cross": [], "control_cross": []}
        for pid in ids:
            cand, ctrl = cand_table[pid], ctrl_table[pid]
            row = {"self": len(set(cand.values())) == 1, "control_self": len(set(ctrl.values())) == 1,
                   "cross": cand[0] == ctrl[0], "control_cross": ctrl[0] == ctrl[1]}
            for key, value in row.items():
                flags[key].append(value)
            rows.append({"prompt": pid, "candidate_self_identical": row["self"],
                         "control_self_identical": row["control_self"], "cross_identical": row["cross"],
                         "control_repeats_identical": row["control_cross"],
                         "first_divergence_char": _first_difference(ctrl[0], cand[0]),
                         "control_sha256": _digest(ctrl[0]), "candidate_sha256": _digest(cand[0]),
                         "control_text": ctrl[0], "candidate_text": cand[0]})
        result.metrics = {
            "self_identical": Metric(value=sum(flags["self"]), denominator=n, unit="prompts",
                                     note=f"candidate prompts whose {repeats} repeats are byte-identical"),
            "control_self_identical": Metric(value=sum(flags["control_self"]), denominator=n, unit="prompts",
                                             note="the control's own, in the same window: the engine's variation"),
            "cross_identical": Metric(value=sum(flags["cross"]), denominator=n, unit="prompts",
                                      note="candidate repeat 0 byte-identical to control repeat 0"),
            "control_cross_identical": Metric(value=sum(flags["control_cross"]), denominator=n, unit="prompts",
                                              note="control repeat 0 byte-identical to its repeat 1"),
            "repeats": Metric(value=repeats, unit="repeats per prompt per lane"),
        }
        result.details = {"prompts": rows, "paired": {}}
        return flags

    def _rules(self, result: GateResult, flags: dict[str, list[bool]]) -> list[Verdict]:
        n = len(flags["self"])
        verdicts = [self._relative_rule("self_identical", flags["self"], flags["control_self"],
                                        self.spec.rule.self_identical, result)]
        if self.spec.rule.cross_identical:
            verdicts.append(self._relative_rule("cross_identical", flags["cross"], flags["control_cross"],
                                                self.spec.rule.cross_identical, result))
        if sum(flags["control_self"]) < n:
            result.caveats.append(f"control itself is self-identical on only {sum(flags['control_self'])}/{n} "
                                  "prompts: the engine varies at this config, and the candidate is judged against that")
        if sum(flags["cross"]) < n:
            result.caveats.append("byte identity is a kernel-shape diagnostic: divergent prompts need "
                                  "teacher-forced margins before they say anything about quality")
        return verdicts

    @staticmethod
    def _relative_rule(name: str, candidate: list[bool], control: list[bool], rule: str,
                       result: GateResult) -> Verdict:
        """``rule`` (k/N) on the candidate's per-prompt identities, a miss weighed against the control's own
        (the same identity measured on the control alone) prompt by prompt."""
        n, got, baseline = len(candidate), sum(candidate), sum(control)
        need, of = parse_fraction(rule)
        if of != n:
            return result.weigh(Verdict.INCONCLUSIVE,
                                f"rule {name} is written over {of} prompts but the input has {n}")
        worse = sum(1 for c, b in zip(candidate, control, strict=True) if b and not c)
        better = sum(1 for c, b in zip(candidate, control, strict=True) if c and not b)
        p = sign_test_p(worse, better)
        result.details["paired"][name] = {"candidate": got, "control": baseline, "of": n, "worse": worse,
                                          "better": better, "sign_test_p": p, "fail_at_p": MARGIN_P}
        if got >= need:
            return result.weigh(Verdict.PASS, f"{name} {got}/{n} >= required {need}/{of}")
        missed = f"{name} {got}/{n} < required {need}/{of}"
        paired = (f"diverges where the control does not on {worse} prompts, the reverse on {better} "
                  f"(sign test p={p:.3g})")
        if p <= MARGIN_P:
            return result.weigh(Verdict.FAIL,
                                f"{missed}; the control's own is {baseline}/{n}, and the candidate {paired}")
        if baseline < need:
            return result.weigh(Verdict.INCONCLUSIVE,
                                f"the engine is not deterministic at this config (control {name.replace('_', '-')} "
                                f"{baseline}/{n}): greedy identity cannot separate the candidate ({missed}); use "
                                "teacher_forced margins")
        return result.weigh(Verdict.INCONCLUSIVE,
                            f"{missed}, but the control's own is {baseline}/{n} and the candidate {paired}: "
                            f"within the engine's own variation (FAIL needs p <= {MARGIN_P:g}); more prompts "
                            "would separate them")


def sign_test_p(worse: int, better: int) -> float:
    """One-sided exact sign test: the chance of at least ``worse`` of the ``worse + better`` discordant prompts
    going against the candidate when either lane is as likely to diverge (1.0 when none is discordant)."""
    total = worse + better
    return sum(math.comb(total, k) for k in range(worse, total + 1)) / 2 ** total


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _first_difference(a: str, b: str) -> int | None:
    if a == b:
        return None
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
