"""Every pattern that reads contract text or log text, over adversarial input: linear or not.

For each pattern (imported from its module, as the tool uses it) and each adversarial shape (runs of
letters, of ':' '@' '/', of '-', of digits, of 'a:', of '://', of a token prefix, of spaces before a
failing character...), the time over 100 KB and over 1 MB of that shape, and their ratio: a linear pattern
gives about 10, a quadratic one about 100 (it is then not run at 1 MB: it would take minutes). One row
per pattern: its worst shape. Times are the thread's CPU time, best of several runs, so other work on the
machine does not count; below a millisecond they are still rough, and so is a ratio over them.

    python benchmarks/patterns.py            # every pattern, 100 KB and 1 MB
    python benchmarks/patterns.py --quick    # 20 KB and 200 KB

``tests/unit/contracts/test_pattern_linearity.py`` runs the same catalog at 50 KB and 200 KB.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (prefix, repeated unit, suffix): the unit fills the middle up to the size asked for; the suffix is what
# makes a greedy pattern fail at the very end, after it has read everything.
SHAPES: dict[str, tuple[str, str, str]] = {
    "letters": ("", "a", "!"),
    "Letters": ("", "aB", "!"),
    "digits": ("", "1", "x"),
    "spaces": ("1", " ", "x"),
    "spaces-after-unit": ("1 s", " ", "x"),
    "tabs": ("a", "\t", "x"),
    "colons": ("", ":", "!"),
    "ats": ("", "@", "!"),
    "slashes": ("", "/", "!"),
    "dashes": ("", "-", "!"),
    "underscores": ("", "_", "!"),
    "dots": ("", ".", "!"),
    "equals": ("", "=", "!"),
    "hashes": ("", "#", "!"),
    "newlines": ("", "\n", "x"),
    "a:": ("", "a:", "!"),
    "a@": ("", "a@", "!"),
    "a=": ("", "a=", "!"),
    "a/": ("", "a/", "!"),
    "a-": ("", "a-", "!"),
    "1.": ("", "1.", "x"),
    "1/": ("", "1/", "x"),
    "://": ("", "://", "!"),
    "a://a": ("", "a://a", "!"),
    "https://a:": ("", "https://a:", "!"),
    "x@y:": ("", "x@y:", "!"),
    "sk-": ("", "sk-", "!"),
    "hf_": ("", "hf_", "!"),
    "xoxa-": ("", "xoxa-", "!"),
    "eyJ": ("", "eyJ", "!"),
    "eyJa.": ("", "eyJaaaaaaaaa.", "!"),
    "bearer ": ("", "bearer ", "!"),
    "Basic ": ("", "Basic ", "!"),
    "BEGIN": ("", "-----BEGIN RSA PRIVATE KEY-----", "!"),
    "${env:": ("", "${env:", "!"),
    "${env:a": ("${env:", "a", "!"),
    "${file:a": ("${file:", "a", "!"),
    "key=": ("", "key=", "!"),
    "--api-key ": ("", "--api-key ", "!"),
    "api_key:": ("", "api_key: ", "!"),
    "'a': ": ("", "'a': ", "!"),
    "# key:": ("", "# key: ", "!"),
    "base64": ("", "Zm9vYmFyYmF6cXV4", "!"),
    "Z9": ("", "Z9", "!"),
    "name@": ("", "n", "@"),
    "sha256:": ("", "sha256:", "!"),
    ">=": ("", ">= ", "x"),
    "a>=1": ("a >= ", "1", "x"),
    "1e": ("a >= 1", "1", "e"),
    "0x": ("", "0x", "!"),
    "python": ("", "-python", "!"),
    "@rerun": ("a", "@rerun1", "!"),
    "token =": ("", "token = ", "!"),
    "error": ("", "error: ", "!"),
}


@dataclass(frozen=True)
class Entry:
    name: str              # module.PATTERN
    run: Callable[[str], object]
    pattern: re.Pattern[str] | None = None  # None: a function built from several patterns


def _search_all(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: sum(1 for _ in pattern.finditer(text))


def _search(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: pattern.search(text)


def _match(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: pattern.match(text)


def _fullmatch(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: pattern.fullmatch(text)


def pattern_entry(name: str, pattern: re.Pattern[str],
                  use: Callable[[re.Pattern[str]], Callable[[str], object]]) -> Entry:
    return Entry(name, use(pattern), pattern)


def has_unbounded_repeat(pattern: re.Pattern[str]) -> bool:
    """Whether the pattern repeats anything without bound (``*``, ``+``, ``{n,}``, possessive or not): one
    without is a fixed-length alternation, linear whatever the text."""
    from re import _constants, _parser  # type: ignore[attr-defined]

    def walk(items: object) -> bool:
        for op, arg in items:  # type: ignore[attr-defined]
            if op in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT):
                if arg[1] == _constants.MAXREPEAT or walk(arg[2]):
                    return True
            elif op in (_constants.SUBPATTERN, _constants.ATOMIC_GROUP, _constants.ASSERT,
                        _constants.ASSERT_NOT):
                if walk(arg[-1]):
                    return True
            elif op is _constants.BRANCH and any(walk(branch) for branch in arg[1]):
                return True
        return False

    return walk(_parser.parse(pattern.pattern, pattern.flags))


def catalog() -> list[Entry]:
    """Every pattern that reads contract text (any value, key or comment of a contract) or log text (boot
    logs, redaction), each used the way its module uses it."""
    from campaign.contracts import args, model, schema, secretrefs, units, yamlsafe
    from campaign.gates import records, ruler
    from campaign.gates.screen import gate as screen
    from campaign.lanes import bootlog, redact
    from campaign.lanes.engines import vllm

    entries = [pattern_entry("secretrefs.REF", secretrefs.REF, _search_all)]
    entries += [pattern_entry(f"secretrefs.TOKEN_PATTERNS[{i}] {p.pattern[:28]}", p, _search_all)
                for i, p in enumerate(secretrefs.TOKEN_PATTERNS)]
    entries += [pattern_entry(f"secretrefs.{name}", getattr(secretrefs, name), _search_all)
                for name in ("_BASIC", "_PEM", "_LONG_WORD", "_SEGMENT", "_UNIT", "_NAMED", "_COMMENT_START",
                             "_ANY_TRIGGER", "_QUERY", "_HEX_RUN", "_NAME_SEGMENT", "_DIGEST_LABEL")]
    entries += [
        pattern_entry("secretrefs._AUTHORITY (match at each '://')", secretrefs._AUTHORITY, _match),
        pattern_entry("secretrefs._HEX (fullmatch)", secretrefs._HEX, _fullmatch),
        pattern_entry("secretrefs._NUMBER (fullmatch)", secretrefs._NUMBER, _fullmatch),
        pattern_entry("secretrefs._PATH_CHARS (fullmatch)", secretrefs._PATH_CHARS, _fullmatch),
        Entry("secretrefs.hex_token", secretrefs.hex_token),
        Entry("secretrefs.credential_like", secretrefs.credential_like),
        Entry("secretrefs.credential_spans", lambda t: secretrefs.credential_spans(t, named=True)),
        Entry("secretrefs.secrets_anywhere (a description)", lambda t: secretrefs.secrets_anywhere({"description": t})),
        Entry("secretrefs.raw_text_secrets", secretrefs.raw_text_secrets),
        Entry("secretrefs._comments (with a node tree)", lambda t: secretrefs._comments(t, _tree(t))),
        Entry("secretrefs.is_secret_name", secretrefs.is_secret_name),
        Entry("redact.cut_credentials", redact.cut_credentials),
        pattern_entry("model.FILE_REF", model.FILE_REF, _search_all),
        pattern_entry("model._FRACTION (match)", model._FRACTION, _match),
        pattern_entry("units._DURATION (match)", units._DURATION, _match),
        pattern_entry("units._SIZE (match)", units._SIZE, _match),
        pattern_entry("screen._CLAUSE (match)", screen._CLAUSE, _match),
        pattern_entry("schema._IMAGE (match)", schema._IMAGE, _match),
        pattern_entry("args._NUMBER (match)", args._NUMBER, _match),
        pattern_entry("records._KEY (match)", records._KEY, _match),
        pattern_entry("vllm._PYTHON (search)", vllm._PYTHON, _search),
        pattern_entry("ruler._VOLATILE (search)", ruler._VOLATILE, _search),
        pattern_entry("ruler._STAMP (match)", ruler._STAMP, _match),
        pattern_entry("bootlog._NOT_STARTED (search)", bootlog._NOT_STARTED, _search),
    ]
    entries += [pattern_entry(f"bootlog.{cause} (search)", pattern, _search) for cause, pattern in bootlog._CAUSES]
    from campaign.lanes.engines.registry import ADAPTERS

    entries += [pattern_entry(f"{kind} facts.boot_failures {cause} (search)", pattern, _search)
                for kind, adapter in sorted(ADAPTERS.items()) for cause, pattern in adapter.facts.boot_failures]
    entries += [pattern_entry(f"yamlsafe.{name}", getattr(yamlsafe, name), _search)
                for name in ("_NON_PRINTABLE", "_NUL_OR_SURROGATE") if hasattr(yamlsafe, name)]
    entries += _yaml_resolvers()
    return entries


def _tree(text: str) -> object:
    """A YAML node tree whose one scalar covers the first half of ``text``: comments are placed by bisection."""
    import yaml

    half = yaml.Mark("text", len(text) // 2, 0, 0, None, None)
    return yaml.ScalarNode("tag:yaml.org,2002:str", "", yaml.Mark("text", 0, 0, 0, None, None), half)


def _yaml_resolvers() -> list[Entry]:
    """PyYAML's implicit resolvers run on every plain scalar of a contract (C loader or not)."""
    import yaml

    seen: dict[str, re.Pattern[str]] = {}
    for resolvers in yaml.SafeLoader.yaml_implicit_resolvers.values():
        for tag, pattern in resolvers:
            seen.setdefault(tag.rsplit(":", 1)[-1], pattern)
    return [pattern_entry(f"yaml resolver {tag} (match)", pattern, _match) for tag, pattern in sorted(seen.items())]


