"""Every pattern that reads contract text or log text is linear: over each adversarial shape of
benchmarks/patterns.py (runs of letters, of ':' '@' '/', of '-', of digits, of 'a:', of token prefixes...),
4x the text costs at most about 4x the time.

Structural, not absolute: each pattern is timed (this thread's CPU time) on 16 KB and 64 KB of the same
shape in this one run, and the larger may cost at most 8x the smaller (linear is 4x; quadratic 16x) plus
10 ms for the caches and the timer of a busy machine. A quadratic pattern is far outside that: the URL
pattern this replaced took 19 s at 100 KB, so about half a second at 16 KB and eight at 64 KB. A run over
the bound is measured again, best of three, before it fails. A pattern that repeats nothing without bound
(a fixed alternation such as the boot-log causes) is linear by its structure and runs on the mixed text only.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time

import pytest

from tests.support.contracts import REPO

SMALL, LARGE = 16_000, 64_000
SLACK = 0.010


def _benchmark():
    spec = importlib.util.spec_from_file_location("benchmark_patterns", REPO / "benchmarks" / "patterns.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


BENCH = _benchmark()
ENTRIES = BENCH.catalog()
# the composite scanners are built from the patterns above (each checked on every shape); they are checked
# on the shapes that give them the most hits, and on all shapes at once
COMPOSITE_SHAPES = ["mixed", "# key:", "key=", "--api-key ", "bearer ", "sk-", "BEGIN", "a://a", "https://a:",
                    "eyJa.", "base64", "Z9", "letters", "spaces-after-unit"]


def _once(run, text: str) -> float:
    start = time.thread_time()  # CPU time: other work on a busy machine does not count
    run(text)
    return time.thread_time() - start


def grows_linearly(run, shape: str) -> tuple[bool, str]:
    small, large = BENCH.text_for(shape, SMALL), BENCH.text_for(shape, LARGE)
    low, high = _once(run, small), _once(run, large)
    if high > 8 * low + SLACK:  # a busy machine, or a real problem: look again, best of three
        low, high = BENCH.best_of(run, small), BENCH.best_of(run, large)
    return high <= 8 * low + SLACK, (f"{shape!r}: {low * 1000:.1f} ms at {SMALL // 1000} KB, "
                                     f"{high * 1000:.1f} ms at {LARGE // 1000} KB")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name.split(" ")[0] for e in ENTRIES])
def test_pattern_is_linear_on_every_adversarial_shape(entry) -> None:
    if entry.pattern is not None and not BENCH.has_unbounded_repeat(entry.pattern):
        shapes = ["mixed"]
    elif entry.pattern is None:
        shapes = COMPOSITE_SHAPES
    else:
        shapes = [*BENCH.SHAPES, "mixed"]
    for shape in shapes:
        ok, detail = grows_linearly(entry.run, shape)
        assert ok, f"{entry.name} grows faster than linear on {detail}"


def test_the_check_catches_a_quadratic_pattern() -> None:
    """The old URL-credential pattern, on a run of letters: a bound like the one above sees it. 8x the text,
    so a quadratic pattern costs about 64x and a linear one 8x: 16x between them holds on a noisy machine
    (4x the text and 8x the time failed one run in six here, 7.3x measured). The 16 KB text costs about a
    second in all."""
    old = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@")
    run = lambda text: old.search(text)  # noqa: E731
    low, high = BENCH.best_of(run, "a" * 2_000), BENCH.best_of(run, "a" * 16_000)
    assert high > 16 * low + SLACK, (low, high)


def test_catalog_covers_every_pattern_of_the_secret_rules() -> None:
    """A pattern added to secretrefs must be added to the benchmark (and so to this test)."""
    from campaign.contracts import secretrefs

    compiled = {name for name, value in vars(secretrefs).items() if isinstance(value, re.Pattern)}
    named = " ".join(entry.name for entry in ENTRIES)
    covered = {name for name in compiled if f"secretrefs.{name}" in named}
    assert compiled - covered <= {"_NAME_WORD"}, compiled - covered  # names are cut at 128 characters first
    assert len(secretrefs.TOKEN_PATTERNS) == sum("TOKEN_PATTERNS[" in entry.name for entry in ENTRIES)
