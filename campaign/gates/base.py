"""What a gate is: something that gathers raw records, and an offline judge that reads only raw records
and the frozen rule. Two shapes gather: a ``LiveGate`` collects from a running lane on each visit the
window boots for it; a ``Screen`` runs once per candidate before any lane boots, on files alone. The
window dispatches by which of the two a gate is; a gate that is neither gathers nothing and judges what
other gates gathered. A gate never starts or stops a lane.

A gate also owns what a reader sees of it: its headline figures and the data of its plots
(``campaign.presentation``), built from its own judging, carried by its result, drawn by the report
without knowing its kind."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar, get_args, get_type_hints

from pydantic import BaseModel, ValidationError

from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.gates.records import VisitKey, raw_path, read_records
from campaign.gates.result import GateResult, Verdict
from campaign.kinds import add_kind
from campaign.lanes.lanerun import LaneRun
from campaign.presentation import Headline, Plot, Presentation

__all__ = ["PAIRS_STOPPED", "Gate", "GateContext", "LiveGate", "Screen", "Visit", "each_plot", "live_gates",
           "metric_headlines", "register", "screens"]


# The journal step by which a window says it booted no more pairs before every pairing gate was done, and
# why (its time budget): a gate left undecided says so in its reason.
PAIRS_STOPPED = "pairs.stopped"


@dataclass(frozen=True)
class Visit:
    """One boot of a lane in a window. Controls may be visited again after the candidates (index 1),
    so boot-to-boot drift is measured and gates can score candidates' outputs on the control."""

    lane: EffectiveLane
    index: int = 0

    @property
    def key(self) -> VisitKey:
        return VisitKey(self.lane.name, self.index)


@dataclass
class GateContext:
    bundle: Path
    contract: LoadedContract
    input_paths: dict[str, Path] = field(default_factory=dict)  # input name -> frozen copy in the bundle

    def raw_path(self, gate_id: str, visit: VisitKey | str) -> Path:
        return raw_path(self.bundle, gate_id, visit)

    def pairs_stopped(self) -> dict[str, Any] | None:
        """The window's record of stopping its boot pairs early (its time budget), if it did."""
        from campaign.fsutil import read_jsonl

        journal = self.bundle / "journal.jsonl"
        records = read_jsonl(journal) if journal.exists() else []
        return next((r for r in reversed(records) if r.get("step") == PAIRS_STOPPED), None)  # a resume's, if any

    def raw_records(self, gate_id: str, visit: VisitKey | str) -> list[dict[str, Any]]:
        """Records of one visit (a lane name's first boot, or ``VisitKey(lane, 1)`` for a control's second)."""
        return read_records(self.bundle, gate_id, visit)

    @property
    def request_defaults(self) -> dict[str, Any]:
        return dict(self.contract.contract.request_defaults)


