"""structured: rows with a JSON schema and an oracle answer, sent with the engine's own json_schema
response format (or unconstrained, as ordinary chat is). Each reply is valid JSON or not, schema-valid
or not, correct or not; malformed replies are classified as the seeds' secondary gate found them:
prose appended, prose before the JSON, duplicated JSON, extra braces, a code fence, truncated, not JSON
at all; and well-formed but wrong values. Reasoning is judged apart from content: a reply whose content
carries think tags leaked its reasoning.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Literal

import jsonschema
from pydantic import Field

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import CountRule, StrictModel, parse_fraction
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, metric_headlines, register
from campaign.gates.common.inputs import load_rows
from campaign.gates.result import GateResult, Metric, Verdict, combine
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["OUTCOMES", "StructuredGate", "StructuredRule", "StructuredSpec", "classify"]


class StructuredRule(StrictModel):
    correct: CountRule = Field(description="Rows whose output is valid, schema-valid and equal to the oracle answer, "
                                     "at least k/N.")
    schema_valid: CountRule | None = Field(None, description="Rows whose output is schema-valid JSON, at least k/N.")


class StructuredSpec(GateSpecBase):
    kind: Literal["structured"]
    input: str = Field(description="Rows {id, prompt|messages, schema, answer}.")
    constrained: bool = Field(True, description="Send each row's schema as a json_schema response format "
                                                "(false: ask in the prompt only, as unconstrained chat does).")
    max_tokens: int = Field(128, ge=1, le=8192, description="Token budget per reply.")
    rule: StructuredRule


OUTCOMES = ("correct", "wrong_value", "schema_invalid", "prose_appended", "prose_prepended", "duplicated_json",
            "extra_braces", "code_fenced", "reasoning_in_content", "truncated", "not_json", "empty", "error")
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n?```\s*$", re.S)
_THINK = re.compile(r"</?think>")


def classify(content: str | None, schema: dict[str, Any], answer: Any, *, finish: str | None = None) -> dict[str, Any]:
    """One reply -> {outcome, valid_json, schema_valid, correct, detail}. Pure: unit-tested on fixtures."""
    out = {"valid_json": False, "schema_valid": False, "correct": False, "detail": None}
    if content is None or not content.strip():
        return out | {"outcome": "empty"}
    if _THINK.search(content):
        return out | {"outcome": "reasoning_in_content", "detail": "think tags in the content"}
    text = content.strip()
    try:
        value = json.loads(text)
    except ValueError:
        return out | _malformed(text, schema, answer, finish)
    out["valid_json"] = True
    problem = _schema_problem(value, schema)
    if problem:
        return out | {"outcome": "schema_invalid", "detail": problem}
    out["schema_valid"] = True
    if value == answer:
        return out | {"outcome": "correct", "correct": True}
    return out | {"outcome": "wrong_value", "detail": f"got {json.dumps(value)[:200]}"}


def _schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return exc.message[:200]
    return None


def _malformed(text: str, schema: dict[str, Any], answer: Any, finish: str | None) -> dict[str, Any]:
    decoder = json.JSONDecoder()
    fence = _FENCE.match(text)
    if text.startswith("```"):
        inner = fence.group(1).strip() if fence else text.split("\n", 1)[-1].split("```", 1)[0].strip()
        after = "" if fence else (text.split("```", 2)[2].strip() if text.count("```") >= 2 else "")
        note = _leading_note(inner, schema, answer)
        return {"outcome": "code_fenced", "detail": f"{note}; prose after the fence" if after else note}
    if text[0] in "{[":
        try:
            value, end = decoder.raw_decode(text)
        except ValueError:
            if finish == "length":
                return {"outcome": "truncated", "detail": "the token budget ran out inside the JSON"}
            return {"outcome": "not_json", "detail": text[:120]}
        rest = text[end:].strip()
        note = _value_note(value, schema, answer)
        if rest and rest[0] in "{[":
            try:
                decoder.raw_decode(rest)
                return {"outcome": "duplicated_json", "detail": note}
            except ValueError:
                pass
        if rest and set(rest) <= set("}] \n\t"):
            return {"outcome": "extra_braces", "detail": f"{rest[:20]!r} after the JSON; {note}"}
        return {"outcome": "prose_appended", "detail": f"{rest[:80]!r} after the JSON; {note}"}
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start > 0:
        try:
            value, _ = decoder.raw_decode(text[start:])
            return {"outcome": "prose_prepended", "detail": _value_note(value, schema, answer)}
        except ValueError:
            pass
    if finish == "length":
        return {"outcome": "truncated", "detail": "the token budget ran out before any JSON closed"}
    return {"outcome": "not_json", "detail": text[:120]}


def _leading_note(text: str, schema: dict[str, Any], answer: Any) -> str:
    try:
        return _value_note(json.loads(text), schema, answer)
    except ValueError:
        return "the fenced text is not JSON either"


def _value_note(value: Any, schema: dict[str, Any], answer: Any) -> str:
    if _schema_problem(value, schema):
        return "the embedded JSON is not schema-valid"
    return "the embedded JSON is the right answer" if value == answer else "the embedded JSON is a wrong answer"


@register
class StructuredGate(LiveGate):
    fail_claims = None  # its rule counts the candidate's own answers: a FAIL claims no difference from the control
    spec: StructuredSpec

    def planned_requests(self, visit: Visit) -> int:
        return self.requests_per_row()

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("correct",)))

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for _, row in load_rows(self.ctx.input_paths[self.spec.input], required=("schema", "answer")):
            messages = row.get("messages") or [{"role": "user", "content": row.get("prompt", "")}]
            rows.append({"id": str(row["id"]), "messages": messages, "schema": row["schema"], "answer": row["answer"]})
        return rows

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        for row in self.rows():
            tags = {"item": row["id"]}
            try:
                body = run.adapter.chat_body(run.lane, row["messages"], max_tokens=self.spec.max_tokens,
                                             json_schema=row["schema"] if self.spec.constrained else None)
            except EngineError as exc:
                sink.append({"derived": "error", "tags": tags, "error": str(exc)})
                continue
            await run.client.post("/v1/chat/completions", self.scoring_request(run, body), sink=sink,
                                  tags=tags)

    def outcomes(self, lane: str, rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        by_item: dict[str, dict[str, Any]] = {}
        problems = []
        records = {str((r.get("tags") or {}).get("item")): r for r in self.ctx.raw_records(self.gate_id, lane)}
        for row in rows:
            record = records.get(row["id"])
            if record is None:
                problems.append(f"{lane} row {row['id']}: no record")
                continue
            if record.get("error"):
                problems.append(f"{lane} row {row['id']}: {record['error']}")
                continue
            choice = ((record.get("response") or {}).get("choices") or [{}])[0]
            message = choice.get("message") or {}
            verdict = classify(message.get("content"), row["schema"], row["answer"], finish=choice.get("finish_reason"))
            verdict["reasoning_separated"] = bool(message.get("reasoning_content") or message.get("reasoning"))
            verdict["content"] = (message.get("content") or "")[:500]
            by_item[row["id"]] = verdict
        return by_item, problems

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        rows = self.rows()
        n = len(rows)
        result = self.new_result(candidate, control)
        outcomes, problems = {}, []
        for lane in (control, candidate):
            outcomes[lane.name], lane_problems = self.outcomes(lane.name, rows)
            problems += lane_problems
        if problems:
            result.reasons = ["instrument: not every row got a reply, so the gate cannot judge", *problems[:20]]
            return result
        cand = outcomes[candidate.name]
        answers = {json.dumps(r["answer"], sort_keys=True) for r in rows}
        replies = {v["content"] for v in cand.values()}
        if n >= 2 and len(replies) == 1 and len(answers) > 1:
            result.reasons = [f"instrument: {candidate.name} gave the same reply to all {n} rows"]
            return result
        counts = {lane: Counter(v["outcome"] for v in table.values()) for lane, table in outcomes.items()}
        for key in ("valid_json", "schema_valid", "correct"):
            result.metrics[key] = Metric(value=sum(v[key] for v in cand.values()), denominator=n, unit="rows")
            result.metrics[f"control_{key}"] = Metric(value=sum(v[key] for v in outcomes[control.name].values()),
                                                      denominator=n, unit="rows")
        for outcome, count in sorted(counts[candidate.name].items()):
            result.metrics[f"outcome_{outcome}"] = Metric(value=count, denominator=n, unit="rows")
        losses = [r["id"] for r in rows if outcomes[control.name][r["id"]]["correct"] and not cand[r["id"]]["correct"]]
        wins = [r["id"] for r in rows if cand[r["id"]]["correct"] and not outcomes[control.name][r["id"]]["correct"]]
        result.metrics["losses_vs_control"] = Metric(value=len(losses), denominator=n, unit="rows")
        result.metrics["wins_vs_control"] = Metric(value=len(wins), denominator=n, unit="rows")
        result.details = {"constrained": self.spec.constrained,
                          "rows": [{"row": r["id"], "candidate": cand[r["id"]], "control": outcomes[control.name][r["id"]]}
                                   for r in rows]}
        verdicts = []
        for name, text in (("correct", self.spec.rule.correct), ("schema_valid", self.spec.rule.schema_valid)):
            if text is None:
                continue
            need, of = parse_fraction(text)
            if of != n:
                verdicts.append(result.weigh(Verdict.INCONCLUSIVE,
                                             f"rule {name} is written over {of} rows but the input has {n}"))
                continue
            got = result.metrics[name].value
            assert got is not None  # for mypy: a count, set above
            ok = got >= need
            verdicts.append(result.weigh(Verdict.PASS if ok else Verdict.FAIL,
                                         f"{name} {got}/{n} {'>=' if ok else '<'} required {need}/{of}"))
        result.verdict = combine(verdicts)  # never empty: the rule always has `correct`
        return result
