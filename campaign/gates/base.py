"""What a gate is: something that gathers raw records, and an offline judge that reads only raw records
and the frozen rule. Two shapes gather: a ``LiveGate`` collects from a running lane on each visit the
window boots for it; a ``Screen`` runs once per candidate before any lane boots, on files alone. The
window dispatches by which of the two a gate is. A gate never starts or stops a lane."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.gates.records import VisitKey, raw_path, read_records
from campaign.gates.result import GateResult, Verdict
from campaign.lanes.lanerun import LaneRun

__all__ = ["PAIRS_STOPPED", "Gate", "GateContext", "LiveGate", "Screen", "Visit", "live_gates", "screens"]


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

    def bundle_tables(self) -> dict[str, list[dict[str, Any]]]:
        """Tables derived from raw records, written into the bundle as CSV: file name -> rows.
        Rows of gates that name the same file are concatenated."""
        return {}


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
    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        """Send this gate's requests to a running lane; every response goes to ``sink`` as it arrives.
        Records of lanes visited earlier in the window are readable through ``self.ctx``."""


class Screen(Gate):
    """A gate that runs once per candidate before anything is stopped or booted, and never on a lane: a
    candidate it does not PASS is never booted."""

    @abstractmethod
    def screen(self, candidate: EffectiveLane, control: EffectiveLane, sink: JsonlAppender) -> dict[str, Any]:
        """Screen one candidate; its record goes to ``sink`` (the raw file) and is returned."""


def live_gates(gates: Sequence[Gate]) -> list[LiveGate]:
    return [gate for gate in gates if isinstance(gate, LiveGate)]


def screens(gates: Sequence[Gate]) -> list[Screen]:
    return [gate for gate in gates if isinstance(gate, Screen)]