class Gate(ABC):
    """What every gate has: its frozen spec, the window's context, and an offline judge."""

    def __init__(self, spec: Any, ctx: GateContext) -> None:
        self.spec, self.ctx = spec, ctx

    @property
    def gate_id(self) -> str:
        return self.spec.id or self.spec.kind

    @abstractmethod
    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        """Judge from raw records against the frozen rule."""

    def rule_dump(self) -> dict[str, Any]:
        return self.spec.rule.model_dump(mode="json", exclude_none=True)

    def new_result(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        """A judge's opening result: INCONCLUSIVE until a rule has weighed something, with the frozen rule."""
        return GateResult(gate=self.gate_id, kind=self.spec.kind, candidate=candidate.name, control=control.name,
                          verdict=Verdict.INCONCLUSIVE, rule=self.rule_dump())

    def presentation(self, result: GateResult) -> Presentation:
        """What the report shows of ``result``: built from this gate's own judging, with its typed rule."""
        return self.present(self.spec.rule, result.dump())

    # What a FAIL says about the candidate against its control, for a gate whose rule weighs the difference
    # (a not-worse gate); None where a FAIL weighs the candidate alone (an absolute count, a screen).
    fail_claims: str | None = None

    @classmethod
    def aa_claims(cls, rule: Any, result: dict[str, Any]) -> str | None:
        """The difference from its control that ``result`` (SUMMARY.json's entry: its verdict and metrics)
        claims, or None: on an A/A lane (the control again, where no difference can be) a claim is a false
        decision, the window's instrument check."""
        return cls.fail_claims if result.get("verdict") == "FAIL" else None

    @classmethod
    def present(cls, rule: Any, result: dict[str, Any]) -> Presentation:
        """Headlines and plots from a result as its file holds it and the rule it was judged by (its typed
        model, or None when a stored rule no longer reads as one: then no bound is drawn). A kind that
        shows more overrides it; by default a gate shows nothing beside its verdict."""
        return Presentation()

    @classmethod
    def headline_words(cls, rule: Any, result: dict[str, Any]) -> str | None:
        """The words after the verdict in ``result``'s headline (campaign.presentation.headline), where this kind says it
        better than its deciding reason does (speed: its reasons are paragraphs of statistics); None: the
        deciding reason, fitted."""
        return None

    @classmethod
    def stored_presentation(cls, result: dict[str, Any]) -> Presentation:
        """The presentation of a result file written before results carried one (an older bundle): the
        same builder, with the stored rule read back into this kind's rule model."""
        return cls.present(cls._stored_rule(result.get("rule")), result)

    @classmethod
    def _stored_rule(cls, raw: Any) -> BaseModel | None:
        try:
            rule_type = get_type_hints(cls)["spec"].model_fields["rule"].annotation
            return rule_type.model_validate(raw if isinstance(raw, dict) else {})
        except (KeyError, AttributeError, ValidationError):  # a rule of an older shape: drawn without its bounds
            return None

    def bundle_tables(self) -> dict[str, list[dict[str, Any]]]:
        """Tables derived from raw records, written into the bundle as CSV: file name -> rows.
        Rows of gates that name the same file are concatenated."""
        return {}


# Gate kinds to gate classes, filled by ``register`` as each gate module is imported. Read it as
# ``gates.registry.GATES``: that module imports every module of this package first, so it holds every kind.
GATES: dict[str, type[Gate]] = {}

G = TypeVar("G", bound=type[Gate])


def register(cls: G) -> G:
    """Beside a gate class: the class of the kind its spec names (``spec: XSpec``, whose ``kind`` is a one-word
    Literal). What the kind declares, it declares on the class (tests/unit/gates/test_declarations.py says what)."""
    spec = get_type_hints(cls).get("spec")
    kinds = get_args(spec.model_fields["kind"].annotation) if isinstance(spec, type) and issubclass(spec, BaseModel) \
        else ()
    if len(kinds) != 1:
        raise TypeError(f"{cls.__name__}: a registered gate annotates `spec` with its kind's spec (one kind)")
    add_kind(GATES, kinds[0], cls)
    return cls


class LiveGate(Gate):
    """A gate that collects from running lanes: every lane's first boot, and the visits it asks for."""

    # How many more boots of each control this gate needs after its candidates (0: none). The
    # window boots the most any gate asks for; visit <lane>@rerunN runs the gates asking for N or more.
    control_reruns: int = 0

    @property
    def max_boot_pairs(self) -> int:
        """Most candidate boots this gate may ask for, each followed by a control boot (1: none beyond
        the fixed visits). A gate that asks for more says after each pair whether it wants another."""
        return 1

    def wants_pair(self, candidate: EffectiveLane, control: EffectiveLane, pairs_done: int) -> bool:
        return False

    @abstractmethod
    def planned_requests(self, visit: Visit) -> int:
        """How many requests this gate sends on ``visit``, from its spec and the size of its input: what
        `campaign plan` shows and sizes its estimate by. Every kind says (``requests_per_row`` where it sends
        one per input row, times its repeats)."""

    def requests_per_row(self, repeats: int = 1) -> int:
        """One request per row of the spec's input set, ``repeats`` times."""
        return (self.input_rows(self.spec.input) if self.spec.input else 0) * repeats

    def input_rows(self, name: str) -> int:
        """Rows of an input set (its frozen copy in a window, the contract's file in a plan)."""
        from campaign.gates.common.inputs import read_jsonl_rows

        path = self.ctx.input_paths.get(name)
        return len(read_jsonl_rows(path)) if path is not None else 0

    def scoring_request(self, run: LaneRun, body: dict[str, Any]) -> dict[str, Any]:
        """The body of every request a gate scores, built one way for every kind: the contract's
        ``request_defaults`` under the gate's own fields, and over both the engine's uncached fields
        (``adapter.uncached_fields``), which a contract cannot take back. A reply built on another request's
        cached prompt ran other batch shapes through other kernels: on an H200 under ``--parallel 4`` that
        alone made 5 of 8 greedy repeats differ (docs/benchmarks.md, "On a GPU"). The speed gate's streams are not scored
        this way: they measure serving as users get it, cache and all (its cached share is reported)."""
        return {**self.ctx.request_defaults, **body, **run.adapter.uncached_fields()}

    @abstractmethod
    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        """Send this gate's requests to a running lane; every response goes to ``sink`` as it arrives.
        Records of lanes visited earlier in the window are readable through ``self.ctx``."""


class Screen(Gate):
    """A gate that runs once per candidate before anything is stopped or booted, and never on a lane: a
    candidate it does not PASS is never booted."""

    @abstractmethod
    def screen(self, candidate: EffectiveLane, control: EffectiveLane, sink: JsonlAppender) -> dict[str, Any]:
        """Screen one candidate; its record goes to ``sink`` (the raw file) and is returned."""


def metric_headlines(result: dict[str, Any], names: tuple[str, ...]) -> list[Headline]:
    """Headlines of the metrics a rule weighs, as the result holds them (those it holds)."""
    metrics = result.get("metrics") or {}
    return [Headline(label=name, value=metrics[name].get("value"), unit=str(metrics[name].get("unit") or ""),
                     denominator=metrics[name].get("denominator"))
            for name in names if isinstance(metrics.get(name), dict)]


# What a result of an older shape may lack: its plot is left out, never the report.
_MISSING = (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError, IndexError)


def each_plot(builders: list[Callable[[Any, dict[str, Any]], list[Plot]]], rule: Any,
              result: dict[str, Any]) -> list[Plot]:
    """Every builder's plots; a builder whose evidence the result does not hold (an older bundle, a gate
    that measured nothing) gives none."""
    plots: list[Plot] = []
    for build in builders:
        try:
            plots += build(rule, result)
        except _MISSING:
            continue
    return plots


def live_gates(gates: Sequence[Gate]) -> list[LiveGate]:
    return [gate for gate in gates if isinstance(gate, LiveGate)]


def screens(gates: Sequence[Gate]) -> list[Screen]:
    return [gate for gate in gates if isinstance(gate, Screen)]
