"""tools: a multi-turn tool loop with scripted tool results. Each episode expects calls, in order, parsed
by the engine into ``tool_calls`` with the right function and arguments; after the scripted results the
final answer must be plain content (reasoning, where the engine parses it, kept out of it) and may be
required to carry a fact from the tool results.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal

from pydantic import Field

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import CountRule, StrictModel, parse_fraction
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, metric_headlines, register
from campaign.gates.common.inputs import load_rows
from campaign.gates.records import select
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["OUTCOMES", "ToolsGate", "ToolsRule", "ToolsSpec", "check_call", "judge_episode"]


class ToolsRule(StrictModel):
    passed: CountRule = Field(description="Episodes whose every expected call was parsed with the right function "
                                    "and arguments, at least k/N.")


class ToolsSpec(GateSpecBase):
    kind: Literal["tools"]
    input: str = Field(description="Episodes {id, prompt|messages, tools, expect: [calls], results: [...], "
                                   "optional tool_choice (call turns), final_tool_choice, final_contains}.")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per turn.")
    rule: ToolsRule


OUTCOMES = ("passed", "no_call", "wrong_function", "unparsable_arguments", "wrong_arguments", "no_final_answer",
            "final_missing_fact", "reasoning_in_content", "error")


def _message(record: dict[str, Any]) -> dict[str, Any]:
    return (((record.get("response") or {}).get("choices") or [{}])[0]).get("message") or {}


def check_call(call: dict[str, Any] | None, expected: dict[str, Any]) -> tuple[str, str | None]:
    """One parsed tool call against the expected one: (outcome, detail)."""
    if not call:
        return "no_call", None
    function = call.get("function") or {}
    if function.get("name") != expected["name"]:
        return "wrong_function", f"called {function.get('name')!r}, expected {expected['name']!r}"
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return "unparsable_arguments", arguments[:120]
    if not isinstance(arguments, dict):
        return "unparsable_arguments", repr(arguments)[:120]
    wrong = {k: arguments.get(k) for k, v in (expected.get("arguments") or {}).items() if arguments.get(k) != v}
    if wrong:
        return "wrong_arguments", f"got {json.dumps(wrong)[:120]}, expected {json.dumps(expected.get('arguments'))[:120]}"
    return "passed", None


def judge_episode(row: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Turn records of one episode -> {outcome, detail, turns}. Pure: unit-tested on fixtures."""
    turns = {int(r["tags"]["turn"]): r for r in records}
    for turn, expected in enumerate(row["expect"]):
        record = turns.get(turn)
        if record is None or record.get("error"):
            return {"outcome": "error", "detail": f"turn {turn}: {record.get('error') if record else 'no record'}"}
        calls = _message(record).get("tool_calls") or []
        outcome, detail = check_call(calls[0] if calls else None, expected)
        if outcome != "passed":
            content = (_message(record).get("content") or "")[:120]
            return {"outcome": outcome, "detail": detail or f"turn {turn}: content {content!r}", "turn": turn}
    final = turns.get(len(row["expect"]))
    if final is None or final.get("error"):
        return {"outcome": "error" if final else "no_final_answer", "detail": final.get("error") if final else None}
    message = _message(final)
    content = message.get("content") or ""
    if "<think>" in content or "</think>" in content:
        return {"outcome": "reasoning_in_content", "detail": content[:120]}
    if not content.strip():
        return {"outcome": "no_final_answer", "detail": "empty content after the tool results"}
    fact = row.get("final_contains")
    if fact and fact.lower() not in content.lower():
        return {"outcome": "final_missing_fact", "detail": f"{fact!r} not in {content[:120]!r}"}
    return {"outcome": "passed", "detail": None}


