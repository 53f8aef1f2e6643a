"""ruler: prove the declared axis takes effect before anything is measured with it.

A flag can parse and do nothing; a dead flag yields identical numbers. On every lane the ruler sends a
few greedy probes (text, top-k logprobs, speed) and snapshots the engine's metrics before and after;
offline it compares the candidate with its control on each observable: outputs, logprobs, metric
counters (time-valued ones excluded: they always differ), the boot log (timings, ports and paths
stripped), the engine's own properties, and, opted in, speed: the probes' own speeds beyond a frozen
tolerance with non-overlapping ranges (measured here, two probes differed by +259% from host noise
alone), or a speed gate of the same window whose comparison over interleaved boots excludes zero (an
axis that acts only on speed, like a thread count, shows nowhere else). Indistinguishable on all of them: "axis may be inert", loudly, in SUMMARY.json.

Boot log and properties show that a flag was parsed, not that it acted: they are weaker evidence and
can be left out of ``observe``.

Each declared axis value is also held to what the engine shows of it (the lane's adapter knows which
observable bounds which flag: per-position acceptance counters for a speculative depth, the boot log's
context per slot for a context size): a value the observable contradicts is FAIL, since a flag that does something
other than its name says measures something other than the contract declares; a value no observable
covers is listed as unproven (details ``declared``, and a caveat), never silently taken as in effect.

A declared thinking switch (request fields, e.g. ``chat_template_kwargs.enable_thinking``) is proven
on both lanes the same way: each probe is sent with it on and off, and a lane where any probe comes
back identical has not shown the switch acting (a chat template without a thinking branch ignores it).
A reply that only moved between reasoning and reply (the same text joined) counts as identical: an engine's
reasoning parser may read the switch on its own and move an unchanged answer between the two (SGLang 0.5.23's qwen3
parser on a template without the toggle, tests/data/sglang/parsers_chat*.json), which proves nothing.
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Literal

from pydantic import Field, field_validator

from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.model import StrictModel, valid_regexes
from campaign.contracts.resolve import EffectiveLane, normalize_axis
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, metric_headlines, register
from campaign.gates.common.inputs import load_prompts
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.gates.speed.gate import SpeedGate
from campaign.gates.speed.spec import SpeedSpec
from campaign.lanes.bootlog import read_log
from campaign.lanes.engines import prometheus
from campaign.lanes.engines.declared import Evidence, Finding
from campaign.lanes.engines.prometheus import Samples, metric_name, parse_prometheus
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["ACTING", "EXERCISES", "PARSED", "Observable", "RulerGate", "RulerRule", "RulerSpec", "ThinkingSwitch",
           "counter_deltas", "generated_text", "moved_differently", "normalize_boot_log", "parse_prometheus"]


Observable = Literal["outputs", "logprobs", "metrics", "speed", "boot_log", "props"]


class RulerRule(StrictModel):
    observe: list[Observable] = Field(
        default_factory=lambda: list[Observable](["outputs", "logprobs", "metrics", "boot_log", "props"]),
        description="What may show the axis taking effect; indistinguishable on all of them: axis may be inert. "
                    "`speed` is opt-in: a few short probes on a shared host differ by 2-3x from noise alone.")
    speed_tolerance: float = Field(
        0.25, gt=0, description="Relative probe-speed change that counts as a difference (and only when the "
                                "per-probe ranges do not overlap): small probes on a shared host are noisy.")
    require_counters: list[str] = Field(
        default_factory=list, description="Metric names that must be non-zero on the candidate after its probes.")
    require_boot_log: list[str] = Field(
        default_factory=list, description="Regexes the candidate's boot log must match.")
    inert_verdict: Literal["FAIL", "INCONCLUSIVE"] = Field(
        "FAIL", description="Verdict when the candidate is indistinguishable from control.")

    @field_validator("require_boot_log")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        return valid_regexes(patterns)


class ThinkingSwitch(StrictModel):
    """A request-level thinking switch, proven on every lane before anything is measured with it: the
    same probes sent with it on and off must come back different (reasoning text, or the reply where
    the engine parses no reasoning). A template that ignores the switch makes every 'thinking off'
    number a 'thinking on' number without anyone noticing."""

    on: dict[str, Any] = Field(default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": True}},
                               description="Request fields that turn thinking on.")
    off: dict[str, Any] = Field(default_factory=lambda: {"chat_template_kwargs": {"enable_thinking": False}},
                                description="Request fields that turn thinking off.")
    max_tokens: int = Field(48, ge=1, le=4096, description="Greedy tokens per switch probe.")


class RulerSpec(GateSpecBase):
    kind: Literal["ruler"]
    input: str = Field(description="Input set of probe prompts.")
    probes: int = Field(3, ge=1, le=100, description="How many of the input's prompts are sent.")
    max_tokens: int = Field(16, ge=1, le=4096, description="Greedy tokens per probe.")
    top_k: int = Field(5, ge=1, le=100, description="Top-k logprobs compared per token.")
    thinking: ThinkingSwitch | None = Field(None, description="A thinking switch to prove on every lane: its "
                                                              "probes must differ with it on and off.")
    exercise: list[Literal["repetition", "long_prompt"]] = Field(
        default_factory=lambda: list[Literal["repetition", "long_prompt"]](["repetition"]),
        description="Built-in probes sent after the input's, to exercise common axes: `repetition` (a passage "
                    "to copy: n-gram speculation drafts only on repeated context), `long_prompt` (prefill of "
                    "~1.5k tokens: cache and context flags). An axis no probe exercises is INCONCLUSIVE.")
    rule: RulerRule = Field(default_factory=RulerRule)


# Observables that show a flag acting on what the engine computes, and those that only show it was parsed
# (a deprecated no-op flag prints a warning and changes the boot log): the second kind never makes a PASS.
ACTING = ("outputs", "logprobs", "metrics", "speed")
PARSED = ("boot_log", "props")

# Probes that exercise the common axes, sent on every lane after the contract's own: a passage to copy
# (n-gram speculation drafts only where the output repeats its context) and a long prompt (prefix cache,
# context and KV-cache flags act on prefill).
_PASSAGE = ("The lighthouse keeper climbed the stairs at dusk, lit the lamp, wrote the time in the log, and "
            "watched the ships pass the rocks until dawn. ")
EXERCISES = {
    "repetition": "Copy this text exactly, twice, and write nothing else:\n" + _PASSAGE * 2,
    "long_prompt": "Read these notes, then say in one sentence what the keeper does.\n" + _PASSAGE * 40,
}
EXERCISE_TOKENS = 32

# lines whose numbers change from boot to boot; SGLang 0.5.23's too: startup timings, free memory, throughput,
# the client's address and the server's pid in its access and uvicorn lines, progress bars (bounded
# repeats: a search must stay linear on a long run of digits)
_VOLATILE = re.compile(r"(time|timing|ms\b|per second|t/s|tok/s|token/s|s/it|listening|port|pid|task|slot|uptime|"
                       r"/tmp/|seed|mem=|mem usage=|elapsed=|\d{1,3}(?:\.\d{1,3}){3}:\d|process \[\d)", re.I)
# llama.cpp's "0.00.488.771 I " and SGLang's "[2026-12-03 13:37:09] " (or "[... TP0] ") line stamps
_STAMP = re.compile(r"^\s*(?:[\d.:]+\s+[A-Z]\s+|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*)")


def counter_deltas(before: Samples, after: Samples) -> Samples:
    """What the probes did to each counter; time-valued counters are left out (they always differ)."""
    return {name: delta for name, delta in prometheus.counter_deltas(before, after).items()
            if metric_name(name).endswith("_total") and "seconds" not in name}


def moved_differently(control: dict[str, float], candidate: dict[str, float]) -> list[str]:
    """Counters whose deltas over the probes differ between the lanes, with a non-zero delta on at least
    one. A counter one lane does not export is unknown there, not zero: it counts only when it moved
    on the lane that has it (speculative drafts on a candidate whose control has no speculation); a
    counter present with no movement (no draft fired) shows nothing."""
    out = []
    for name in sorted(set(control) | set(candidate)):
        a, b = control.get(name), candidate.get(name)
        if a is None or b is None:
            if (a or b or 0.0) != 0.0:
                out.append(name)
        elif a != b and (a != 0.0 or b != 0.0):
            out.append(name)
    return out


def generated_text(reply: dict[str, str]) -> str:
    """What the model generated for one thinking probe, however the engine split it into reasoning and reply:
    both joined, whitespace dropped (a parser strips what it cuts at). Read only where the split moved: a reply
    that differs by a newline alone is another generation."""
    return "".join((reply["reasoning"] + reply["reply"]).split())


def normalize_boot_log(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = _STAMP.sub("", line).strip()
        if line and not _VOLATILE.search(line):
            lines.append(re.sub(r"0x[0-9a-f]+", "0x", line))
    return sorted(set(lines))


@register
class RulerGate(LiveGate):
    spec: RulerSpec

    @classmethod
    def aa_claims(cls, rule: Any, result: dict[str, Any]) -> str | None:
        # an A/A changes nothing: "axis may be inert" is its right answer, and a PASS a false one
        return "an axis acting on what the engine computes" if result.get("verdict") == "PASS" else None

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("observables_differing",)))

    def planned_requests(self, visit: Visit) -> int:
        """The probes, the exercises, and each probe with the thinking switch on and off."""
        probes = min(self.spec.probes, self.input_rows(self.spec.input))
        return probes + len(self.spec.exercise) + (2 * probes if self.spec.thinking else 0)

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        await self._metrics(run, sink, "before")
        prompts = load_prompts(self.ctx.input_paths[self.spec.input])[: self.spec.probes]
        probes = [(p.id, p.messages, self.spec.max_tokens) for p in prompts]
        probes += [(f"exercise:{kind}", [{"role": "user", "content": EXERCISES[kind]}], EXERCISE_TOKENS)
                   for kind in self.spec.exercise]
        for item, messages, max_tokens in probes:
            try:
                body = run.adapter.chat_body(run.lane, messages, max_tokens=max_tokens)
            except EngineError as exc:
                sink.append({"derived": "error", "tags": {"item": item}, "error": str(exc)})
                continue
            body |= {"logprobs": True, "top_logprobs": self.spec.top_k}
            # the built-in exercises (a passage to copy, a long prompt) exist to exercise what serving does with
            # repeats, the prompt cache included: they keep it, so a cache axis can be shown acting
            exercise = item.startswith("exercise:")
            sent = {**self.ctx.request_defaults, **body} if exercise else self.scoring_request(run, body)
            await run.client.post("/v1/chat/completions", sent, sink=sink, tags={"purpose": "probe", "item": item})
        await self._metrics(run, sink, "after")
        if self.spec.thinking is not None:
            await self._thinking_probes(run, sink, prompts)
        sink.append({"derived": "props", "tags": {"purpose": "props"}, "props": await run.adapter.version(run.client)})

    async def _thinking_probes(self, run: LaneRun, sink: JsonlAppender, prompts: list[Any]) -> None:
        """Each probe twice, the switch on then off; after the metrics snapshot, so the axis comparison
        sees the same traffic on every lane whether or not a switch is declared."""
        switch = self.spec.thinking
        assert switch is not None  # for mypy: called only when the spec declares one
        for prompt in prompts:
            for state, fields in (("on", switch.on), ("off", switch.off)):
                try:
                    body = run.adapter.chat_body(run.lane, prompt.messages, max_tokens=switch.max_tokens)
                except EngineError as exc:
                    sink.append({"derived": "error", "tags": {"purpose": "thinking", "item": prompt.id,
                                                              "switch": state}, "error": str(exc)})
                    continue
                await run.client.post("/v1/chat/completions", self.scoring_request(run, {**body, **fields}),
                                      sink=sink, tags={"purpose": "thinking", "item": prompt.id, "switch": state})

    def _thinking(self, lane: str) -> tuple[dict[str, dict[Any, Any]], list[str]]:
        """Per probe, what came back with the switch on and off: (reasoning, reply); and problems."""
        seen: dict[str, dict[Any, Any]] = {}  # probe -> the record's switch ("on", "off") -> what came back
        problems = []
        for record in self.ctx.raw_records(self.gate_id, lane):
            tags = record.get("tags") or {}
            if tags.get("purpose") != "thinking":
                continue
            item, state = str(tags.get("item")), tags.get("switch")
            if record.get("error"):
                problems.append(f"{lane} thinking probe {item} ({state}): {record['error']}")
                continue
            message = ((((record.get("response") or {}).get("choices") or [{}])[0]).get("message")) or {}
            seen.setdefault(item, {})[state] = {"reasoning": message.get("reasoning_content") or "",
                                                "reply": message.get("content") or ""}
        return seen, problems

    def _judge_thinking(self, lanes: dict[str, str], details: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
        """(each inert lane's sentence by role, instrument problems): a lane where the switch changed nothing
        has not proven it."""
        inert: dict[str, str] = {}
        problems: list[str] = []
        n = min(self.spec.probes, len(load_prompts(self.ctx.input_paths[self.spec.input])))
        for role, lane in lanes.items():
            seen, trouble = self._thinking(lane)
            problems += trouble
            pairs = {item: s for item, s in seen.items() if "on" in s and "off" in s}
            if len(pairs) < n:
                problems.append(f"{lane}: {len(pairs)}/{n} thinking probes answered both on and off")
                continue
            reasoning = sorted(i for i, s in pairs.items() if s["on"]["reasoning"] != s["off"]["reasoning"])
            # the same text split differently into reasoning and reply: the switch reached the engine's reasoning
            # parser (SGLang's and vLLM's read enable_thinking too), not the template, so the model did not change
            relabelled = sorted(i for i, s in pairs.items() if s["on"]["reasoning"] != s["off"]["reasoning"]
                                and generated_text(s["on"]) == generated_text(s["off"]))
            changed = sorted(i for i, s in pairs.items() if s["on"] != s["off"] and i not in relabelled)
            details[role] = {"lane": lane, "probes": len(pairs), "reasoning_changed": reasoning,
                             "changed": changed, "relabelled": relabelled, "replies": pairs}
            if len(changed) < len(pairs):
                note = (f"; {len(relabelled)} only relabelled: the same text moved between reasoning and reply, "
                        "the reasoning parser read the switch and the template ignored it") if relabelled else ""
                inert[role] = f"{lane} ({len(pairs) - len(changed)}/{len(pairs)} probes identical on and off{note})"
        return inert, problems

    async def _metrics(self, run: LaneRun, sink: JsonlAppender, phase: str) -> None:
        error: str | None
        try:
            text = await run.adapter.scrape_metrics(run.client)
        except EngineError as exc:
            text, error = None, str(exc)
        else:
            error = None if text is not None else "the engine serves no metrics"
        sink.append({"derived": "metrics", "tags": {"purpose": "metrics", "phase": phase}, "text": text, "error": error})

    def _observe(self, lane: str) -> dict[str, Any]:
        records = self.ctx.raw_records(self.gate_id, lane)
        obs: dict[str, Any] = {"outputs": {}, "logprobs": {}, "speeds": [], "problems": []}
        for record in records:
            tags = record.get("tags") or {}
            if tags.get("purpose") == "probe":
                item = str(tags.get("item"))
                if record.get("error"):
                    obs["problems"].append(f"{lane} probe {item}: {record['error']}")
                    continue
                choice = ((record.get("response") or {}).get("choices") or [{}])[0]
                text = (choice.get("message") or {}).get("content") or ""
                if not text:
                    obs["problems"].append(f"{lane} probe {item}: empty reply")
                obs["outputs"][item] = text
                content = ((choice.get("logprobs") or {}).get("content")) or []
                obs["logprobs"][item] = [(c.get("token"), round(float(c.get("logprob", 0.0)), 6),
                                          tuple((t.get("token"), round(float(t.get("logprob", 0.0)), 6))
                                                for t in c.get("top_logprobs") or []))
                                         for c in content]
                tokens = ((record.get("response") or {}).get("usage") or {}).get("completion_tokens") or 0
                if tokens and record.get("elapsed_s"):
                    obs["speeds"].append(tokens / record["elapsed_s"])
            elif record.get("derived") == "metrics":
                obs[f"metrics_{tags.get('phase')}"] = (parse_prometheus(record["text"])
                                                       if record.get("text") is not None else None)
            elif record.get("derived") == "props":
                obs["props"] = {k: v for k, v in (record.get("props") or {}).items() if k != "model_path"}
        before, after = obs.get("metrics_before"), obs.get("metrics_after")
        obs["counters"] = counter_deltas(before, after) if before is not None and after is not None else None
        log = self.ctx.bundle / "lanes" / lane / "boot.log"
        obs["boot_log"] = normalize_boot_log(read_log(log)) if log.exists() else None
        return obs

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        ctrl, cand = self._observe(control.name), self._observe(candidate.name)
        thinking: dict[str, Any] = {}
        problems, inert = self._instrument_problems(control, candidate, ctrl, cand, thinking)
        if problems:
            result.reasons = ["instrument: the probes did not get real replies on both lanes", *problems[:10]]
            return result
        evidence: dict[str, str] = {}
        unavailable: list[str] = []
        for observable in self.spec.rule.observe:
            verdict = self._compare(observable, ctrl, cand)
            if observable == "speed" and not verdict:
                verdict = self._speed_gate_evidence(candidate, control) or verdict
            if verdict is None:
                unavailable.append(observable)
            elif verdict:
                evidence[observable] = verdict
        self._report(result, candidate, ctrl, cand, evidence, unavailable, thinking)
        declared = self._declared(result, candidate, control, ctrl, cand)
        failures = [*self._requirements_unmet(candidate, cand),
                    *(f.sentence() for f in declared if f.status == "contradicted")]
        if "control" not in inert and "candidate" in inert:
            failures.insert(0, f"thinking switch inert on {inert['candidate']}, where the control's switch acts: the "
                               "candidate's change stops the switch acting, so nothing measured with it means what "
                               "it says")
        if failures:  # what the candidate's own axis did: its findings, whatever the window's instrument
            for failure in failures:
                result.verdict = result.weigh(Verdict.FAIL, failure)
            return result
        if "control" in inert:
            # the switch does nothing on the control either: the window's instrument (its template or engine), the
            # same for every candidate, so one window finding and no candidate's verdict (the axis evidence stays
            # in details)
            result.window_finding = (f"the thinking switch is inert on the control {inert['control']}: the engine "
                                     "or its chat template ignores it, so no lane's thinking regime is proven")
            result.reasons = [f"instrument: {result.window_finding}"]
            return result
        self._conclude(result, candidate, control, ctrl, cand, evidence, unavailable)
        held = [f.sentence() for f in declared if f.status == "holds"]
        if result.verdict is Verdict.PASS and held:
            result.reasons.append("; ".join(held))
        return result

    def _declared(self, result: GateResult, candidate: EffectiveLane, control: EffectiveLane, ctrl: dict[str, Any],
                  cand: dict[str, Any]) -> list[Finding]:
        """The candidate's axis values, on both lanes where each sets them, held to what its engine shows:
        a lane that differs from its control by something other than what the axis says is not the
        comparison the contract declares, whichever lane it is. Unproven values become caveats."""
        fields = [normalize_axis(field) for field in candidate.axis]
        findings: list[Finding] = []
        for lane, obs in ((control, ctrl), (candidate, cand)):
            log = self.ctx.bundle / "lanes" / lane.name / "boot.log"
            seen = Evidence(metrics=obs.get("metrics_after"), props=obs.get("props"),
                            boot_log=read_log(log) if log.exists() else "")
            findings += adapter_for(lane.engine).check_declared(lane, fields, seen)
        result.details["declared"] = [finding.dump() for finding in findings]
        result.caveats += [finding.sentence() for finding in findings if finding.status == "unproven"]
        return findings

    def _instrument_problems(self, control: EffectiveLane, candidate: EffectiveLane, ctrl: dict[str, Any],
                             cand: dict[str, Any], thinking: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        """(problems that leave nothing judged, the lanes where the thinking switch is inert, by role);
        ``thinking`` gets its details."""
        problems = ctrl["problems"] + cand["problems"]
        n = min(self.spec.probes, len(load_prompts(self.ctx.input_paths[self.spec.input])))
        n += len(self.spec.exercise)
        for name, obs in ((control.name, ctrl), (candidate.name, cand)):
            if len(obs["outputs"]) < n:
                problems.append(f"{name}: {len(obs['outputs'])}/{n} probes answered")
            elif n >= 2 and len(set(obs["outputs"].values())) == 1:
                problems.append(f"{name} gave the same reply to all {n} probes; it is not answering them")
        inert: dict[str, str] = {}
        if self.spec.thinking is not None:
            inert, trouble = self._judge_thinking({"control": control.name, "candidate": candidate.name}, thinking)
            problems += trouble
        return problems, inert

    def _report(self, result: GateResult, candidate: EffectiveLane, ctrl: dict[str, Any], cand: dict[str, Any],
                evidence: dict[str, str], unavailable: list[str], thinking: dict[str, Any]) -> None:
        result.details = {"differs": evidence, "unavailable": unavailable, "axis": candidate.axis,
                          "control_outputs": ctrl["outputs"], "candidate_outputs": cand["outputs"],
                          "control_counters": ctrl["counters"], "candidate_counters": cand["counters"]}
        if self.spec.thinking is not None:
            result.details["thinking"] = thinking
        result.metrics["observables_differing"] = Metric(
            value=len(evidence), denominator=len(self.spec.rule.observe) - len(unavailable), unit="observables")
        for name, obs in (("control", ctrl), ("candidate", cand)):
            if obs["speeds"]:
                result.metrics[f"{name}_probe_speed_median"] = Metric(
                    value=round(statistics.median(obs["speeds"]), 3), unit="tok/s", denominator=len(obs["speeds"]),
                    note="completion tokens / request wall time, per probe")

    def _requirements_unmet(self, candidate: EffectiveLane, cand: dict[str, Any]) -> list[str]:
        """The counters and boot-log lines the rule requires of the candidate, where they are missing."""
        failures = []
        after = cand.get("metrics_after")
        for counter in self.spec.rule.require_counters:
            values = {k: v for k, v in (after or {}).items() if k == counter or k.startswith(counter + "{")}
            if not values or not any(v > 0 for v in values.values()):
                failures.append(f"required counter {counter} is {'absent' if not values else 'zero'} on "
                                f"{candidate.name} after warmup and probes: the flag did not act")
        boot = self.ctx.bundle / "lanes" / candidate.name / "boot.log"
        boot_text = read_log(boot)  # bounded: its head and tail past BOOT_LOG_BYTES; "" when missing
        for pattern in self.spec.rule.require_boot_log:
            if not re.search(pattern, boot_text):
                failures.append(f"boot log of {candidate.name} does not show {pattern!r}")
        return failures

    def _conclude(self, result: GateResult, candidate: EffectiveLane, control: EffectiveLane, ctrl: dict[str, Any],
                  cand: dict[str, Any], evidence: dict[str, str], unavailable: list[str]) -> None:
        acting = {k: v for k, v in evidence.items() if k in ACTING}
        parsed = {k: v for k, v in evidence.items() if k in PARSED}
        # machinery only the candidate has (its counters exist, the control's do not) that never moved:
        # the axis is there and these probes did not exercise it
        dormant = sorted(k for k, v in (cand["counters"] or {}).items()
                         if v == 0 and ctrl["counters"] is not None and k not in ctrl["counters"])
        result.details["dormant_counters"] = dormant
        if not acting:
            self._not_shown_acting(result, candidate, control, parsed, dormant, unavailable)
            return
        result.verdict = result.weigh(Verdict.PASS, f"the axis shows acting on {', '.join(acting)}: "
                                      + "; ".join(f"{k}: {v}" for k, v in acting.items()))
        if parsed:
            result.reasons.append("also parsed: " + "; ".join(f"{k}: {v}" for k, v in parsed.items()))

    def _not_shown_acting(self, result: GateResult, candidate: EffectiveLane, control: EffectiveLane,
                          parsed: dict[str, str], dormant: list[str], unavailable: list[str]) -> None:
        rule = self.spec.rule
        if dormant:
            warning = (f"AXIS NOT EXERCISED: {candidate.name} ({', '.join(candidate.axis)}) has counters the "
                       f"control lacks ({', '.join(dormant[:4])}) that never moved during the probes")
            result.verdict = result.weigh(Verdict.INCONCLUSIVE, warning)
            result.reasons.append("not exercised by these probes: add probes that exercise the axis "
                                  "(ruler `exercise: [repetition]` for n-gram speculation)")
        elif parsed:
            # parsed, not shown acting: a real axis these probes never exercised, or a flag that only logs
            watched = [o for o in rule.observe if o in ACTING and o not in unavailable]
            warning = (f"AXIS NOT SHOWN ACTING: {candidate.name} ({', '.join(candidate.axis)}) was parsed "
                       f"({'; '.join(f'{k}: {v}' for k, v in parsed.items())}) but changed nothing on "
                       f"{', '.join(watched) or 'no acting observable'}")
            result.verdict = result.weigh(Verdict.INCONCLUSIVE, warning)
            result.reasons.append("not exercised by these probes, or inert: a boot-log line or an engine "
                                  "property shows a flag was parsed, never that it acts; add probes that "
                                  "exercise the axis (ruler `exercise`, or an input that does)")
        else:
            warning = (f"AXIS MAY BE INERT: candidate {candidate.name} ({', '.join(candidate.axis)}) is "
                       f"indistinguishable from {control.name} on "
                       f"{', '.join(o for o in rule.observe if o not in unavailable)}")
            result.verdict = result.weigh(Verdict(rule.inert_verdict), warning)
        result.warnings.append(warning)

    def _speed_gate_evidence(self, candidate: EffectiveLane, control: EffectiveLane) -> str | None:
        """A speed gate in the same window whose comparison excludes zero (at its Bonferroni-shared
        confidence, over interleaved boots) shows the axis acting on speed: a dead flag does that at most
        at the nominal error rate, where a few short probes on a shared host differ by 2-3x from noise."""
        for spec in self.ctx.contract.contract.gates:
            if not isinstance(spec, SpeedSpec):
                continue
            gate = SpeedGate(spec, self.ctx)
            for level, looks in sorted(gate.sequence(candidate, control).levels.items()):
                est = looks[-1]["estimate"] if looks else None
                if est is not None and (est.low > 0 or est.high < 0):
                    return (f"the {gate.gate_id} gate's comparison at C{level}: {est.change:+.1%} "
                            f"[{est.confidence:.1%} CI {est.low:+.1%}, {est.high:+.1%}] over {est.boots} boots")
        return None

    def _compare(self, observable: str, ctrl: dict[str, Any], cand: dict[str, Any]) -> str | Literal[False] | None:
        """A sentence when the lanes differ, False when they do not, None when it cannot be observed."""
        if observable == "outputs":
            changed = [k for k in ctrl["outputs"] if cand["outputs"].get(k) != ctrl["outputs"][k]]
            return f"{len(changed)}/{len(ctrl['outputs'])} probe replies differ" if changed else False
        if observable == "logprobs":
            if not any(ctrl["logprobs"].values()) or not any(cand["logprobs"].values()):
                return None
            diffs = sum(1 for k in ctrl["logprobs"] for a, b in zip(ctrl["logprobs"][k], cand["logprobs"].get(k, []), strict=False)
                        if a != b)
            return f"{diffs} token positions have different top-k logprobs" if diffs else False
        if observable == "metrics":
            a, b = ctrl["counters"], cand["counters"]
            if a is None or b is None:
                return None
            changed = moved_differently(a, b)
            return f"counters moved differently over the probes: {', '.join(changed[:6])}" if changed else False
        if observable == "speed":
            sa, sb = ctrl["speeds"], cand["speeds"]
            if not sa or not sb:
                return None
            ma, mb = statistics.median(sa), statistics.median(sb)
            change = (mb - ma) / ma if ma else 0.0
            apart = max(sa) < min(sb) or max(sb) < min(sa)
            if abs(change) > self.spec.rule.speed_tolerance and apart:
                return f"probe speed {mb:.1f} vs {ma:.1f} tok/s ({change:+.0%}), ranges apart"
            return False
        if observable == "boot_log":
            a, b = ctrl["boot_log"], cand["boot_log"]
            if a is None or b is None:
                return None
            extra = sorted(set(b) - set(a))
            lost = sorted(set(a) - set(b))
            if extra or lost:
                return f"boot log lines differ, e.g. {(extra or lost)[0][:100]!r}"
            return False
        if observable == "props":
            a, b = ctrl.get("props"), cand.get("props")
            if a is None or b is None:
                return None
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return f"engine properties differ: {', '.join(changed)}" if changed else False
        return None
