"""greedy: N fixed prompts at temperature 0, R self-repeats per lane, cross-lane byte identity.

Byte identity is a kernel-shape diagnostic, not a quality verdict: a lossless axis can still diverge
at near-ties (teacher_forced tells those apart). The instrument check: every request answered with
non-empty text and a finish reason, and different prompts getting different replies, so a lane that
answers nothing (or the same thing to everything) can never pass.
"""

from __future__ import annotations

import hashlib
from typing import Any

from campaign.contracts.gatespecs import GreedySpec
from campaign.contracts.model import parse_fraction
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, metric_headlines
from campaign.gates.common.inputs import load_prompts
from campaign.gates.common.replies import chat_reply
from campaign.gates.result import GateResult, Metric, Verdict, worst
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["GreedyGate"]


class GreedyGate(LiveGate):
    spec: GreedySpec

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("self_identical",)))

    def prompts(self):  # noqa: ANN201 - list[Prompt]
        return load_prompts(self.ctx.input_paths[self.spec.input])

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        prompts = self.prompts()
        # repeat-major: a prompt's repeats are separated by the other prompts, as in real traffic
        for repeat in range(self.spec.repeats):
            for prompt in prompts:
                body = {**self.ctx.request_defaults, "model": run.adapter.served_model(run.lane),
                        "messages": prompt.messages, "temperature": 0, "top_p": 1.0, "seed": 0,
                        "max_tokens": self.spec.max_tokens}
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
        counts = self._compare(result, ids, tables[control.name], tables[candidate.name])
        result.verdict = worst(self._rules(result, len(ids), *counts))
        return result

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
                 cand_table: dict[str, dict[int, str]]) -> tuple[int, int, int]:
        """Metrics and per-prompt rows; (candidate self-identical, control self-identical, cross-identical)."""
        n, repeats = len(ids), self.spec.repeats
        rows, self_ok, control_self_ok, cross_ok = [], 0, 0, 0
        for pid in ids:
            cand, ctrl = cand_table[pid], ctrl_table[pid]
            cand_self = len(set(cand.values())) == 1
            ctrl_self = len(set(ctrl.values())) == 1
            cross = cand[0] == ctrl[0]
            self_ok += cand_self
            control_self_ok += ctrl_self
            cross_ok += cross
            rows.append({"prompt": pid, "candidate_self_identical": cand_self, "control_self_identical": ctrl_self,
                         "cross_identical": cross, "first_divergence_char": _first_difference(ctrl[0], cand[0]),
                         "control_sha256": _digest(ctrl[0]), "candidate_sha256": _digest(cand[0]),
                         "control_text": ctrl[0], "candidate_text": cand[0]})
        result.metrics = {
            "self_identical": Metric(value=self_ok, denominator=n, unit="prompts",
                                     note=f"candidate prompts whose {repeats} repeats are byte-identical"),
            "control_self_identical": Metric(value=control_self_ok, denominator=n, unit="prompts"),
            "cross_identical": Metric(value=cross_ok, denominator=n, unit="prompts",
                                      note="candidate repeat 0 byte-identical to control repeat 0"),
            "repeats": Metric(value=repeats, unit="repeats per prompt per lane"),
        }
        result.details = {"prompts": rows}
        return self_ok, control_self_ok, cross_ok

    def _rules(self, result: GateResult, n: int, self_ok: int, control_self_ok: int, cross_ok: int) -> list[Verdict]:
        verdicts = []
        need, of = parse_fraction(self.spec.rule.self_identical)
        verdicts.append(self._count_rule("self_identical", self_ok, n, need, of, result))
        if self.spec.rule.cross_identical:
            need, of = parse_fraction(self.spec.rule.cross_identical)
            verdicts.append(self._count_rule("cross_identical", cross_ok, n, need, of, result))
        if control_self_ok < n:
            result.caveats.append(f"control itself is self-identical on only {control_self_ok}/{n} prompts")
        if cross_ok < n:
            result.caveats.append("byte identity is a kernel-shape diagnostic: divergent prompts need "
                                  "teacher-forced margins before they say anything about quality")
        return verdicts

    @staticmethod
    def _count_rule(name: str, got: int, n: int, need: int, of: int, result: GateResult) -> Verdict:
        if of != n:
            result.reasons.append(f"rule {name} is written over {of} prompts but the input has {n}")
            return Verdict.INCONCLUSIVE
        ok = got >= need
        result.reasons.append(f"{name} {got}/{n} {'>=' if ok else '<'} required {need}/{of}")
        return Verdict.PASS if ok else Verdict.FAIL


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _first_difference(a: str, b: str) -> int | None:
    if a == b:
        return None
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
