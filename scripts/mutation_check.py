"""A small mutation check of the gates' verdict rules: each mutant breaks one rule in a scratch copy of the
package and runs the unit tests that judge it; a mutant the tests do not kill is a rule no test holds.

    .venv/bin/python scripts/mutation_check.py [--list]

Prints one line per mutant (killed or SURVIVED, with the seconds its tests took) and exits 1 if any survived.
Each mutant is written into the checkout's own file (an editable install imports nothing else) and the file's
bytes are put back in ``finally``, interrupted or not; run it on a clean tree. Unit tests only: a mutant costs
seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under campaign/
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("combine: a FAIL no longer decides", "verdicts.py", 'if "FAIL" in seen:\n        return "FAIL"',
           'if "FAIL" in seen:\n        return "INCONCLUSIVE"', ("tests/unit/test_verdicts.py",)),
    Mutant("combine: PASS with one undecided", "verdicts.py", 'any(v != "PASS" for v in seen)',
           'all(v != "PASS" for v in seen)', ("tests/unit/test_verdicts.py",)),
    Mutant("resolution: a loss beyond the rounding is undecided", "gates/common/resolution.py",
           "if value > floor:", "if value > 10 * floor + 100:", ("tests/unit/gates/common/test_resolution.py",)),
    Mutant("resolution: a bound below it judged as written", "gates/common/resolution.py",
           "if resolves is None or bound >= resolves[0]:", "if True:",
           ("tests/unit/gates/common/test_resolution.py",)),
    Mutant("greedy: FAIL at any sign-test p", "gates/greedy.py", "if p <= MARGIN_P:", "if p <= 1.0:",
           ("tests/unit/gates/test_greedy_judge.py",)),
    Mutant("greedy: the k/N rule always met", "gates/greedy.py", "if got >= need:", "if got >= 0:",
           ("tests/unit/gates/test_greedy_judge.py",)),
    Mutant("greedy: a cached reply may FAIL", "gates/greedy.py", "if result.verdict is Verdict.FAIL:\n                result.verdict = Verdict.INCONCLUSIVE",
           "if False:\n                result.verdict = Verdict.INCONCLUSIVE", ("tests/unit/gates/test_greedy_judge.py",)),
    Mutant("structured: every count rule met", "gates/structured.py", "ok = got >= need", "ok = True",
           ("tests/unit/gates/test_structured_judge.py",)),
    Mutant("tools: every episode rule met", "gates/tools.py", "ok = passed >= need", "ok = True",
           ("tests/unit/gates/test_quality_judges.py",)),
    Mutant("needle: the reach always met", "gates/needle/gate.py", "ok = cand_high >= reach", "ok = True",
           ("tests/unit/gates/needle/test_needle_judge.py",)),
    Mutant("task: the loss bound always under the margin", "gates/task/gate.py", "ok = upper < margin", "ok = True",
           ("tests/unit/gates/task/test_task_judge.py",)),
    Mutant("speed: PASS without the CI above its bar", "gates/speed/sequential.py",
           "if est.change >= min_mean_change and est.low > ci_lower_above:",
           "if est.change >= min_mean_change:", ("tests/unit/gates/speed",)),
    Mutant("speed: no FAIL on a CI below the bar", "gates/speed/sequential.py",
           "if est.high < min_mean_change:", "if False:", ("tests/unit/gates/speed",)),
)


def run(mutant: Mutant) -> tuple[bool, float]:
    """(killed, seconds): the mutant written into its file, its tests run, the file put back."""
    target = ROOT / "campaign" / mutant.path
    original = target.read_bytes()
    text = original.decode()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutation_check: {mutant.name}: the line to mutate is not in {mutant.path} once; "
                         "update MUTANTS")
    started = time.monotonic()
    try:
        target.write_text(text.replace(mutant.old, mutant.new))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               "--deselect", "tests/unit/gates/speed/test_speed_hostwait.py", *mutant.tests],
                              cwd=ROOT, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True,
                              text=True, check=False)
    finally:
        target.write_bytes(original)
    return done.returncode != 0, time.monotonic() - started


def main() -> int:
    if "--list" in sys.argv:
        for mutant in MUTANTS:
            print(f"{mutant.name}: campaign/{mutant.path}")
        return 0
    survived = 0
    for mutant in MUTANTS:
        killed, seconds = run(mutant)
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.1f}s  {mutant.name} (campaign/{mutant.path})",
              flush=True)
    print(f"{len(MUTANTS) - survived}/{len(MUTANTS)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