@register
class ToolsGate(LiveGate):
    fail_claims = None  # its rule counts the candidate's own episodes: a FAIL claims no difference from the control
    spec: ToolsSpec

    def planned_requests(self, visit: Visit) -> int:
        """At most one request per call turn of each episode and one for its answer (an episode whose model
        stops calling ends sooner)."""
        if self.spec.input not in self.ctx.input_paths:
            return 0
        return sum(len(row["expect"]) + 1 for row in self.episodes())

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("passed",)))

    def episodes(self) -> list[dict[str, Any]]:
        out = []
        for _, row in load_rows(self.ctx.input_paths[self.spec.input], required=("tools", "expect", "results")):
            row = dict(row)
            row["id"] = str(row["id"])
            row["messages"] = row.get("messages") or [{"role": "user", "content": row.get("prompt", "")}]
            out.append(row)
        return out

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        for row in self.episodes():
            messages = list(row["messages"])
            for turn in range(len(row["expect"]) + 1):
                tags = {"item": row["id"], "turn": turn}
                try:
                    body = run.adapter.chat_body(run.lane, messages, max_tokens=self.spec.max_tokens, tools=row["tools"])
                except EngineError as exc:
                    sink.append({"derived": "error", "tags": tags, "error": str(exc)})
                    break
                # tool_choice for the call turns, final_tool_choice for the answer after the results
                choice = row.get("tool_choice") if turn < len(row["expect"]) else row.get("final_tool_choice")
                if choice is not None:
                    body["tool_choice"] = choice
                record = await run.client.post("/v1/chat/completions", self.scoring_request(run, body),
                                               sink=sink, tags=tags)
                calls = _message(record).get("tool_calls") or []
                if turn >= len(row["expect"]) or not calls:
                    break
                messages.append({"role": "assistant", "content": _message(record).get("content") or "",
                                 "tool_calls": calls})
                result = row["results"][turn] if turn < len(row["results"]) else ""
                for index, call in enumerate(calls):
                    messages.append({"role": "tool", "tool_call_id": call.get("id") or f"call-{turn}-{index}",
                                     "content": result if isinstance(result, str) else json.dumps(result)})

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        episodes = self.episodes()
        n = len(episodes)
        result = self.new_result(candidate, control)
        judged: dict[str, dict[str, dict[str, Any]]] = {}
        problems = []
        for lane in (control, candidate):
            records = self.ctx.raw_records(self.gate_id, lane.name)
            errors = [r for r in records if r.get("derived") == "error"]
            if errors:
                problems.append(f"{lane.name}: {errors[0]['error']}")
            judged[lane.name] = {row["id"]: judge_episode(row, select([r for r in records if "derived" not in r],
                                                                      item=row["id"])) for row in episodes}
            failed = [k for k, v in judged[lane.name].items() if v["outcome"] == "error"]
            problems += [f"{lane.name} episode {k}: {judged[lane.name][k]['detail']}" for k in failed]
        if problems:
            result.reasons = ["instrument: the tool loop could not be run on both lanes", *problems[:20]]
            return result
        cand = judged[candidate.name]
        passed = sum(v["outcome"] == "passed" for v in cand.values())
        result.metrics["passed"] = Metric(value=passed, denominator=n, unit="episodes")
        result.metrics["control_passed"] = Metric(value=sum(v["outcome"] == "passed" for v in judged[control.name].values()),
                                                  denominator=n, unit="episodes")
        for outcome, count in sorted(Counter(v["outcome"] for v in cand.values()).items()):
            result.metrics[f"outcome_{outcome}"] = Metric(value=count, denominator=n, unit="episodes")
        result.details = {"episodes": [{"episode": row["id"], "candidate": cand[row["id"]],
                                        "control": judged[control.name][row["id"]]} for row in episodes]}
        need, of = parse_fraction(self.spec.rule.passed)
        if of != n:
            result.weigh(Verdict.INCONCLUSIVE, f"rule passed is written over {of} episodes but the input has {n}")
            return result
        ok = passed >= need
        verdict = result.weigh(Verdict.PASS if ok else Verdict.FAIL,
                               f"passed {passed}/{n} {'>=' if ok else '<'} required {need}/{of}")
        control_passed = result.metrics["control_passed"].value
        if not ok and passed == 0 and control_passed == 0:
            # as a needle ladder that starts above the model: nothing here tells the lanes apart
            outcomes = sorted(Counter(v["outcome"] for v in judged[control.name].values()))
            result.overrule(Verdict.INCONCLUSIVE, f"neither lane completed a tool episode (0/{n} on both; the "
                                                  f"control's outcomes: {', '.join(outcomes)}): the model, or its "
                                                  "engine's tool-call parser, cannot do this task here, so it "
                                                  "measured nothing about the candidate")
            return result
        result.verdict = verdict
        return result
