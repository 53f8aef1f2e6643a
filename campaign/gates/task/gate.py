"""task: a frozen task set, R repeats per task per lane, paired against control per task.

Per task: how many repeats each lane got right. Paired outcome: a loss when the candidate got fewer
repeats right than control, a win when more, a tie otherwise. The loss proportion's one-sided
Clopper-Pearson upper bound, over n = unique tasks (repeats are not independent tasks), must be below
the frozen margin.

Collection sends the requests; judging (offline, from the bundle) scores them: exact-answer tasks by
their match rule, HumanEval replies by running them against the problem's tests in the sandbox.

Instrument checks, before any number counts: every request answered (no HTTP errors, a finish
reason), every record scored against the frozen task it was sent for, a lane that is not answering
(all replies empty, or the same reply to every task) is no measurement, and a control that solved
nothing leaves no room for a loss, so the bound would say nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import ContractError
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext, LiveGate, Visit, each_plot, metric_headlines, register
from campaign.gates.common.replies import chat_reply
from campaign.gates.common.stats import clopper_pearson_upper
from campaign.gates.result import GateResult, Metric, Verdict
from campaign.gates.task.catalog import Score, Task, arithmetic_tasks, humaneval_tasks, score_reply, user_tasks
from campaign.gates.task.sandbox import SandboxLimits
from campaign.gates.task.spec import TaskRule, TaskSpec
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Bars, BarSeries, Bound, Plot, Presentation

__all__ = ["TaskGate"]


@register
class TaskGate(LiveGate):
    fail_claims = "worse than its control"
    spec: TaskSpec

    @classmethod
    def present(cls, rule: TaskRule | None, result: dict[str, Any]) -> Presentation:
        return Presentation(headlines=metric_headlines(result, ("losses", "loss_upper_bound")),
                            plots=each_plot([_outcome_plot], rule, result))

    def __init__(self, spec: TaskSpec, ctx: GateContext) -> None:
        super().__init__(spec, ctx)
        self.tasks = self._load_tasks()
        self._scores: dict[str, tuple[dict[tuple[str, int], Score], list[str]]] = {}

    def _load_tasks(self) -> list[Task]:
        tasks: list[Task] = []
        if self.spec.humaneval:
            tasks += humaneval_tasks(self.spec.humaneval)
        if self.spec.arithmetic:
            tasks += arithmetic_tasks(self.spec.arithmetic)
        if self.spec.input:
            path = self.ctx.input_paths.get(self.spec.input) or self.ctx.contract.resolve(
                self.ctx.contract.contract.inputs[self.spec.input].file)
            tasks += user_tasks(Path(path))
        seen: set[str] = set()
        for task in tasks:
            if task.id in seen:
                raise ContractError(f"gate {self.gate_id}: task id {task.id!r} appears twice across its sources",
                                    file=str(self.ctx.contract.path))
            seen.add(task.id)
        return tasks

    @property
    def limits(self) -> SandboxLimits:
        return SandboxLimits(timeout_s=self.spec.sandbox.timeout, memory_bytes=self.spec.sandbox.memory)

    def planned_requests(self, visit: Visit) -> int:
        return len(self.tasks) * self.spec.repeats  # every source's tasks, not only the input file's

    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        # repeat-major, like greedy: a task's repeats are separated by the other tasks
        for repeat in range(self.spec.repeats):
            for task in self.tasks:
                max_tokens = self.spec.code_max_tokens if task.kind == "humaneval" else self.spec.max_tokens
                body = self.scoring_request(run, {"model": run.adapter.served_model(run.lane),
                                                  "messages": task.messages, "temperature": self.spec.temperature,
                                                  "seed": self.spec.seed + repeat, "max_tokens": max_tokens})
                await run.client.post("/v1/chat/completions", body, sink=sink,
                                      tags={"task": task.id, "kind": task.kind, "repeat": repeat,
                                            "task_sha256": task.digest})

    def scores(self, lane: str) -> tuple[dict[tuple[str, int], Score], list[str]]:
        """(task id, repeat) -> score, and the problems that make this lane's records unusable.
        Cached: code runs once per lane even when the lane is the control of several candidates."""
        if lane in self._scores:
            return self._scores[lane]
        by_id = {task.id: task for task in self.tasks}
        scores: dict[tuple[str, int], Score] = {}
        problems: list[str] = []
        replies: list[str] = []
        for record in self.ctx.raw_records(self.gate_id, lane):
            tags = record.get("tags", {})
            tid, repeat = str(tags.get("task")), int(tags.get("repeat", -1))
            task = by_id.get(tid)
            where = f"{lane} task {tid} repeat {repeat}"
            if task is None or tags.get("task_sha256") != task.digest:
                problems.append(f"{where}: not a task of the frozen set (or its content differs)")
                continue
            if (tid, repeat) in scores:
                problems.append(f"{where}: recorded twice")
                continue
            text, problem = chat_reply(record, allow_empty=True)
            if problem:
                problems.append(f"{where}: {problem}")
                continue
            replies.append(text)
            scores[(tid, repeat)] = score_reply(task, text, self.limits)
        for task in self.tasks:
            missing = [r for r in range(self.spec.repeats) if (task.id, r) not in scores]
            if missing:
                problems.append(f"{lane} task {task.id}: no valid reply for repeats {missing}")
        if replies and not any(r.strip() for r in replies):
            problems.append(f"lane {lane} answered every task with an empty reply; it is not answering")
        elif len(self.tasks) >= 2 and len(replies) >= 2 and len(set(replies)) == 1:
            problems.append(f"lane {lane} gave the same reply to all {len(self.tasks)} tasks; "
                            "it is not answering them")
        self._scores[lane] = (scores, problems)
        return scores, problems

    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        n = len(self.tasks)
        result = self.new_result(candidate, control)
        tables, problems = {}, []
        for lane in (control.name, candidate.name):
            tables[lane], lane_problems = self.scores(lane)
            problems += lane_problems
        if problems:
            result.reasons = ["instrument: not every task got a valid reply, so losses cannot be counted",
                              *problems[:20]]
            return result
        cand, ctrl = tables[candidate.name], tables[control.name]
        rows, per_kind, counts = self._pair(ctrl, cand)
        losses, wins, ties, control_solved = (counts[k] for k in ("loss", "win", "tie", "control_solved"))
        upper = clopper_pearson_upper(losses, n, self.spec.rule.confidence)
        result.metrics = self._metrics(counts, upper, ctrl, cand)
        containment = sorted({str(s.sandbox.get("containment")) for s in [*cand.values(), *ctrl.values()]
                              if s.sandbox.get("containment")})
        result.details = {"tasks": rows, "by_kind": per_kind, "sandbox_containment": containment,
                          "request": {"temperature": self.spec.temperature, "seed": self.spec.seed,
                                      "seeds": [self.spec.seed + r for r in range(self.spec.repeats)]}}
        if control_solved == 0:
            result.reasons = [f"instrument: control solved none of the {n} tasks, so no loss was possible and "
                              "the bound says nothing about the candidate"]
            return result
        conf, margin = self.spec.rule.confidence, self.spec.rule.max_loss_upper
        ok = upper < margin
        result.verdict = result.weigh(Verdict.PASS if ok else Verdict.FAIL,
                                      f"losses {losses}/{n} tasks (wins {wins}, ties {ties}); one-sided {conf:g} "
                                      f"upper bound {upper:.6g} {'<' if ok else '>='} margin {margin:g}")
        if control_solved < n:
            result.caveats.append(f"control solved {control_solved}/{n} tasks; a loss was possible only on those")
        weak = [c for c in containment if "none" in c]
        if weak:
            result.caveats.append(f"sandbox ran with a missing fence on this machine: {weak[0]}")
        return result

    def _pair(self, ctrl: dict[tuple[str, int], Score], cand: dict[tuple[str, int], Score]
              ) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]], dict[str, int]]:
        """Per task, the paired outcome by correct repeats: rows, totals per task kind, and the counts
        of losses, wins, ties and tasks the control solved at least once."""
        repeats = self.spec.repeats
        rows: list[dict[str, Any]] = []
        counts = {"loss": 0, "win": 0, "tie": 0, "control_solved": 0}
        per_kind: dict[str, dict[str, int]] = {}
        for task in self.tasks:
            c_ok = sum(ctrl[(task.id, r)].correct for r in range(repeats))
            k_ok = sum(cand[(task.id, r)].correct for r in range(repeats))
            outcome = "loss" if k_ok < c_ok else "win" if k_ok > c_ok else "tie"
            counts[outcome] += 1
            counts["control_solved"] += c_ok > 0
            kind = per_kind.setdefault(task.kind, {"tasks": 0, "loss": 0, "win": 0, "tie": 0,
                                                   "control_correct": 0, "candidate_correct": 0})
            kind["tasks"] += 1
            kind[outcome] += 1
            kind["control_correct"] += c_ok
            kind["candidate_correct"] += k_ok
            rows.append({"task": task.id, "kind": task.kind, "outcome": outcome,
                         "control_correct": c_ok, "candidate_correct": k_ok, "repeats": repeats,
                         "control": [_score_row(ctrl[(task.id, r)]) for r in range(repeats)],
                         "candidate": [_score_row(cand[(task.id, r)]) for r in range(repeats)]})
        return rows, per_kind, counts

    def _metrics(self, counts: dict[str, int], upper: float, ctrl: dict[tuple[str, int], Score],
                 cand: dict[tuple[str, int], Score]) -> dict[str, Metric]:
        n, repeats, conf = len(self.tasks), self.spec.repeats, self.spec.rule.confidence
        return {
            "losses": Metric(value=counts["loss"], denominator=n, unit="tasks",
                             note="candidate got fewer repeats right than control"),
            "wins": Metric(value=counts["win"], denominator=n, unit="tasks"),
            "ties": Metric(value=counts["tie"], denominator=n, unit="tasks"),
            "loss_upper_bound": Metric(value=upper, denominator=n, unit="proportion of tasks",
                                       note=f"one-sided {conf:g} Clopper-Pearson upper bound on losses/{n}; "
                                            "n is unique tasks, not tasks x repeats"),
            "candidate_correct": Metric(value=sum(s.correct for s in cand.values()), denominator=n * repeats,
                                        unit="task repeats"),
            "control_correct": Metric(value=sum(s.correct for s in ctrl.values()), denominator=n * repeats,
                                      unit="task repeats"),
            "control_tasks_solved": Metric(value=counts["control_solved"], denominator=n, unit="tasks",
                                           note="tasks with at least one correct control repeat: "
                                                "the only tasks where a loss is possible"),
            "repeats": Metric(value=repeats, unit="repeats per task per lane"),
        }


def _score_row(score: Score) -> dict[str, Any]:
    row: dict[str, Any] = {"correct": score.correct, "reason": score.reason}
    if score.extracted is not None:
        row["extracted"] = score.extracted
    if score.sandbox:
        row["sandbox"] = {k: score.sandbox[k] for k in ("elapsed_s", "exit_code", "violations")}
    return row


def _outcome_plot(rule: TaskRule | None, result: dict[str, Any]) -> list[Plot]:
    kinds = result["details"]["by_kind"]
    names = list(kinds)
    outcomes = Bars(categories=names, horizontal=True, layout="stacked", xlabel="tasks", ylabel="kind",
                    series=[BarSeries(name=outcome, role=outcome, values=[float(kinds[n][outcome]) for n in names])
                            for outcome in ("win", "tie", "loss")])
    panels: list[Bars] = [outcomes]
    bound = (result.get("metrics") or {}).get("loss_upper_bound", {}).get("value")
    if isinstance(bound, (int, float)) and rule is not None:
        panels.append(Bars(categories=["loss rate"], horizontal=True, value_range=[0.0, 100.0],
                           series=[BarSeries(values=[100 * bound], role="loss")],
                           bounds=[Bound(value=100 * rule.max_loss_upper, label="margin (max_loss_upper)",
                                         kind="target")],
                           xlabel=f"upper {rule.confidence:.0%} Clopper-Pearson bound of the loss rate (%)"))
    return [Plot(title="Tasks: wins, ties and losses of the candidate against the control", panels=list(panels),
                 heights=[max(1, len(names)), 1] if len(panels) == 2 else None, height=1.4 + 0.35 * len(names))]