def adversarial(shape: str, size: int) -> str:
    prefix, unit, suffix = SHAPES[shape]
    count = max(1, (size - len(prefix) - len(suffix)) // len(unit))
    return prefix + unit * count + suffix


def mixed(size: int) -> str:
    """Every shape one after another, each about size / len(SHAPES) long: one text for search patterns."""
    part = size // len(SHAPES)
    return "".join(adversarial(shape, part) for shape in SHAPES)


def best_of(run: Callable[[str], object], text: str, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs in this thread's CPU time (other work on a busy machine does not count),
    the collector off."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.thread_time()
            run(text)
            best = min(best, time.thread_time() - start)
    finally:
        gc.enable()
    return best


def text_for(shape: str, size: int) -> str:
    return mixed(size) if shape == "mixed" else adversarial(shape, size)


def measure(entry: Entry, small: int, large: int, *, shapes: list[str] | None = None) -> tuple[str, float, float]:
    """(worst shape, seconds at ``large``, ratio large/small). Every shape runs at small/10 and small; the
    two that grow fastest and the slowest one run at ``large`` too, unless one already grows far faster
    than linear (it would take minutes at ``large``: its ratio is reported as measured, time inf)."""
    grown = []
    for shape in shapes or [*SHAPES, "mixed"]:
        tiny, low = best_of(entry.run, text_for(shape, small // 10)), best_of(entry.run, text_for(shape, small))
        if low > 0.05 and low / max(tiny, 1e-6) > 30:
            return shape, float("inf"), low / max(tiny, 1e-6)
        grown.append((low / max(tiny, 2e-5), low, shape))  # under 20 us, a time is the timer's, not the pattern's
    chosen = {shape for *_, shape in sorted(grown)[-2:]} | {max(grown, key=lambda g: g[1])[2]}
    worst = ("", 0.0, 0.0)
    for _, low, shape in grown:
        if shape in chosen:
            high = best_of(entry.run, text_for(shape, large), repeats=2)
            ratio = high / max(low, 2e-5)
            if ratio > worst[2] or (ratio == worst[2] and high > worst[1]):
                worst = (shape, high, ratio)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 KB and 200 KB instead of 100 KB and 1 MB")
    parser.add_argument("--only", default="", help="only patterns whose name contains this")
    options = parser.parse_args()
    small, large = (20_000, 200_000) if options.quick else (100_000, 1_000_000)
    print(f"{'pattern':<58} {'worst shape':<16} {'time at ' + str(large // 1000) + ' KB':>14} {'ratio':>7}")
    worst_ratio = 0.0
    for entry in catalog():
        if options.only not in entry.name:
            continue
        shape, seconds, ratio = measure(entry, small, large)
        worst_ratio = max(worst_ratio, ratio)
        shown = "superlinear" if seconds == float("inf") else f"{seconds * 1000:11.1f} ms"
        print(f"{entry.name[:58]:<58} {shape:<16} {shown:>14} {ratio:7.1f}", flush=True)
    print(f"size ratio {large // small}: a linear pattern shows about {large // small} (timer noise makes small "
          f"times vary); worst ratio here {worst_ratio:.1f}")


if __name__ == "__main__":
    main()
