"""The decision a person reads first: per candidate PROMOTABLE, REFUSED or INCONCLUSIVE, the one reason
that decides it, the figure it rests on, and what would change it (the cause to act on first). Decided
from SUMMARY.json only, with the rules `campaign promote` applies to the same file (a window that
completed, a proven restore, every required gate PASS); promote also verifies the signature and the freeze
record, which a report cannot do for its reader. The figure is the deciding gate's headlines, as its
result carries them (given with the gate results; without them a decision has no figure)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from campaign.errors import RunError
from campaign.presentation import deciding_reason, fit, headline, quantity
from campaign.verdicts import VERDICT_RULE, VERDICT_RULE_V1, combine_names

# ``headline`` is the presentation's, given here too: a refusal is a decision's words (promote's)
__all__ = ["PROMOTABLE", "CandidateDecision", "deciding", "decisions", "exit_code", "headline", "read_with_current_rule",
           "several_exit_code", "suspicion", "with_exit_zero"]

PROMOTABLE, REFUSED, INCONCLUSIVE = "PROMOTABLE", "REFUSED", "INCONCLUSIVE"


@dataclass
class CandidateDecision:
    candidate: str
    control: str | None
    decision: str
    gate: str | None  # the gate whose verdict decides it (None: a window-level reason)
    reason: str  # the deciding gate's headline (campaign.presentation.headline), or the window-level reason
    next_step: str
    also: list[str]  # gates reported but not required that did not PASS: shown, never deciding
    # the figure the decision rests on, e.g. "speed C1 +12.0% [97.5% CI +4.1%, +20.3%] decode_tok_s, 3 pairs, ...":
    # the deciding gate's headlines (decided by no gate: every required gate's); "" when none is carried
    figure: str = field(default="")
    # the window's A/A lane made a false decision (a verdict claiming a difference that cannot be there): every
    # decision of the window is suspect, and none is PROMOTABLE; "" when the check is clean or absent
    suspect: str = field(default="")
    # the deciding gate's full reasoning, its reasons as the result holds them: the report's folded details,
    # the console's --explain
    details: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def deciding(gate: str | None, reason: str, limit: int | None = None) -> str:
    """``gate: reason`` (a window-level reason alone), cut to ``limit`` characters of the reason with "...":
    one wording for the console's lines and `campaign status`."""
    if limit is not None and len(reason) > limit:
        reason = f"{reason[:limit]}..."
    return f"{gate}: {reason}" if gate else reason


def decisions(summary: dict[str, Any], gates: Iterable[dict[str, Any]] = ()) -> list[CandidateDecision]:
    """Each candidate's decision; ``gates``, the bundle's gate results with their presentation (as the report
    reads them), give each its figure."""
    figures: dict[tuple[str, str], list[str]] = {}
    for gate in gates:
        headlines = (gate.get("presentation") or {}).get("headlines") or []
        figures[(str(gate.get("candidate")), str(gate.get("gate")))] = [
            f"{gate.get('gate')} {h.get('label')} {quantity(h)}" for h in headlines if isinstance(h, dict)]
    out = []
    suspect = suspicion(summary)
    for name, entry in (summary.get("candidates") or {}).items():
        decided = _decide(name, entry, summary)
        if suspect and not entry.get("aa"):
            decided = _suspected(decided, suspect)
        # a window-level fact (no daily, no promotion rule, an unproven restore) leaves what was measured valid
        shown = [decided.gate] if decided.gate else list(entry.get("promotion_gates") or [])
        if summary.get("status") == "complete":
            decided.figure = "; ".join(text for gate in shown for text in figures.get((name, gate), []))
        out.append(decided)
    return out


