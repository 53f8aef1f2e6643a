"""speed: throughput and latency per level (concurrency or request rate) and prompt class, over interleaved
boots.

Live (``collect``, see run.py): warm every batch shape, measure rows in reps, void and re-run. The window
boots control, candidate, control, candidate, ..., control (every candidate boot between two control
boots) while ``wants_pair`` says the comparison is still open, up to ``max_boot_pairs``.
Offline (``judge``): from raw records only. Each boot gives each prompt a value (the median of its
requests in the row's valid attempt); sequential.py fits the change with the window's drift taken out,
the boot as the unit of shared luck, and looks after every pair with a Bonferroni share of the error
rate. The gate stops at the first look that decides every judged level; undecided at the last, it is
INCONCLUSIVE with the change this window could have detected.

The instrument checks itself before its numbers count: a boot whose judged row stayed VOID after
re-runs (spread, cut streams, other clients on the port, other tenants on the host), or whose client
may have limited the rate (its CPU share per rep), does not count; a lane that gives every prompt the
same reply is not answering them; a control that jumps past ``max_control_drift`` from one boot to the
next means the environment moved.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import PreflightError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import LiveGate, Visit, register
from campaign.gates.common.inputs import Prompt, load_prompts
from campaign.gates.records import VisitKey
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.gates.speed import present as presenting
from campaign.gates.speed.latency import BootGoodput, highest_meeting, knee, paired_share_change, pooled, samples
from campaign.gates.speed.power import POWER, DesignSimulation, RuleShape, conditional_decision, fit_noise, pairs_for
from campaign.gates.speed.rows import BUSY_HOST, RowResult, Summarize, evaluate_row, facts_from, group_attempts
from campaign.gates.speed.run import SpeedMeasurement, by_class, rep_order
from campaign.gates.speed.sequential import (
    BootValues,
    Estimate,
    Look,
    estimate,
    holm_rejected,
    look,
    look_confidence,
    looks_allowed,
    p_below_bar,
    reachable,
    tail_value,
)
from campaign.gates.speed.spec import Level, SpeedRule, SpeedSpec, level_tag, tail_samples_needed
from campaign.lanes.hostcpu import pinned_threads
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Presentation

__all__ = ["SpeedGate"]

_UNITS = {"decode_tok_s": "tok/s", "effective_tok_s": "tok/s", "ttft_s": "s"}
_FOREIGN = "another client on the port"
_POSITIONS_IN_METRICS = 8  # in a row's reasons: its engine counters include other traffic


@dataclass
class _LaneView:
    key: str  # visit key: the lane name, or <lane>@rerun1
    rows: dict[tuple[Level, str], list[RowResult]]
    waits: list[dict[str, Any]] = field(default_factory=list)  # host_wait records: re-runs held for a quiet host

    def chosen(self, row: tuple[Level, str]) -> RowResult | None:
        return next((r for r in self.rows.get(row, []) if r.valid), None)


@dataclass
class _Boot:
    role: str  # control, candidate, control_rerun<j>, candidate_rerun<j>
    position: int  # order in the window: control@j at 2j, candidate@j at 2j + 1
    view: _LaneView


@dataclass
class _Sequence:
    """The boots of one comparison and the looks replayed over them."""

    boots: list[_Boot]
    look_confidence: float
    pairs: int = 0  # complete pairs: candidate boots bracketed by a later control boot
    looks_made: int = 0
    stop: int | None = None  # the pairs after which a look decided (or found a problem)
    futile: int | None = None  # the pairs after which a look found that no more pairs could decide
    conditional_power: float | None = None  # at the last look: the chance the remaining pairs decide
    verdict: Verdict | None = None
    problems: list[str] = field(default_factory=list)  # the comparison cannot be judged at all
    caveats: list[str] = field(default_factory=list)
    excluded: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # boot role -> level -> why not counted
    levels: dict[Level, list[dict[str, Any]]] = field(default_factory=dict)  # level -> its looks


@register
class SpeedGate(LiveGate):
    spec: SpeedSpec

    @classmethod
    def aa_claims(cls, rule: Any, result: dict[str, Any]) -> str | None:
        """A change of exactly zero meets the bar or misses it by the rule alone (a +5% bar: FAIL is the right
        answer for an A/A); a verdict the other way claims a change that is not there."""
        verdict = result.get("verdict")
        if not isinstance(rule, SpeedRule) or verdict not in ("PASS", "FAIL"):
            return None
        if verdict == "PASS" and not (0.0 > rule.ci_lower_above and 0.0 >= rule.min_mean_change):
            return f"faster than its control by the bar ({rule.min_mean_change:+.0%}, CI low above {rule.ci_lower_above:+.0%})"
        if verdict == "FAIL" and rule.min_mean_change <= 0.0:
            return f"slower than its control beyond the bar ({rule.min_mean_change:+.0%})"
        return None

    # the control's second boot closes the first pair; later pairs are booted while wants_pair says so
    control_reruns = 1

    @property
    def max_boot_pairs(self) -> int:
        return self.spec.max_boot_pairs

    def prompts(self) -> list[Prompt]:
        return load_prompts(self.ctx.input_paths[self.spec.input])

    def planned_requests(self, visit: Visit) -> int:
        """Per level and class: one warmup wave (one request per user, or a rate level's schedule once),
        then each rep sends the class's prompts (at least one per user); VOID rows re-run are not counted."""
        classes = by_class(self.prompts())
        return sum((level if isinstance(level, int) else len(rep_order(prompts, level)))
                   + self.spec.reps * len(rep_order(prompts, level))
                   for level in self.spec.loads for prompts in classes.values())

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        warm_path = self.ctx.bundle / "raw" / self.gate_id / "warmup" / f"{visit.key}.jsonl"
        with JsonlAppender(warm_path) as warm_sink, pinned_threads(self.spec.client_cpus) as client_cpus:
            await SpeedMeasurement(self.spec, self.prompts(), client=run.client, adapter=run.adapter,
                                   model=run.adapter.served_model(run.lane), sink=sink, warm_sink=warm_sink,
                                   request_defaults=self.ctx.request_defaults,
                                   lane_cpu=getattr(run.running, "cpu_seconds", None),
                                   facts={"client_cpus": client_cpus,
                                          "lane_cpus": run.inspect.get("cpus") or run.inspect.get("cpuset_cpus")}).run()

    # ---- offline ----

    def _summarizer(self, visit_key: str) -> Summarize | None:
        lane = self.ctx.contract.lanes.get(VisitKey.parse(visit_key).lane)
        try:
            from campaign.lanes.engines.registry import adapter_for

            return adapter_for(lane.engine).metric_summary if lane else None
        except PreflightError:
            return None  # no adapter for this engine here: its counters stay raw in the bundle

    def view(self, visit_key: str) -> _LaneView | None:
        records = self.ctx.raw_records(self.gate_id, visit_key)
        if not records:
            return None
        facts, classes = facts_from(records), by_class(self.prompts())
        summarize = self._summarizer(visit_key)
        rows: dict[tuple[Level, str], list[RowResult]] = {}
        for key, attempts in group_attempts(records).items():
            per_rep = len(rep_order(classes.get(key[1], []), key[0]))
            rows[key] = [evaluate_row(a, per_rep=per_rep, reps=self.spec.reps, max_tokens=self.spec.max_tokens,
                                      facts=facts, rule=self.spec.rule, summarize=summarize,
                                      arrival=self.spec.arrival) for a in attempts]
        return _LaneView(key=visit_key, rows=rows, waits=[r for r in records if r.get("kind") == "host_wait"])

    def _value(self, stats: Any) -> float | None:
        return getattr(stats, self.spec.rule.metric)

    def per_prompt(self, view: _LaneView, level: Level) -> dict[str, float]:
        """Each prompt's median request; for a latency tail, each class's percentile of its pooled samples."""
        if self.spec.rule.tail is not None:
            return self._per_class_tail(view, level, *self.spec.rule.tail)
        values: dict[str, list[float]] = {}
        for cls in by_class(self.prompts()):
            chosen = view.chosen((level, cls))
            for tags, stats in chosen.stats if chosen else []:
                value = self._value(stats)
                if value is not None and value > 0:
                    values.setdefault(str(tags.get("prompt")), []).append(value)
        return {pid: statistics.median(v) for pid, v in values.items()}

    def _per_class_tail(self, view: _LaneView, level: Level, quantity: str, percent: int) -> dict[str, float]:
        """A class with fewer samples than its percentile needs is left out of this boot (too few counted
        requests: the level then rests on the classes every boot measured, or has no estimate)."""
        need, out = tail_samples_needed(percent), {}
        for cls in by_class(self.prompts()):
            value = tail_value(self._class_samples(view, level, cls, quantity), percent, need)
            if value is not None and value > 0:
                out[cls] = value
        return out

    def _class_samples(self, view: _LaneView, level: Level, cls: str, quantity: str) -> list[float]:
        """Every sample of a latency quantity in the class's counted row of this boot at this level."""
        chosen = view.chosen((level, cls))
        return [x for _, stats in (chosen.stats if chosen else []) for x in samples(stats, quantity)]

    def _tails(self, view: _LaneView, level: Level) -> dict[str, dict[str, dict[str, float | None]]]:
        """Reported for every boot, whatever the rule judges: per class, TTFT, chunk gap and request time at
        p50/p90/p95/p99 (None where the boot has fewer samples than the percentile needs)."""
        out = {}
        for cls in by_class(self.prompts()):
            found = {quantity: self._class_samples(view, level, cls, quantity) for quantity in ("ttft", "itl", "e2e")}
            out[cls] = {quantity: {f"p{percent}": tail_value(values, percent, tail_samples_needed(percent))
                                   for percent in (50, 90, 95, 99)} for quantity, values in found.items()}
        return out

    @classmethod
    def present(cls, rule: SpeedRule | None, result: dict[str, Any]) -> Presentation:
        return presenting.present(rule, result)

    @classmethod
    def headline_words(cls, rule: SpeedRule | None, result: dict[str, Any]) -> str | None:
        return presenting.headline_words(rule, result)

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        result = self.new_result(candidate, control)
        seq = self.sequence(candidate, control)
        views = {boot.role: boot.view for boot in seq.boots}
        result.caveats += seq.caveats
        result.caveats += [f"{view.key} {level_tag(w['level'])}/{w['class']}: before re-run {w['attempt']} waited {w['waited_s']:g} s "
                           f"for the host to quiet: " + ("it did" if w.get("quiet") else
                                                         f"it did not within {w['limit_s']:g} s (other processes "
                                                         f"{(w.get('other_shares') or [0])[-1]:.0%} at the end)")
                           for view in views.values() for w in view.waits]
        unchecked = sorted({role for role, view in views.items() for attempts in view.rows.values()
                            for row in attempts for rep in row.rep_rows if rep["host_other_share"] is None})
        if unchecked and self.spec.rule.max_host_busy is not None:
            result.caveats.append(f"other load on the host was not measured for {', '.join(unchecked)} "
                                  "(not a local process lane): other tenants cannot be ruled out")
        result.details["schedule"] = {"boots": [{"visit": b.view.key, "role": b.role, "position": b.position,
                                                 "not_counted_at": sorted(seq.excluded.get(b.role, {}))}
                                                for b in seq.boots],
                                      "pairs": seq.pairs, "max_boot_pairs": self.spec.max_boot_pairs,
                                      "looks": seq.looks_made, "stopped_at_pairs": seq.stop,
                                      "look_confidence": seq.look_confidence, "excluded": seq.excluded,
                                      # the limits this judgement applied, as the rule resolved them
                                      "max_control_drift": self.spec.rule.max_control_drift,
                                      "fail_levels": self.spec.rule.fail_levels, "futility": self.spec.rule.futility,
                                      "conditional_power": seq.conditional_power}
        result.details["rows"] = self._row_details(views)
        result.details["engine"] = {role: self._engine_totals(view) for role, view in views.items()}
        self._engine_metrics(result)
        levels = self._level_entries(result, seq, views)
        result.details["levels"] = levels
        met: dict[str, dict[Level, bool]] | None = None
        if self.spec.slo is not None:
            met = {lane: {level: bool((levels[str(level)].get("goodput", {}).get(lane) or {}).get("meets_slo"))
                          for level in self.spec.loads} for lane in ("control", "candidate")}
            result.details["slo"] = {**self.spec.slo.model_dump(), "highest_within": {
                lane: highest_meeting(self.spec.loads, met[lane]) for lane in met}}
        throughput = self._lane_throughput(views)
        result.details["knee"] = {lane: knee(self.spec.loads, throughput[lane], met[lane] if met else None)
                                  for lane in throughput}
        if seq.problems:
            result.reasons = ["instrument: the speed numbers cannot be judged", *seq.problems[:20]]
            return result
        judged = self.spec.rule.levels or self.spec.loads
        for level in judged:  # each judged level's own verdict with its sentence
            entry = levels[str(level)]
            result.weigh(Verdict(entry.get("verdict") or "INCONCLUSIVE"), entry["reason"])
        result.verdict = seq.verdict or Verdict.INCONCLUSIVE
        return result

    def wants_pair(self, candidate: EffectiveLane, control: EffectiveLane, pairs_done: int) -> bool:
        """Live: after ``pairs_done`` pairs, does this comparison need another (undecided, still measurable,
        under ``max_boot_pairs``)? The same replay the judge makes, so a resumed window decides the same."""
        if pairs_done >= self.spec.max_boot_pairs:
            return False
        seq = self.sequence(candidate, control, pairs=pairs_done)
        return seq.verdict is None and not seq.problems and seq.futile is None

    def sequence(self, candidate: EffectiveLane, control: EffectiveLane, pairs: int | None = None) -> _Sequence:
        """Every boot with records in window order, the boots that cannot count, and the looks replayed:
        after pair 2, 3, ... the gate stops at the first look that decides every judged level."""
        classes, spec = by_class(self.prompts()), self.spec
        seq = _Sequence(boots=self._boot_views(candidate, control, pairs),
                        look_confidence=look_confidence(spec.rule.confidence, spec.max_boot_pairs))
        roles = {boot.role for boot in seq.boots}
        seq.problems += [f"{role} lane has no speed records" for role in ("control", "candidate") if role not in roles]
        judged = set(spec.rule.levels or spec.loads)
        for boot in seq.boots:
            per_level, same_reply = self._instrument_problems(boot.role, boot.view, classes)
            seq.problems += same_reply
            for level, texts in per_level.items():
                seq.excluded.setdefault(boot.role, {})[level_tag(level)] = texts
                prefix = f"boot not counted at {level_tag(level)}" if level in judged else "not judged"
                seq.caveats += [f"{prefix}: {text}" for text in texts]
        seq.pairs = max((b.position // 2 for b in seq.boots if b.role.startswith("control")), default=0)
        if pairs is not None:
            seq.pairs = min(seq.pairs, pairs)
        if seq.problems:
            return seq
        for k in range(2, seq.pairs + 1):
            self._look(seq, k)
            if seq.verdict is not None or seq.problems:
                seq.stop = k
                break
            # live, before booting another pair; judged again, at the last pair measured only (a live stop
            # leaves no later boots, and boots measured under other rules are never thrown away)
            if k == seq.pairs and k < self.spec.max_boot_pairs and self._futile(seq):
                seq.futile = k
                break
        return seq

    def _futile(self, seq: _Sequence) -> bool:
        """Stop pairing (ends INCONCLUSIVE, never PASS or FAIL) by the rule's ``futility``: the chance that the
        remaining pairs decide is under ``min_conditional_power`` (``conditional_power``), or no number of
        pairs could (``reach``, the boot term gone: ``sequential.reachable``)."""
        rule, judged = self.spec.rule, self.spec.rule.levels or self.spec.loads
        lasts = [(seq.levels.get(level) or [{}])[-1] for level in judged]
        if rule.futility == "none" or any(row.get("estimate") is None for row in lasts):
            return False  # a level without an estimate yet: another pair may give it one
        if rule.futility == "reach":
            reach = [reachable(row["estimate"], min_mean_change=rule.min_mean_change,
                               ci_lower_above=rule.ci_lower_above) for row in lasts]
            return not all(can_pass for can_pass, _ in reach) and not any(can_fail for _, can_fail in reach)
        chances = [conditional_decision(row["values"], self._shape(row["estimate"].prompts), pairs_done=row["pairs"],
                                        higher_is_better=rule.higher_is_better) for row in lasts]
        if any(chance is None for chance in chances):
            return False
        # PASS needs every level, FAIL any one: at most the least likely PASS plus every level's FAIL
        decide = min(c[0] for c in chances if c) + sum(c[1] for c in chances if c)
        seq.conditional_power = round(decide, 4)
        return decide < rule.min_conditional_power

    def _shape(self, prompts: int) -> RuleShape:
        """The rule as power.py simulates it, for a level of ``prompts`` counted prompts: wins over another
        number of prompts than counted can never be met (the look says so), so none are enough there."""
        rule = self.spec.rule
        judged = rule.levels or self.spec.loads
        wins = rule.wins()
        return RuleShape(rule.min_mean_change, rule.ci_lower_above, rule.confidence, self.spec.max_boot_pairs,
                         fail_levels=len(judged) if rule.fail_levels == "holm" else 1,
                         wins_needed=None if wins is None else wins[0] if wins[1] == prompts else prompts + 1)

    def _boot_views(self, candidate: EffectiveLane, control: EffectiveLane, pairs: int | None) -> list[_Boot]:
        """control@j at position 2j, candidate@j at 2j + 1: each candidate boot between two control boots."""
        boots, last = [], self.spec.max_boot_pairs if pairs is None else pairs
        for j in range(last + 1):
            for lane, role, position in ((control, "control", 2 * j), (candidate, "candidate", 2 * j + 1)):
                if role == "candidate" and j == last:
                    continue
                view = self.view(str(VisitKey(lane.name, j)))
                if view is not None:
                    boots.append(_Boot(role=role if j == 0 else f"{role}_rerun{j}", position=position, view=view))
        return boots

    def _look(self, seq: _Sequence, pairs: int) -> None:
        """One look after ``pairs`` pairs: each level's estimate on the boots measured so far; PASS at every
        judged level, or FAIL at one (Holm over the judged levels with ``fail_levels: holm``)."""
        rule, judged = self.spec.rule, self.spec.rule.levels or self.spec.loads
        seq.looks_made = pairs - 1
        for level in self.spec.loads:
            counted = [b for b in seq.boots if b.position <= 2 * pairs
                       and level_tag(level) not in seq.excluded.get(b.role, {})]
            values = [BootValues(b.view.key, b.position, b.role.startswith("candidate"), self.per_prompt(b.view, level))
                      for b in counted]
            values = [v for v in values if v.values]  # a row VOID on a reported-only level: that boot sits out
            drift = _control_drift(values, higher=rule.higher_is_better)
            est = estimate(values, higher_is_better=rule.higher_is_better, confidence=seq.look_confidence,
                           min_columns=1 if rule.tail else 2)
            seq.levels.setdefault(level, []).append({"pairs": pairs, "estimate": est, "look": self._decide(est),
                                                     "drift": drift, "values": values})
            if level in judged and drift and rule.max_control_drift is not None \
                    and abs(drift["largest"]) > rule.max_control_drift:
                seq.problems.append(f"{level_tag(level)}: the control moved {drift['largest']:+.1%} from one of its boots to "
                                    f"the next (limit {rule.max_control_drift:.0%}): the environment moved")
        rows = {level: seq.levels[level][-1] for level in judged}
        self._share_fail_side(rows, seq.look_confidence)
        decisions = [row["look"].verdict if row["look"] else None for row in rows.values()]
        if "FAIL" in decisions:
            seq.verdict = Verdict.FAIL
        elif decisions and all(d == "PASS" for d in decisions):
            seq.verdict = Verdict.PASS

    def _decide(self, est: Estimate | None) -> Look | None:
        rule = self.spec.rule
        decided = look(est, min_mean_change=rule.min_mean_change, ci_lower_above=rule.ci_lower_above) if est else None
        wanted = rule.wins()
        if decided and decided.verdict == "PASS" and wanted is not None:
            assert est is not None  # for mypy: a look is made on an estimate only
            need, of = wanted
            wins = sum(1 for change in est.per_prompt.values() if change > 0)
            if of != est.prompts or wins < need:
                decided = None  # the bar includes the wins: not met yet
        return decided

    def _share_fail_side(self, rows: dict[Level, dict[str, Any]], confidence: float) -> None:
        """A FAIL at any judged level fails the comparison: with ``fail_levels: holm`` the levels share the
        FAIL side's error rate by Holm's step-down, so a level's own FAIL stands only if Holm rejects it."""
        rule = self.spec.rule
        if rule.fail_levels != "holm" or len(rows) < 2:
            return
        # a level without an estimate is a hypothesis not rejected (p 1): it still counts in Holm's m
        p = {level: p_below_bar(row["estimate"], rule.min_mean_change) if row["estimate"] else 1.0
             for level, row in rows.items()}
        alpha = (1 - confidence) / 2
        kept = holm_rejected(p, alpha)
        for level, row in rows.items():
            if row["look"] is None or row["look"].verdict != "FAIL":
                continue
            share = f"Holm over {len(rows)} judged levels, p {p[level]:.2g} against {alpha:.2g} / {len(rows)} first"
            row["look"] = (Look("FAIL", f"{row['look'].reason} ({share})") if level in kept
                           else Look(None, f"undecided: below the bar at this level's own rate, not at its share ({share})"))

    def _level_entries(self, result: GateResult, seq: _Sequence, views: dict[str, _LaneView]) -> dict[str, Any]:
        entries = {}
        for level in self.spec.loads:
            tag, looks = level_tag(level), seq.levels.get(level, [])
            values = {role: self.per_prompt(view, level) for role, view in views.items()}
            entry: dict[str, Any] = {"judged": level in (self.spec.rule.levels or self.spec.loads),
                                     "looks": [_look_row(row) for row in looks]}
            self._lane_level_metrics(result, views, level, values, _UNITS.get(self.spec.rule.metric, "s"))
            final = looks[-1] if looks else None
            est = final["estimate"] if final else None
            why = _why_fewer(seq, tag, views)
            entry["prompts"] = (_class_rows(values, est) if self.spec.rule.tail else
                                _prompt_rows(self.prompts(), values, est))
            entry["tails"] = {role: self._tails(view, level) for role, view in views.items() if view is not None}
            if self.spec.slo is not None:
                entry["goodput"] = self._goodput(result, seq, level)
            if final and final["drift"]:
                entry["control_drift"] = final["drift"]
                result.metrics[f"{tag}.control_drift"] = Metric(
                    value=round(final["drift"]["largest"], 5), denominator=final["drift"]["prompts"],
                    unit="fraction (one control boot vs the one before it, mean per prompt)",
                    note=f"the largest of {len(final['drift']['steps'])} step(s)")
            if final is None or est is None:
                entry["verdict"] = "INCONCLUSIVE"
                entry["reason"] = (f"{tag}: after {seq.pairs} boot pair(s), too few boots count at this level "
                                   f"({why or 'the caveats say why'}); the comparison needs 2 "
                                   "pairs, 2 counted boots of each "
                                   "lane and 4 in all: a single pair leaves no degree of freedom for the "
                                   f"boot-to-boot noise{self._stopped_early(seq)}")
                entries[str(level)] = entry
                continue
            entry["estimate"] = est.as_dict()
            entry["power"] = power = self._power(final["values"], est, decided=bool(final["look"] and final["look"].verdict))
            self._change_metrics(result, tag, est, seq, power)
            entry.update(self._level_verdict(tag, est, final["look"], seq, why, power))
            entries[str(level)] = entry
        return entries

    def _boot_throughput(self, view: _LaneView, level: Level) -> float | None:
        """A boot's aggregate tok/s at a level: each class's median over reps, the mean over classes; None
        unless every class counted there."""
        classes = by_class(self.prompts())
        chosen = [view.chosen((level, cls)) for cls in classes]
        aggregates = [r.median_aggregate for r in chosen if r and r.median_aggregate is not None]
        return statistics.fmean(aggregates) if aggregates and len(aggregates) == len(classes) else None

    def _lane_throughput(self, views: Mapping[str, _LaneView | None]) -> dict[str, dict[Level, float]]:
        """Per lane and level: aggregate tok/s (each boot's median over reps, mean over classes), the mean over
        the lane's boots that measured every class there."""
        out: dict[str, dict[Level, float]] = {"control": {}, "candidate": {}}
        for level in self.spec.loads:
            for lane in out:
                figures = [figure for role, view in views.items() if view is not None and role.startswith(lane)
                           for figure in [self._boot_throughput(view, level)] if figure is not None]
                if figures:
                    out[lane][level] = statistics.fmean(figures)
        return out

    def _goodput(self, result: GateResult, seq: _Sequence, level: Level) -> dict[str, Any]:
        """The SLO at this level: per lane, its counted boots' requests pooled (good share, goodput), and the
        paired change in the good share. Reported, not judged."""
        slo, tag = self.spec.slo, level_tag(level)
        assert slo is not None  # for mypy: called only with an slo
        boots = []
        for boot in seq.boots:
            if tag in seq.excluded.get(boot.role, {}):
                continue  # as for the change: a boot whose rows here stayed VOID does not count
            counted = BootGoodput(boot.role, boot.position, boot.role.startswith("candidate"))
            for cls in by_class(self.prompts()):
                chosen = boot.view.chosen((level, cls))
                if chosen is not None:
                    counted.add([stats for _, stats in chosen.stats], len(chosen.errors),
                                sum(rep["duration_s"] for rep in chosen.rep_rows), slo)
            boots.append(counted)
        lanes = pooled(boots, slo)
        for lane, figures in lanes.items():
            if figures["share"] is not None:
                result.metrics[f"{tag}.{lane}.good_share"] = Metric(
                    value=figures["share"], unit="requests within the SLO / requests", denominator=figures["requests"],
                    note=f"every counted boot of the {lane}; goodput {figures['goodput_rps']} requests/s")
        return {**lanes, "paired_change": paired_share_change(boots, self.spec.rule.confidence)}

    def _level_verdict(self, tag: str, est: Estimate, decided: Look | None, seq: _Sequence,
                       why: str, power: dict[str, Any] | None) -> dict[str, str]:
        rule = self.spec.rule
        wins = sum(1 for change in est.per_prompt.values() if change > 0)
        text = (f"{tag} {rule.metric}: {est.change:+.2%} [{est.confidence:.2%} CI {est.low:+.2%}, {est.high:+.2%}] "
                f"after {seq.looks_made + 1} boot pair(s), look {seq.looks_made} of "
                f"{looks_allowed(self.spec.max_boot_pairs)} (drift taken out; boot SE {est.se_boot:.2%}, prompt SE "
                f"{est.se_prompt:.2%}, {est.df:.1f} df), wins {wins}/{est.prompts}; bar: change >= "
                f"{rule.min_mean_change:+.0%} and CI low > {rule.ci_lower_above:+.0%}")
        if (wanted := rule.wins()) is not None:
            text += f" and wins >= {wanted[0]}/{wanted[1]}"
        if decided is not None and decided.verdict:
            return {"verdict": decided.verdict, "reason": f"{text}: {decided.reason}"}
        held = f" ({decided.reason.split(' (', 1)[1]}" if decided and decided.reason.startswith("undecided:") else ""
        return {"verdict": "INCONCLUSIVE",
                "reason": f"{text}: undecided{held}; {self._power_words(power)}{'; ' + why if why else ''}"
                          f"{self._stopped_early(seq)}{self._futility_words(seq)}"}

    def _power(self, values: list[BootValues], est: Estimate, *, decided: bool) -> dict[str, Any] | None:
        """What this rule decides at the noise these boots measured, by simulating it (power.py): a true change
        at the bar, none, the smallest passed with 80%, and, for an undecided level, the pairs a likely change
        needs."""
        rule = self.spec.rule
        if rule.tail:
            return None  # a percentile pooled per class: no per-prompt noise to simulate from
        noise = fit_noise(values, higher_is_better=rule.higher_is_better)
        if noise is None:
            return None
        shape = self._shape(noise.prompts)
        design = DesignSimulation(noise, shape)
        if rule.min_mean_change > 0:  # a change like the one seen, or twice the bar
            target = max(est.change, 2 * rule.min_mean_change)
        else:  # a not-worse bar: an unchanged lane
            target = 0.0 if rule.ci_lower_above < 0 else max(est.change, 0.05)
        return {"noise": noise.as_dict(), "max_boot_pairs": shape.max_boot_pairs, "runs": design.runs,
                "at_bar": design.outcome(rule.min_mean_change).as_dict(), "unchanged": design.outcome(0.0).as_dict(),
                "passed_with_80": design.change_passed(), "target": round(target, 5),
                "pairs_for_target": None if decided else pairs_for(noise, shape, target)}

    def _power_words(self, power: dict[str, Any] | None) -> str:
        if power is None and self.spec.rule.tail:
            return ("a latency tail pooled per class: its CI rests on the boots' scatter alone, and its power is not "
                    "simulated; more boot pairs narrow it")
        if power is None:
            return "too few boots to simulate the rule at this noise"
        rule, noise = self.spec.rule, power["noise"]
        passed = (f"a true {power['passed_with_80']:+.1%} in {POWER:.0%}" if power["passed_with_80"] is not None
                  else f"no true change up to +400% in {POWER:.0%}")
        words = (f"at the noise measured (boot SD {noise['boot_sd']:.1%}, prompt SD {noise['prompt_sd']:.1%}, the "
                 f"change's SD over prompts {noise['effect_sd']:.1%}) this rule with up to {power['max_boot_pairs']} "
                 f"boot pairs passes, at this level, a true {rule.min_mean_change:+.0%} (the bar) in "
                 f"{power['at_bar']['pass_rate']:.0%} of windows and {passed} (simulated, {power['runs']} windows, "
                 "without the futility stop)")
        target, pairs = power["target"], power["pairs_for_target"]
        words += (f"; a true {target:+.1%} passes in {POWER:.0%} with max_boot_pairs {pairs}, or a quieter host"
                  if pairs else f"; a true {target:+.1%} is out of reach ({POWER:.0%} of windows) within 20 boot "
                                "pairs at this noise: more prompts, or a quieter host")
        if rule.min_mean_change > 0:
            words += ("; the estimate must reach the bar at a look (a true change at the bar passes about half the "
                      "time with one look): to pass it with 80% power, lower min_mean_change and keep ci_lower_above "
                      "where the claim is")
        return words

    def _futility_words(self, seq: _Sequence) -> str:
        if seq.futile is None:
            return ""
        if seq.conditional_power is not None:
            return (f"; no more boot pairs after pair {seq.futile}: the remaining pairs would decide in "
                    f"{seq.conditional_power:.0%} of this window's simulated continuations (under "
                    f"min_conditional_power {self.spec.rule.min_conditional_power:.0%})")
        return (f"; no more boot pairs after pair {seq.futile}: however small the boot-to-boot noise got, the "
                "spread of the change from prompt to prompt keeps both the bar and zero inside the CI")

    def _stopped_early(self, seq: _Sequence) -> str:
        """Why this comparison has fewer pairs than it asked for, when the window stopped pairing (its time
        budget) rather than the comparison deciding."""
        stopped = self.ctx.pairs_stopped()
        # cut by the window only if it still wanted a pair: stopped where the window stopped, undecided
        if stopped is None or seq.stop is not None or seq.pairs != int(stopped.get("after_pairs") or 0) \
                or seq.pairs >= self.spec.max_boot_pairs:
            return ""
        return f"; the window booted no more pairs after pair {stopped['after_pairs']}: {stopped['reason']}"

    def _change_metrics(self, result: GateResult, tag: str, est: Estimate, seq: _Sequence,
                        power: dict[str, Any] | None) -> None:
        rule = self.spec.rule
        wins = sum(1 for change in est.per_prompt.values() if change > 0)
        boots = f"{est.boots} boots ({est.candidate_boots} candidate)"
        result.metrics[f"{tag}.mean_change"] = Metric(
            value=round(est.change, 5), unit=f"fraction ({rule.metric} candidate vs control)", denominator=est.prompts,
            note=f"geometric mean over prompts, the window's drift taken out, {boots}; positive = faster")
        result.metrics[f"{tag}.ci_low"] = Metric(
            value=round(est.low, 5), unit="fraction", denominator=est.boots,
            note=f"{est.confidence:.2%} per look ({rule.confidence:.0%} over up to "
                 f"{looks_allowed(self.spec.max_boot_pairs)} looks): boot-to-boot and prompt-to-prompt noise")
        result.metrics[f"{tag}.ci_high"] = Metric(value=round(est.high, 5), unit="fraction", denominator=est.boots)
        result.metrics[f"{tag}.boot_se"] = Metric(value=round(est.se_boot, 5), unit="log ratio", denominator=est.boots,
                                                  note="from the boots' scatter around the fit (control and candidate)")
        result.metrics[f"{tag}.prompt_se"] = Metric(value=round(est.se_prompt, 5), unit="log ratio",
                                                    denominator=est.prompts,
                                                    note="how much the change differs from prompt to prompt")
        if power and power["passed_with_80"] is not None:
            result.metrics[f"{tag}.detectable_change"] = Metric(
                value=round(power["passed_with_80"], 5), unit="fraction", denominator=power["runs"],
                note=f"the smallest true change this rule passes in {POWER:.0%} of windows of up to "
                     f"{power['max_boot_pairs']} pairs at the noise measured (simulated windows)")
        result.metrics[f"{tag}.boot_pairs"] = Metric(value=seq.looks_made + 1, unit="pairs",
                                                     denominator=self.spec.max_boot_pairs)
        result.metrics[f"{tag}.wins"] = Metric(value=wins, unit="prompts", denominator=est.prompts,
                                               note="prompts where the candidate is faster (drift taken out)")

    def _instrument_problems(self, role: str, view: _LaneView,
                             classes: dict[str, list[Prompt]]) -> tuple[dict[Level, list[str]], list[str]]:
        """Per level, why this boot cannot count there (a row stayed VOID, the client may have limited the
        rate); and whether the lane answered its prompts at all."""
        problems: dict[Level, list[str]] = {}
        first_texts: dict[str, str] = {}
        for level in self.spec.loads:
            for cls in classes:
                attempts = view.rows.get((level, cls), [])
                chosen = view.chosen((level, cls))
                if chosen is None:
                    last = attempts[-1].reasons[0] if attempts and attempts[-1].reasons else "never measured"
                    problems.setdefault(level, []).append(
                        f"{role} ({view.key}) row {level_tag(level)}/{cls} stayed VOID after {len(attempts)} attempt(s): {last}")
                    continue
                for tags, stats in chosen.stats:
                    first_texts.setdefault(str(tags.get("prompt")), stats.text)
        same = []
        if len(first_texts) >= 2 and len(set(first_texts.values())) == 1:
            same.append(f"{role} ({view.key}) gave the same reply to all {len(first_texts)} prompts; "
                        "it is not answering them")
        return problems, same

    def _lane_level_metrics(self, result: GateResult, views: Mapping[str, _LaneView | None], level: Level,
                            values: dict[str, dict[str, float]], unit: str) -> None:
        classes = by_class(self.prompts())
        for role, view in views.items():
            if view is None:
                continue
            tag = f"{level_tag(level)}.{role}"
            per_prompt = list(values[role].values())
            if per_prompt:
                result.metrics[f"{tag}.{self.spec.rule.metric}"] = Metric(
                    value=round(statistics.median(per_prompt), 4), unit=unit, denominator=len(per_prompt),
                    note=(f"median over classes of each class's pooled percentile ({view.key})" if self.spec.rule.tail
                          else f"median over prompts of each prompt's median request ({view.key})"))
            chosen = [view.chosen((level, cls)) for cls in classes]
            aggregate = self._boot_throughput(view, level)
            if aggregate is not None:
                result.metrics[f"{tag}.aggregate_tok_s"] = Metric(
                    value=round(aggregate, 2), unit="tok/s (all users; median over reps, mean over classes)",
                    denominator=len(classes))
                if isinstance(level, int):
                    result.metrics[f"{tag}.per_user_tok_s"] = Metric(
                        value=round(aggregate / level, 2), unit="tok/s per user", denominator=level)
            ttfts = [s.ttft_s for r in chosen if r for _, s in r.stats]
            if ttfts:
                result.metrics[f"{tag}.ttft_s"] = Metric(value=round(statistics.median(ttfts), 4), unit="s",
                                                         denominator=len(ttfts), note="median over requests")

    def _row_details(self, views: Mapping[str, _LaneView | None]) -> list[dict[str, Any]]:
        rows = []
        for role, view in views.items():
            if view is None:
                continue
            for (level, cls), attempts in view.rows.items():
                for attempt, row in enumerate(attempts):
                    rows.append({"lane": view.key, "role": role, "level": level, "class": cls, "attempt": attempt,
                                 "status": row.status, "reasons": row.reasons, "spread": row.spread,
                                 "median_aggregate_tok_s": row.median_aggregate, "errors": len(row.errors),
                                 "error_examples": [f"prompt {t.get('prompt')} rep {t.get('rep')}: {e}"
                                                    for t, e in row.errors[:3]],
                                 "engine": row.engine})
        return rows

    def _engine_totals(self, view: _LaneView) -> dict[str, Any]:
        """Over every row attempt: errors, void attempts, the client's own CPU, and the engine's
        counter deltas (acceptance and cache hits do not depend on timing, so an attempt voided for
        spread or host load still counts; one whose counters show other traffic does not)."""
        totals: dict[str, Any] = {"rows": 0, "void_attempts": 0, "error_records": 0, "client_cpu_s": 0.0,
                                  "runner_other_cpu_s": 0.0, "output_tokens": 0, "counted_attempts": 0,
                                  "row_attempts": 0, "requests_sent": 0}
        for attempts in view.rows.values():
            totals["rows"] += any(r.valid for r in attempts)
            for row in attempts:
                totals["row_attempts"] += 1
                totals["requests_sent"] += row.requests_sent
                totals["error_records"] += len(row.errors)
                totals["void_attempts"] += 0 if row.valid else 1
                totals["client_cpu_s"] += sum(r["client_cpu_s"] for r in row.rep_rows)
                totals["runner_other_cpu_s"] += sum(r.get("runner_other_cpu_s") or 0.0 for r in row.rep_rows)
                # how output tokens were counted: the engine's usage or counter, or its tokenizer over the text
                sources = totals.setdefault("token_sources", {})
                for _tags, stats in row.stats:
                    sources[stats.token_source] = sources.get(stats.token_source, 0) + 1
                totals["output_tokens"] += sum(r["output_tokens"] for r in row.rep_rows)
                if not row.engine or any(_FOREIGN in reason for reason in row.reasons):
                    continue
                totals["counted_attempts"] += 1
                for key, value in row.engine.items():
                    if isinstance(value, dict):
                        into = totals.setdefault(key, {})
                        for sub, count in value.items():
                            into[sub] = into.get(sub, 0) + count
                    else:
                        totals[key] = totals.get(key, 0) + value
        return totals

    def _engine_metrics(self, result: GateResult) -> None:
        for role, totals in result.details["engine"].items():
            result.metrics[f"{role}.void_attempts"] = Metric(value=totals["void_attempts"], unit="row attempts",
                                                             denominator=totals["row_attempts"])
            result.metrics[f"{role}.error_records"] = Metric(value=totals["error_records"], unit="requests",
                                                             denominator=totals["requests_sent"])
            if totals["output_tokens"]:
                result.metrics[f"{role}.client_cpu_ms_per_1k_tokens"] = Metric(
                    value=round(1e6 * totals["client_cpu_s"] / totals["output_tokens"], 2), unit="ms per 1k tokens",
                    denominator=totals["output_tokens"],
                    note="the client's own thread CPU while measuring, every attempt (comparable with "
                         "benchmarks/client_capacity.py)")
                result.metrics[f"{role}.runner_other_cpu_ms_per_1k_tokens"] = Metric(
                    value=round(1e6 * totals["runner_other_cpu_s"] / totals["output_tokens"], 2),
                    unit="ms per 1k tokens", denominator=totals["output_tokens"],
                    note="the runner's other threads meanwhile (boot-log copying and redaction, heartbeat)")
            drafts, drafted, accepted = (totals.get(k) for k in ("spec_drafts", "spec_draft_tokens",
                                                                 "spec_accepted_tokens"))
            if drafted:
                result.metrics[f"{role}.spec_acceptance_rate"] = Metric(
                    value=round(accepted / drafted, 4), unit="accepted / drafted tokens", denominator=int(drafted))
            if drafts:
                result.metrics[f"{role}.spec_acceptance_length"] = Metric(
                    value=round(1 + accepted / drafts, 4), unit="tokens per verify step (incl. the target's)",
                    denominator=int(drafts))
                # the first positions say how deep drafts survive; an engine that drafts dozens of tokens
                # (llama.cpp's n-gram modes) keeps the rest in details.engine, not as dozens of metrics
                per_position = totals.get("spec_accepted_per_position") or {}
                for position in sorted(per_position, key=int)[:_POSITIONS_IN_METRICS]:
                    result.metrics[f"{role}.spec_accepted_at_position_{position}"] = Metric(
                        value=round(per_position[position] / drafts, 4), unit="accepted at this draft position / drafts",
                        denominator=int(drafts), note="the engine's own per-position counter (0 = first draft token)")
            if totals.get("prompt_tokens"):
                result.metrics[f"{role}.prefix_cache_hit_rate"] = Metric(
                    value=round(totals["cached_prompt_tokens"] / totals["prompt_tokens"], 4),
                    unit="cached / prompt tokens", denominator=int(totals["prompt_tokens"]))

    def bundle_tables(self) -> dict[str, list[dict[str, Any]]]:
        """throughput.csv: one row per lane visit x level x class x attempt x rep, void attempts kept."""
        table = []
        folder = self.ctx.bundle / "raw" / self.gate_id
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            view = self.view(path.stem)
            if view is None:
                continue
            for (level, cls), attempts in view.rows.items():
                for attempt, row in enumerate(attempts):
                    for rep in row.rep_rows:
                        table.append({"gate": self.gate_id, "lane": view.key, "level": level, "class": cls,
                                      "attempt": attempt, "row_status": row.status,
                                      "row_reasons": " | ".join(row.reasons),
                                      "row_spread": _round(row.spread), "row_median_aggregate_tok_s":
                                      _round(row.median_aggregate), **{k: _round(v) for k, v in rep.items()},
                                      "source": path.relative_to(self.ctx.bundle).as_posix()})
        return {"throughput.csv": table}


def _class_rows(values: dict[str, dict[str, float]], est: Estimate | None) -> list[dict[str, Any]]:
    """One row per prompt class (a latency tail is pooled per class): each boot's percentile and the class's
    own change."""
    rows = []
    for cls in sorted({cls for per_class in values.values() for cls in per_class}):
        row: dict[str, Any] = {"class": cls, **{role: per_class.get(cls) for role, per_class in values.items()}}
        if est is not None and cls in est.per_prompt:
            row["change"] = est.per_prompt[cls]
            row["win"] = row["change"] > 0
        rows.append(row)
    return rows


def _prompt_rows(prompts: list[Prompt], values: dict[str, dict[str, float]],
                 est: Estimate | None) -> list[dict[str, Any]]:
    """One row per prompt: each boot's value and, where the fit covers it, the prompt's own change."""
    rows = []
    for p in prompts:
        row: dict[str, Any] = {"prompt": p.id, "class": p.cls or "all",
                               **{role: per_prompt.get(p.id) for role, per_prompt in values.items()}}
        if est is not None and p.id in est.per_prompt:
            row["change"] = est.per_prompt[p.id]
            row["win"] = row["change"] > 0
        rows.append(row)
    return rows


def _why_fewer(seq: _Sequence, tag: str, views: Mapping[str, _LaneView]) -> str:
    """Why this level rests on fewer boots than the window booted, or the window on fewer pairs than it might
    have: boots not counted here, and row attempts a busy host voided (each re-run costs the window time).
    Other processes on the host lead: the cause a person acts on first, whatever the window's length; ""
    when nothing was lost."""
    boots = {role: texts for role, levels in seq.excluded.items() for level, texts in levels.items() if level == tag}
    texts = [text for found in boots.values() for text in found]
    words = []
    if texts:
        first = next((text for text in texts if BUSY_HOST in text), texts[0])
        words.append(f"{len(boots)} boot(s) not counted at {tag}: {first}")
    if not any(BUSY_HOST in text for text in words):
        busy = [reason for view in views.values() for attempts in view.rows.values() for row in attempts
                for reason in row.reasons if BUSY_HOST in reason]
        if busy:
            words.insert(0, f"{len(busy)} row attempt(s) went VOID: {busy[0]}")
    return "; ".join(words)


def _control_drift(boots: list[BootValues], *, higher: bool) -> dict[str, Any] | None:
    """Each counted control boot against the one before it: the mean per-prompt change over the prompts
    both measured. A steady drift is in the fit; a jump this large means the environment moved."""
    controls = sorted((b for b in boots if not b.candidate), key=lambda b: b.position)
    steps: dict[str, dict[str, Any]] = {}
    for before, after in itertools.pairwise(controls):
        common = [p for p in before.values if p in after.values and before.values[p] > 0 and after.values[p] > 0]
        if len(common) >= 2:
            ratios = [(after.values[p] / before.values[p]) if higher else (before.values[p] / after.values[p])
                      for p in common]
            steps[after.key] = {"from": before.key, "mean_change": statistics.fmean(ratios) - 1, "prompts": len(common)}
    if not steps:
        return None
    largest = max(steps.values(), key=lambda step: abs(step["mean_change"]))
    return {"steps": steps, "largest": largest["mean_change"], "prompts": largest["prompts"]}


def _look_row(row: dict[str, Any]) -> dict[str, Any]:
    est: Estimate | None = row["estimate"]
    decided: Look | None = row["look"]
    return {"pairs": row["pairs"], "verdict": decided.verdict if decided else None,
            **({"change": est.change, "ci": [est.low, est.high], "df": est.df} if est else {"change": None})}


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value
