"""The runtime one-axis check: what actually ran must differ exactly as what was meant to run.

The contract check proved the intended launches differ only on the declared axis; here the launches
read back from the runtime (``/proc`` for processes, ``docker inspect`` for containers) are diffed the
same way, so a flag dropped by a wrapper or an env var the runtime injected shows up as a mismatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.contracts.args import axis_key, parse_args
from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import load_json_strict

__all__ = ["launch_keys", "runtime_axis_difference"]


def launch_keys(argv: list[str], env: dict[str, str], exe: str | None = None) -> dict[str, Any]:
    flat: dict[str, Any] = {"executable": exe or (argv[0] if argv else None)}
    for name, value in parse_args(argv[1:]):
        key = axis_key(name) if not name.startswith("#") else f"args.{name}"
        flat.setdefault(key, []).append(value)
    flat.update({f"env.{k}": v for k, v in env.items()})
    return flat


def _diff(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def runtime_axis_difference(bundle: Path, control: EffectiveLane, candidate: EffectiveLane,
                            declared: set[str]) -> str:
    """Empty when the read-back launches differ exactly as intended; otherwise what differs."""
    snapshots = {}
    for lane in (control, candidate):
        path = bundle / "lanes" / lane.name / "inspect.json"
        if not path.exists():
            return f"no inspect snapshot for lane {lane.name}"
        snapshots[lane.name] = load_json_strict(path)
    a, b = snapshots[control.name], snapshots[candidate.name]
    intended = _diff(launch_keys(a["launched_argv"], a["launched_env"]),
                     launch_keys(b["launched_argv"], b["launched_env"]))
    actual = _diff(launch_keys(a["argv"], a["env"]), launch_keys(b["argv"], b["env"]))
    if a.get("executable_sha256") != b.get("executable_sha256") and "executable" not in declared:
        actual.add("executable (binary sha256)")
    if actual == intended:
        return ""
    parts = []
    if extra := sorted(actual - intended):
        parts.append("ran with undeclared differences " + ", ".join(extra))
    if lost := sorted(intended - actual):
        parts.append("declared differences absent from what ran " + ", ".join(lost))
    return "; ".join(parts)
