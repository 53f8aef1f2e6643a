"""How verdicts combine: one rule for a gate's validly measured rules, a candidate's required gates, and a
reader rejudging an older bundle. Kept apart from the gates so the receipts layer applies the same rule.

Within a gate the instrument's self-checks come first: an instrument that failed makes the gate
INCONCLUSIVE before any rule is weighed (each gate's judge returns first), so every verdict combined here was
validly measured. Among those, one FAIL is a finding and decides; INCONCLUSIVE only when none failed and one
is undecided; PASS only when all passed."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["VERDICT_RULE", "VERDICT_RULE_V1", "combine_names"]

# Named in SUMMARY.json. v1 (bundles before this name was written): INCONCLUSIVE outranked FAIL, so one
# undecided gate hid a valid FAIL and a candidate with a measured loss read INCONCLUSIVE.
VERDICT_RULE = "campaign.verdicts/v2"
VERDICT_RULE_V1 = "campaign.verdicts/v1"


def combine_names(verdicts: Iterable[str]) -> str:
    """FAIL if any is FAIL; else INCONCLUSIVE if any is not PASS (VOID, INCONCLUSIVE, missing) or there is
    none; else PASS."""
    seen = list(verdicts)
    if "FAIL" in seen:
        return "FAIL"
    if not seen or any(v != "PASS" for v in seen):
        return "INCONCLUSIVE"
    return "PASS"