def read_with_current_rule(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with each candidate's overall verdict combined by today's rule (``campaign.verdicts``) when it
    was judged by an earlier one, saying so: the earlier overall stays as ``overall_as_judged`` and the summary
    gets ``verdict_rule_note``. Gate verdicts are never changed (a reader cannot re-measure); only how they
    combine. A summary judged by today's rule comes back as it is."""
    judged_by = summary.get("verdict_rule") or VERDICT_RULE_V1
    if judged_by == VERDICT_RULE or not isinstance(summary.get("candidates"), dict):
        return summary
    changed = []
    for name, entry in summary["candidates"].items():
        if not isinstance(entry, dict) or summary.get("status") != "complete":
            continue
        gates: dict[str, Any] = entry["gates"] if isinstance(entry.get("gates"), dict) else {}
        required: list[Any] = entry["promotion_gates"] if isinstance(entry.get("promotion_gates"), list) else list(gates)
        now = combine_names(str(gates[g].get("verdict")) if isinstance(gates.get(g), dict) else "INCONCLUSIVE"
                            for g in required)
        if now != entry.get("overall"):
            entry["overall_as_judged"], entry["overall"] = entry.get("overall"), now
            changed.append(f"{name} {entry['overall_as_judged']} -> {now}")
    summary["verdict_rule_note"] = (
        f"judged by {judged_by}, read with {VERDICT_RULE} (a valid FAIL decides over an undecided gate)"
        + (f": {', '.join(changed)}" if changed else ": no overall verdict changes"))
    return summary


def suspicion(summary: dict[str, Any]) -> str:
    """The A/A check's false decisions in one sentence ("" when there is none, or no A/A lane)."""
    found = ((summary.get("aa_check") or {}).get("false_decisions")) or []
    return "; ".join(f"A/A lane {f.get('lane')} got {f.get('gate')} {f.get('verdict')}, claiming it {f.get('claims')}"
                     for f in found if isinstance(f, dict))


def _suspected(decided: CandidateDecision, suspect: str) -> CandidateDecision:
    decided.suspect = f"{suspect}: this window's decisions are suspect"
    if decided.decision != PROMOTABLE:
        return decided
    return CandidateDecision(
        decided.candidate, decided.control, INCONCLUSIVE, None, decided.suspect,
        "find what made the A/A differ (a busy host, the engine's own nondeterminism, a gate's instrument), then "
        "run the window again; a window whose A/A claims a difference promotes nothing", decided.also,
        suspect=decided.suspect)


def _decide(name: str, entry: dict[str, Any], summary: dict[str, Any]) -> CandidateDecision:
    gates = entry.get("gates") or {}
    required = list(entry.get("promotion_gates") or [])
    also = [f"{gate}: {result.get('verdict')}" for gate, result in gates.items()
            if gate not in required and result.get("verdict") != "PASS"]

    def made(decision: str, gate: str | None, reason: str, next_step: str) -> CandidateDecision:
        result = gates.get(gate) if gate else None
        return CandidateDecision(name, entry.get("control"), decision, gate, reason, next_step, also,
                                 details=[str(r) for r in (result or {}).get("reasons") or []])

    if summary.get("status") != "complete":
        return made(INCONCLUSIVE, None, f"the window did not complete (status {summary.get('status')})",
                    f"campaign resume {summary.get('window')}: finished gates are kept")
    if entry.get("aa"):
        false = [f for f in (summary.get("aa_check") or {}).get("false_decisions") or [] if f.get("lane") == name]
        return made(REFUSED, None, "an A/A lane (the control again) is never promoted: it is this window's "
                                   "false-decision check, " + ("and it made " + "; ".join(
                                       f"{f.get('gate')} {f.get('verdict')} (claiming it {f.get('claims')})"
                                       for f in false) if false else "and no verdict claimed a difference"),
                    "nothing to do: it checks the instruments" if not false else
                    "trust none of this window's decisions until the A/A is clean again")
    if screened := entry.get("screened_out"):  # decided offline: no lane booted, the daily never stopped
        failed = screened.get("verdict") == "FAIL"
        return made(REFUSED if failed else INCONCLUSIVE, screened.get("gate"),
                    fit(f"not worth a live window: {screened.get('reason')}"),
                    "change the candidate (its slot map or files) in a new contract version; no live window was spent"
                    if failed else "the screen could not measure (the reason says why): fix it, then run again")
    restore = summary.get("restore") or {}
    if not restore.get("incumbent"):
        return made(REFUSED, None, "the contract declares no incumbent: there is no daily to swap",
                    "declare the daily (incumbent) in a new contract version; this window measured only")
    if not restore.get("proved"):
        return made(REFUSED, None, f"the daily's restore was not proven ({restore.get('error') or 'no proof'})",
                    "check the daily now (campaign daily show); promote refuses a window without a proven restore")
    if not required or entry.get("promotion_rule") is False:
        return made(REFUSED, None, "the contract names no gates for promotion (promotion.requires)",
                    "name the gates that must pass in promotion.requires, freeze a new version, run again")
    for gate in required:
        result = gates.get(gate)
        if result is not None and result.get("verdict") == "FAIL":
            return made(REFUSED, gate, headline(result), f"not promotable as it is: it lost on {gate}")
    for gate in required:
        result = gates.get(gate)
        if result is None:
            return made(INCONCLUSIVE, gate, f"gate {gate} has no result for this candidate",
                        "run the window again; the journal says why the gate did not run")
        if result.get("verdict") != "PASS":
            return made(INCONCLUSIVE, gate, headline(result), _next_step(gate, deciding_reason(result), result))
    return made(PROMOTABLE, None, f"every required gate passed ({', '.join(required)})",
                f"campaign promote BUNDLE --candidate {name} (it verifies the bundle first)")


# A measurement's own words when other processes used the host's CPUs while it measured (a VOID row's reason)
_BUSY_HOST = re.compile(r"other processes used (\d+(?:\.\d+)?%) of the host's CPUs")


def _next_step(gate: str, reason: str, result: dict[str, Any]) -> str:
    """The cause to act on first, then the rest: a busy host (rows voided, boots not counted) comes before
    any advice on the window's length or size, which a quiet host may make needless."""
    busy = next((found for text in [reason, *map(str, result.get("reasons") or [])]
                 if (found := _BUSY_HOST.search(text))), None)
    remedy = _remedy(gate, reason)
    if busy is None:
        return remedy
    return f"other processes used {busy.group(1)} of the CPUs: run on a quiet host or pin lanes (cpus:); then {remedy}"


def _remedy(gate: str, reason: str) -> str:
    text = reason.lower()
    if "simulated continuations" in text:
        return ("more pairs would rarely decide at this noise: more prompts, a quieter host, or a bar the change "
                "could meet (the reason gives the change measured)")
    if "out of reach" in text:
        return "more prompts (the change varies too much from prompt to prompt for more boots to settle it) or a quieter host"
    if "launch failure" in text:
        return "fix the lane's launch (lanes/<lane>/launch_failure.txt says what the engine said), then run again"
    if text.startswith("instrument"):
        return "the instrument could not measure (the reason says what): fix that lane or engine setting, then run again"
    if "time budget" in text:
        return "a longer failsafe deadline, or fewer lanes in one window, so every boot pair fits"
    if "boot pair" in text or "quieter host" in text:
        return "more boot pairs (max_boot_pairs) or a quieter host; the reason gives the size it could detect"
    if "nothing to weigh" in text or "no divergence" in text:
        return "nothing differed to weigh: more or longer prompts, if the axis should change outputs"
    return f"more evidence for {gate} (more prompts or repeats) in a new contract version"


# `campaign run`'s exit code, so cron or a systemd unit can tell "promotable" from "refused" without
# reading a bundle (docs/failsafe.md, "Exit codes"; `campaign run --help`):
#
#    0    the window completed and a candidate is PROMOTABLE (what `campaign promote` would accept)
#    3    the window completed and no candidate is promotable (REFUSED or INCONCLUSIVE: the report says why)
#    1    the window failed: not completed (interrupted, a pre-flight refusal, a run error), not signed, or
#         the daily's restore not proven (errors.RunError's code)
#    2    bad input: a contract, freeze record, key or argument to fix (errors.InputError's code)
#    130  interrupted at the terminal (Ctrl-C)
#
# ``--exit-zero`` keeps the old behaviour: 0 whenever the window completed with its daily proven back, 1
# and 2 as above. Several
# contracts at once: 1 if any window failed, else 0 if any has a promotable candidate, else 3.
PROMOTABLE_CODE = 0
FAILED = RunError.exit_code
NOTHING_PROMOTABLE = 3


def exit_code(summary: dict[str, Any], *, signed: bool) -> int:
    """The code of one window from its SUMMARY, by the rules the report's decisions follow."""
    restore = summary.get("restore") or {}
    if not signed or summary.get("status") != "complete" or restore.get("proved") is False:
        return FAILED
    promotable = any(decision.decision == PROMOTABLE for decision in decisions(summary))
    return PROMOTABLE_CODE if promotable else NOTHING_PROMOTABLE


def several_exit_code(codes: list[int]) -> int:
    """Several windows' one code: any failed is a failure; else promotable if any window has a candidate."""
    if any(code not in (PROMOTABLE_CODE, NOTHING_PROMOTABLE) for code in codes):
        return FAILED
    return PROMOTABLE_CODE if PROMOTABLE_CODE in codes else NOTHING_PROMOTABLE


def with_exit_zero(code: int, exit_zero: bool) -> int:
    """``--exit-zero``: a completed window with its daily proven back is 0 whatever it decided (the behaviour
    before these codes)."""
    return PROMOTABLE_CODE if exit_zero and code == NOTHING_PROMOTABLE else code
