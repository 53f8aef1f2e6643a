"""Hypothesis profiles for the fuzz tests, picked by CAMPAIGN_FUZZ_PROFILE:

- ``ci`` (the default, what ``make test`` runs): a small fixed budget of examples per test, derandomized (the
  same examples on every run, so a failure in CI is a failure on the laptop), no example database. The whole
  of tests/fuzz stays under about a minute on two cores.
- ``long`` (``make fuzz``): thousands of random examples per test; failures are kept in an example database
  outside the clone (``$CAMPAIGN_CACHE/hypothesis/examples``) and replayed first on the next run.

Both print the reproduce blob of a failing example (``print_blob``): paste the printed
``@reproduce_failure(...)`` line above the test to replay it. ``CAMPAIGN_FUZZ_EXAMPLES=N`` overrides the
example count of either profile; pytest's ``--hypothesis-seed=N`` gives the long profile a fixed seed
(``make fuzz FUZZ_ARGS=--hypothesis-seed=N``).

Time and memory: every example's call under test runs in a forked child (``harness.run_bounded``), killed
after 5 s of wall time (a hang is a failure, found, not waited for) and refused memory past 200 MB above what
the parent had (RLIMIT_AS: the allocation fails, a MemoryError the property reports). Hypothesis's own
``deadline`` is only a backstop for the whole example (set-up of files and bundles, the fork, the checks):
15 s, so a busy CI machine does not make a slow set-up a flaky failure; the 5 s that matter are the call's.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

# Hypothesis keeps caches (and the long profile's failures) here, outside the clone, not in ./.hypothesis
HOME = Path(os.environ.get("CAMPAIGN_CACHE", Path.home() / ".cache/campaign")) / "hypothesis"
set_hypothesis_home_dir(HOME)

_SLOW_BY_DESIGN = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
                   HealthCheck.large_base_example, HealthCheck.filter_too_much]
_examples = os.environ.get("CAMPAIGN_FUZZ_EXAMPLES", "")

settings.register_profile(
    "ci", max_examples=int(_examples) if _examples.isdigit() else 12, derandomize=True, database=None,
    deadline=timedelta(seconds=15), print_blob=True, suppress_health_check=_SLOW_BY_DESIGN,
    phases=[Phase.explicit, Phase.generate, Phase.shrink], report_multiple_bugs=False)
settings.register_profile(
    "long", max_examples=int(_examples) if _examples.isdigit() else 2000, derandomize=False,
    database=DirectoryBasedExampleDatabase(HOME / "examples"),
    deadline=timedelta(seconds=15), print_blob=True, suppress_health_check=_SLOW_BY_DESIGN,
    report_multiple_bugs=True)
settings.load_profile(os.environ.get("CAMPAIGN_FUZZ_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def _fuzz_session() -> Iterator[None]:
    """Every campaign module imported before the first fork; every example's folder removed at the end of
    the session, outside any example's deadline."""
    from tests.fuzz.harness import preload, remove_scratch

    preload()
    yield
    remove_scratch()
