"""speed: throughput and latency per concurrency level and prompt class, paired against control.

Live (``collect``, see speedrun.py): warm every batch shape, measure rows in reps, void and re-run.
Offline (``judge``): from raw records only. Per level, each prompt's value (median over its requests
in the row's valid attempt) on the candidate is paired with the control's baseline: the mean over the
control's boots in this window (its first run and its re-runs after the candidates; bracketing cancels
a steady drift). The mean per-prompt change gets a paired bootstrap CI over prompts, widened by the
boot-to-boot noise the control's boots showed: every prompt of one boot shares that boot's luck, so a
CI over prompts alone once called an identical lane +8% faster. The bar is frozen (e.g. mean >= +5%,
CI low > 0); drift between the control's boots past the frozen limit makes the comparison
INCONCLUSIVE.

The instrument checks itself before its numbers count: every judged row needs a valid attempt (no
VOID left after re-runs: spread, cut streams, other clients on the port, other tenants on the host),
the client must not be what limits the rate (its CPU share per rep), a lane that gives every prompt
the same reply is not answering them, and the control's boot noise must have been measured (two
boots at least).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any


from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.gatespecs import SpeedSpec
from campaign.contracts.model import parse_fraction
from campaign.errors import PreflightError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import Gate, Visit
from campaign.gates.records import VisitKey
from campaign.gates.common.inputs import Prompt, load_prompts
from campaign.gates.common.stats import BootNoise, boot_noise, paired_bootstrap_ci
from campaign.gates.result import GateResult, Metric, Verdict, worst
from campaign.gates.speed.rows import RowResult, evaluate_row, facts_from, group_attempts
from campaign.gates.speed.run import SpeedMeasurement, by_class, rep_order
from campaign.gates.common.streams import StreamStats
from campaign.lanes.session import LaneRun

__all__ = ["MAX_CLIENT_CPU_SHARE", "SpeedGate"]

# The client's CPU time over a rep's wall time. benchmarks/client_capacity.py puts this client's
# ceiling far above what it is asked here; a rep where it was this busy may have been client-bound.
MAX_CLIENT_CPU_SHARE = 0.8
_UNITS = {"decode_tok_s": "tok/s", "effective_tok_s": "tok/s", "ttft_s": "s"}
_FOREIGN = "another client on the port"
_POSITIONS_IN_METRICS = 8  # in a row's reasons: its engine counters include other traffic


def _paired_bootstrap_ci(control: list[float], candidate: list[float], *, confidence: float, resamples: int,
                         seed: int, higher_is_better: bool = True) -> tuple[float, float, float]:
    """Mean per-pair relative change (positive = better) and its CI, from the shared statistics. For a
    number where lower is better (TTFT) the pairs are swapped, so a positive change still means faster."""
    first, second = (control, candidate) if higher_is_better else (candidate, control)
    ci = paired_bootstrap_ci(first, second, relative=True, confidence=confidence, resamples=resamples, seed=seed)
    return ci.mean, ci.low, ci.high


@dataclass
class _LaneView:
    key: str  # visit key: the lane name, or <lane>@rerun1
    rows: dict[tuple[int, str], list[RowResult]]

    def chosen(self, row: tuple[int, str]) -> RowResult | None:
        return next((r for r in self.rows.get(row, []) if r.valid), None)


class SpeedGate(Gate):
    spec: SpeedSpec

    @property
    def control_reruns(self) -> int:  # type: ignore[override]
        return self.spec.control_boots - 1

    def prompts(self) -> list[Prompt]:
        return load_prompts(self.ctx.input_paths[self.spec.input])

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        warm_path = self.ctx.bundle / "raw" / self.gate_id / "warmup" / f"{visit.key}.jsonl"
        with JsonlAppender(warm_path) as warm_sink:
            await SpeedMeasurement(self.spec, self.prompts(), client=run.client, adapter=run.adapter,
                                   model=run.adapter.served_model(run.lane), sink=sink, warm_sink=warm_sink,
                                   request_defaults=self.ctx.request_defaults,
                                   lane_cpu=getattr(run.running, "cpu_seconds", None)).run()

    # ---- offline ----

    def _summarizer(self, visit_key: str):  # noqa: ANN202 - adapter.metric_summary or None
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
        rows: dict[tuple[int, str], list[RowResult]] = {}
        for key, attempts in group_attempts(records).items():
            per_rep = len(rep_order(classes.get(key[1], []), key[0]))
            rows[key] = [evaluate_row(a, per_rep=per_rep, reps=self.spec.reps, max_tokens=self.spec.max_tokens,
                                      facts=facts, rule=self.spec.rule, summarize=summarize) for a in attempts]
        return _LaneView(key=visit_key, rows=rows)

    def _value(self, stats: StreamStats) -> float | None:
        return getattr(stats, self.spec.rule.metric)

    def per_prompt(self, view: _LaneView, level: int) -> dict[str, float]:
        values: dict[str, list[float]] = {}
        for cls in by_class(self.prompts()):
            chosen = view.chosen((level, cls))
            for tags, stats in chosen.stats if chosen else []:
                value = self._value(stats)
                if value is not None and value > 0:
                    values.setdefault(str(tags.get("prompt")), []).append(value)
        return {pid: statistics.median(v) for pid, v in values.items()}

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        rule, spec = self.spec.rule, self.spec
        result = self.new_result(candidate, control)
        prompts = self.prompts()
        classes = by_class(prompts)
        views = {"control": self.view(control.name), "candidate": self.view(candidate.name)}
        for index in range(1, spec.control_boots):
            views[f"control_rerun{index}"] = self.view(str(Visit(control, index).key))
        problems: list[str] = []
        for role, view in views.items():
            if view is None:
                if not role.startswith("control_rerun"):
                    problems.append(f"{role} lane has no speed records")
                continue
            judged, reported = self._instrument_problems(role, view, classes)
            problems += judged
            result.caveats += [f"not judged: {text}" for text in reported]
        missing = [str(Visit(control, i).key) for i in range(1, spec.control_boots) if views[f"control_rerun{i}"] is None]
        if missing:
            result.caveats.append(f"control boots without speed records: {', '.join(missing)} "
                                  f"({spec.control_boots} planned)")
        unchecked = sorted({role for role, view in views.items() if view for attempts in view.rows.values()
                            for row in attempts for rep in row.rep_rows if rep["host_other_share"] is None})
        if unchecked and rule.max_host_busy is not None:
            result.caveats.append(f"other load on the host was not measured for {', '.join(unchecked)} "
                                  "(not a local process lane): other tenants cannot be ruled out")
        result.details["rows"] = self._row_details(views)
        result.details["engine"] = {role: self._engine_totals(view) for role, view in views.items() if view}
        self._engine_metrics(result)
        levels = self._levels(result, views, prompts, problems)
        result.details["levels"] = levels
        if problems:
            result.reasons = ["instrument: the speed numbers cannot be judged", *problems[:20]]
            return result
        verdicts = [Verdict(levels[str(level)]["verdict"]) for level in (rule.levels or spec.concurrency)]
        for level in rule.levels or spec.concurrency:
            result.reasons.append(levels[str(level)]["reason"])
        result.verdict = worst(verdicts)  # never empty: concurrency has at least one level
        return result

    def _instrument_problems(self, role: str, view: _LaneView,
                             classes: dict[str, list[Prompt]]) -> tuple[list[str], list[str]]:
        """Problems on judged levels (they make the gate INCONCLUSIVE) and on reported-only levels."""
        problems, reported = [], []
        first_texts: dict[str, str] = {}
        judged = set(self.spec.rule.levels or self.spec.concurrency)
        for level in self.spec.concurrency:
            into = problems if level in judged else reported
            for cls in classes:
                attempts = view.rows.get((level, cls), [])
                chosen = view.chosen((level, cls))
                if chosen is None:
                    last = attempts[-1].reasons[0] if attempts and attempts[-1].reasons else "never measured"
                    into.append(f"{role} ({view.key}) row C{level}/{cls} stayed VOID after {len(attempts)} "
                                f"attempt(s): {last}")
                    continue
                for rep in chosen.rep_rows:
                    share = rep["client_cpu_share"]
                    if share is not None and share > MAX_CLIENT_CPU_SHARE:
                        into.append(f"{role} row C{level}/{cls} rep {rep['rep']}: the client used "
                                    f"{share:.0%} of a core; it may have limited the rate")
                for tags, stats in chosen.stats:
                    first_texts.setdefault(str(tags.get("prompt")), stats.text)
        if len(first_texts) >= 2 and len(set(first_texts.values())) == 1:
            problems.append(f"{role} ({view.key}) gave the same reply to all {len(first_texts)} prompts; "
                            "it is not answering them")
        return problems, reported

    def _levels(self, result: GateResult, views: dict[str, _LaneView | None], prompts: list[Prompt],
                problems: list[str]) -> dict[str, Any]:
        ci = {"confidence": self.spec.rule.confidence, "resamples": self.spec.resamples, "seed": self.spec.seed,
              "higher_is_better": self.spec.rule.metric != "ttft_s"}
        return {str(level): self._level(result, views, prompts, problems, level, ci) for level in self.spec.concurrency}

    def _level(self, result: GateResult, views: dict[str, _LaneView | None], prompts: list[Prompt],
               problems: list[str], level: int, ci: dict[str, Any]) -> dict[str, Any]:
        """One concurrency level: per-prompt values paired against the control's baseline, then weighed
        when there is a pair to weigh and the boot noise was measured."""
        rule = self.spec.rule
        tag = f"C{level}"
        entry: dict[str, Any] = {"judged": level in (rule.levels or self.spec.concurrency)}
        values = {role: self.per_prompt(view, level) if view else {} for role, view in views.items()}
        boots = {role: values[role] for role, view in views.items()
                 if role.startswith("control") and view is not None and values[role]}
        cand = values["candidate"]
        # prompts every measured control boot has, so each boot's mean covers the same prompts
        common = [p.id for p in prompts if boots and all(p.id in b for b in boots.values())]
        baseline = {p: statistics.fmean(b[p] for b in boots.values()) for p in common}
        noise = self._boot_noise(result, entry, tag, views, boots, common, baseline, ci, problems)
        pairs = [p for p in common if p in cand]
        unpaired = [p.id for p in prompts if p.id not in pairs]
        rows = _prompt_rows(prompts, views, values, baseline, pairs, higher=ci["higher_is_better"])
        entry["prompts"] = rows
        self._lane_level_metrics(result, views, level, values, _UNITS[rule.metric])
        if unpaired and pairs and entry["judged"]:
            result.caveats.append(f"{tag}: prompts without a {rule.metric} on both lanes and every control "
                                  f"boot: {unpaired}")
        if len(pairs) < 2 or noise is None:
            if entry["judged"] and len(pairs) < 2:
                problems.append(f"{tag}: {len(pairs)} prompt(s) measured on both lanes; a paired CI needs 2+")
            return entry
        self._weigh_level(result, entry, tag, [baseline[p] for p in pairs], [cand[p] for p in pairs], rows,
                          noise, len(boots), ci)
        return entry

    def _weigh_level(self, result: GateResult, entry: dict[str, Any], tag: str, baseline: list[float],
                     candidate: list[float], rows: list[dict[str, Any]], noise: BootNoise, boots: int,
                     ci: dict[str, Any]) -> None:
        """The level's paired CI, widened by the control's boot noise, against the frozen bar."""
        rule = self.spec.rule
        pairs = len(candidate)
        mean, prompt_low, prompt_high = _paired_bootstrap_ci(baseline, candidate, **ci)
        low = mean - math.hypot(mean - prompt_low, noise.half_width)
        high = mean + math.hypot(prompt_high - mean, noise.half_width)
        wins = sum(1 for r in rows if r.get("win"))
        entry.update(mean_change=mean, ci=[low, high], prompt_ci=[prompt_low, prompt_high], wins=wins, pairs=pairs)
        self._change_metrics(result, tag, mean, (low, high), (prompt_low, prompt_high), wins, pairs, boots)
        checks = [mean >= rule.min_mean_change, low > rule.ci_lower_above]
        text = (f"{tag} {rule.metric}: {mean:+.2%} [{rule.confidence:.0%} CI {low:+.2%}, {high:+.2%}; "
                f"over prompts alone {prompt_low:+.2%}, {prompt_high:+.2%}; boot noise +/-"
                f"{noise.half_width:.2%} from {noise.boots} control boots], wins {wins}/{pairs}; "
                f"bar: mean >= {rule.min_mean_change:+.0%} and CI low > {rule.ci_lower_above:+.0%}")
        if rule.min_wins:
            need, of = parse_fraction(rule.min_wins)
            checks.append(of == pairs and wins >= need)
            text += f" and wins >= {need}/{of}" + ("" if of == pairs else f" (rule is over {of} prompts)")
        entry["verdict"] = "PASS" if all(checks) else "FAIL"
        entry["reason"] = f"{text}: {'met' if all(checks) else 'not met'}"
        if entry["verdict"] == "FAIL" and mean >= rule.min_mean_change and prompt_low > rule.ci_lower_above:
            entry["reason"] += (" (the change clears the bar over prompts but not the control's boot-to-boot "
                                "noise: raise control_boots, or quiet the box, to resolve it)")

    def _change_metrics(self, result: GateResult, tag: str, mean: float, ci: tuple[float, float],
                        prompt_ci: tuple[float, float], wins: int, pairs: int, boots: int) -> None:
        rule, spec = self.spec.rule, self.spec
        result.metrics[f"{tag}.mean_change"] = Metric(
            value=round(mean, 5), unit=f"fraction ({rule.metric} candidate vs control, mean per prompt)",
            denominator=pairs, note=f"positive = faster; control = mean of {boots} boots")
        result.metrics[f"{tag}.ci_low"] = Metric(
            value=round(ci[0], 5), unit="fraction", denominator=pairs,
            note=f"{rule.confidence:.0%}: paired bootstrap over prompts ({spec.resamples} resamples) "
                 f"and the control's boot-to-boot noise ({boots} boots), in quadrature")
        result.metrics[f"{tag}.ci_high"] = Metric(value=round(ci[1], 5), unit="fraction", denominator=pairs)
        result.metrics[f"{tag}.prompt_ci_low"] = Metric(
            value=round(prompt_ci[0], 5), unit="fraction", denominator=pairs,
            note="over prompts only: blind to what one boot's prompts share")
        result.metrics[f"{tag}.prompt_ci_high"] = Metric(value=round(prompt_ci[1], 5), unit="fraction",
                                                         denominator=pairs)
        result.metrics[f"{tag}.wins"] = Metric(value=wins, unit="prompts", denominator=pairs,
                                               note="prompts where the candidate is faster")

    def _boot_noise(self, result: GateResult, entry: dict[str, Any], tag: str, views: dict[str, _LaneView | None],
                    boots: dict[str, dict[str, float]], common: list[str], baseline: dict[str, float],
                    ci: dict[str, Any], problems: list[str]) -> BootNoise | None:
        """Each control boot's drift from the first, and the spread of the boots: the noise a second
        boot of an identical server would show. None (and a problem on a judged level) if unmeasured."""
        rule = self.spec.rule
        higher = ci["higher_is_better"]
        first = boots.get("control")
        drifts = {}
        for role, values in boots.items():
            if role == "control" or first is None or len(common) < 2:
                continue
            drift, low, high = _paired_bootstrap_ci([first[p] for p in common], [values[p] for p in common], **ci)
            drifts[views[role].key] = {"mean_change": drift, "ci": [low, high], "prompts": len(common)}
        if drifts:
            largest = max(drifts.values(), key=lambda d: abs(d["mean_change"]))["mean_change"]
            entry["control_drift"] = drifts
            result.metrics[f"{tag}.control_drift"] = Metric(
                value=round(largest, 5), unit="fraction (a control re-run vs its first run, mean per prompt)",
                denominator=len(common), note=f"the largest of {len(drifts)} re-run(s)")
            if rule.max_control_drift is not None and abs(largest) > rule.max_control_drift and entry["judged"]:
                problems.append(f"{tag}: the control drifted {largest:+.1%} between its boots in this window "
                                f"(limit {rule.max_control_drift:.0%}): the environment moved")
        if len(boots) < 2 or len(common) < 2:
            if entry["judged"]:
                problems.append(f"{tag}: {len(boots)} control boot(s) measured on 2+ common prompts; the boot-"
                                "to-boot noise a second boot of the same server shows is unmeasured")
            return None
        effects = [statistics.fmean((v[p] / baseline[p] if higher else baseline[p] / v[p]) - 1 for p in common)
                   for v in boots.values()]
        noise = boot_noise(effects, confidence=rule.confidence)
        entry["boot_noise"] = {**noise.as_dict(), "effects": dict(zip([views[r].key for r in boots], effects))}
        result.metrics[f"{tag}.boot_noise"] = Metric(
            value=round(noise.half_width, 5), unit="fraction (prediction half-width for one more boot)",
            denominator=noise.boots, note=f"SD of the control's boots {noise.sd:.2%}; t with {noise.boots - 1} df")
        return noise

    def _lane_level_metrics(self, result: GateResult, views: dict[str, _LaneView | None], level: int,
                            values: dict[str, dict[str, float]], unit: str) -> None:
        classes = by_class(self.prompts())
        for role, view in views.items():
            if view is None:
                continue
            tag = f"C{level}.{role}"
            per_prompt = list(values[role].values())
            if per_prompt:
                result.metrics[f"{tag}.{self.spec.rule.metric}"] = Metric(
                    value=round(statistics.median(per_prompt), 4), unit=unit, denominator=len(per_prompt),
                    note=f"median over prompts of each prompt's median request ({view.key})")
            chosen = [view.chosen((level, cls)) for cls in classes]
            aggregates = [r.median_aggregate for r in chosen if r and r.median_aggregate is not None]
            if len(aggregates) == len(classes):
                aggregate = statistics.fmean(aggregates)
                result.metrics[f"{tag}.aggregate_tok_s"] = Metric(
                    value=round(aggregate, 2), unit="tok/s (all users; median over reps, mean over classes)",
                    denominator=len(classes))
                result.metrics[f"{tag}.per_user_tok_s"] = Metric(
                    value=round(aggregate / level, 2), unit="tok/s per user", denominator=level)
            ttfts = [s.ttft_s for r in chosen if r for _, s in r.stats]
            if ttfts:
                result.metrics[f"{tag}.ttft_s"] = Metric(value=round(statistics.median(ttfts), 4), unit="s",
                                                         denominator=len(ttfts), note="median over requests")

    def _row_details(self, views: dict[str, _LaneView | None]) -> list[dict[str, Any]]:
        rows = []
        for role, view in views.items():
            for (level, cls), attempts in (view.rows.items() if view else []):
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


def _prompt_rows(prompts: list[Prompt], views: dict[str, _LaneView | None], values: dict[str, dict[str, float]],
                 baseline: dict[str, float], pairs: list[str], *, higher: bool) -> list[dict[str, Any]]:
    """One row per prompt: each lane's value, the control's baseline and, where paired, the change."""
    ctrl, cand = values["control"], values["candidate"]
    rows = [{"prompt": p.id, "class": p.cls or "all", "control": ctrl.get(p.id), "candidate": cand.get(p.id),
             **{role: values[role].get(p.id) for role in views if role.startswith("control_rerun")},
             "baseline": baseline.get(p.id)} for p in prompts]
    for row in rows:
        if row["prompt"] in pairs:
            base, new = baseline[row["prompt"]], cand[row["prompt"]]
            row["change"] = new / base - 1 if higher else base / new - 1
            row["win"] = row["change"] > 0
    return rows


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value
