"""What a gate is: a live part that collects raw records from one lane, and an offline judge that
reads only raw records and the frozen rule. A gate never starts or stops a lane."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender, read_jsonl
from campaign.gates.result import GateResult
from campaign.lanes.session import LaneRun

__all__ = ["Gate", "GateContext", "Visit", "gate_for"]


@dataclass(frozen=True)
class Visit:
    """One boot of a lane in a window. Controls may be visited again after the candidates (index 1),
    so boot-to-boot drift is measured and gates can score candidates' outputs on the control."""

    lane: EffectiveLane
    index: int = 0

    @property
    def key(self) -> str:
        return self.lane.name if self.index == 0 else f"{self.lane.name}.rerun{self.index}"


@dataclass
class GateContext:
    bundle: Path
    contract: LoadedContract
    input_paths: dict[str, Path] = field(default_factory=dict)  # input name -> frozen copy in the bundle

    def raw_path(self, gate_id: str, visit_key: str) -> Path:
        return self.bundle / "raw" / gate_id / f"{visit_key}.jsonl"

    def raw_records(self, gate_id: str, visit_key: str) -> list[dict[str, Any]]:
        """Records of one visit (a lane name, or ``<lane>.rerun1`` for a control's second boot)."""
        path = self.raw_path(gate_id, visit_key)
        return read_jsonl(path) if path.exists() else []

    @property
    def request_defaults(self) -> dict[str, Any]:
        return dict(self.contract.contract.request_defaults)


class Gate(ABC):
    # How many more boots of each control this gate needs after its candidates (0: none). The
    # window boots the most any gate asks for; visit <lane>.rerunN runs the gates asking for N or more.
    control_reruns: int = 0

    def __init__(self, spec: Any, ctx: GateContext) -> None:
        self.spec, self.ctx = spec, ctx

    @property
    def gate_id(self) -> str:
        return self.spec.id or self.spec.kind

    @abstractmethod
    async def collect(self, run: LaneRun, sink: JsonlAppender, visit: Visit) -> None:
        """Send this gate's requests to a running lane; every response goes to ``sink`` as it arrives.
        Records of lanes visited earlier in the window are readable through ``self.ctx``."""

    @abstractmethod
    def judge(self, candidate: EffectiveLane, control: EffectiveLane) -> GateResult:
        """Judge from raw records against the frozen rule."""

    def rule_dump(self) -> dict[str, Any]:
        return self.spec.rule.model_dump(mode="json", exclude_none=True)

    def bundle_tables(self) -> dict[str, list[dict[str, Any]]]:
        """Tables derived from raw records, written into the bundle as CSV: file name -> rows.
        Rows of gates that name the same file are concatenated."""
        return {}


def gate_for(spec: Any, ctx: GateContext) -> Gate:
    from campaign.gates.greedy import GreedyGate
    from campaign.gates.kl import KlGate
    from campaign.gates.needle import NeedleGate
    from campaign.gates.ruler import RulerGate
    from campaign.gates.speed import SpeedGate
    from campaign.gates.structured import StructuredGate
    from campaign.gates.task import TaskGate
    from campaign.gates.teacher_forced import TeacherForcedGate
    from campaign.gates.tools import ToolsGate

    kinds: dict[str, type[Gate]] = {"greedy": GreedyGate, "task": TaskGate, "needle": NeedleGate,
                                    "teacher_forced": TeacherForcedGate, "kl": KlGate,
                                    "structured": StructuredGate, "tools": ToolsGate, "ruler": RulerGate,
                                    "speed": SpeedGate}
    return kinds[spec.kind](spec, ctx)
