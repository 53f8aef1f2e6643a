"""The layout ARCHITECTURE.md describes, checked: which package may import which, no import circle (a
function-level import counts), the kind registries in step with the schema, and short functions where
the window's safety and the judges' verdicts live."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest

from campaign.contracts.engines import ENGINES
from campaign.contracts.gatespecs import GATE_SPECS
from campaign.gates.registry import GATES
from campaign.lanes.engines.registry import ADAPTERS

PACKAGE = Path(__file__).resolve().parents[2] / "campaign"

# What each part of campaign may import (besides itself); ARCHITECTURE.md draws the same layers.
MAY_IMPORT = {
    "terminal": set(),
    "errors": {"terminal"},
    "fsutil": {"errors"},
    "faults": set(),
    "kinds": set(),  # a table of kinds that fills itself: gates and engine adapters register through it
    "signing": {"errors", "fsutil"},
    "presentation": set(),  # the typed headlines and plot data gates build and receipts draw
    "verdicts": set(),  # how verdicts combine: the gates judge by it and the receipts read older bundles by it
    "contracts": {"errors", "fsutil", "signing", "__init__"},
    "lanes": {"errors", "fsutil", "signing", "contracts", "kinds"},
    "receipts": {"errors", "fsutil", "signing", "contracts", "presentation", "verdicts"},
    "gates": {"errors", "fsutil", "signing", "contracts", "lanes", "kinds", "presentation", "verdicts"},
    # the rooms of a window: the daily below the failsafe, promotion and the window; none imports a room above
    "daily": {"errors", "fsutil", "signing", "contracts", "lanes"},
    "failsafe": {"errors", "fsutil", "contracts", "lanes", "daily"},
    "promotion": {"errors", "fsutil", "signing", "contracts", "lanes", "receipts", "gates", "daily", "faults",
                  "presentation", "verdicts"},
    "window": {"errors", "terminal", "fsutil", "signing", "contracts", "lanes", "receipts", "gates", "daily",
               "failsafe", "faults", "presentation", "verdicts", "__init__"},
    "cli": {"errors", "terminal", "fsutil", "signing", "contracts", "lanes", "receipts", "gates", "daily",
            "failsafe", "promotion", "window", "presentation", "verdicts", "__init__"},
    "__init__": set(),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "campaign":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
    return {name for name in out if name in modules}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_each_part_imports_only_the_layers_below_it() -> None:
    modules = _modules()
    wrong = sorted(f"{name} imports {target}" for name, path in modules.items() for target in _imports(path, modules)
                   if _part(target) != _part(name) and _part(target) not in MAY_IMPORT[_part(name)])
    assert wrong == []


def test_gates_read_lanes_but_never_run_them() -> None:
    """A gate talks to a booted lane through its adapter and LaneRun; how lanes are launched (runtimes, the
    boot in lanes/session.py) is the window's business."""
    modules = _modules()
    wrong = sorted(f"{name} imports {target}" for name, path in modules.items() if _part(name) == "gates"
                   for target in _imports(path, modules)
                   if target.startswith(("campaign.lanes.runtimes", "campaign.lanes.session")))
    assert wrong == []


def test_redaction_sits_below_the_runtimes() -> None:
    """Runtimes redact what they log and record; the redactor never reaches back into them."""
    modules = _modules()
    assert not [t for t in _imports(modules["campaign.lanes.redact"], modules) if t.startswith("campaign.lanes.runtimes")]


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    circles = []
    # Tarjan's strongly connected components: any component of two or more modules is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert circles == []


# The most campaign modules one module may import (module- and function-level, as ``_imports`` counts them):
# a module past it holds several concepts, and its reader must hold them all. The largest today are
# gates/speed/gate.py (18: the live measurement, the fit, the rows and the presentation are modules beside
# it, each one concept) and window/run.py, window/resume.py, promotion/promote.py, lanes/session.py (15).
MAX_IMPORTS = 18
# The command line is a package, one module a command group: each stays short enough to read at once.
MAX_CLI_MODULE_LINES = 300


def test_no_module_imports_too_many_others() -> None:
    modules = _modules()
    counts = {name: len(_imports(path, modules) - {name}) for name, path in modules.items()}
    assert sorted(f"{name} imports {count}" for name, count in counts.items() if count > MAX_IMPORTS) == []


def test_every_module_of_the_command_line_is_short() -> None:
    cli = {name: len(path.read_text().splitlines()) for name, path in _modules().items()
           if name == "campaign.cli" or name.startswith("campaign.cli.")}
    assert len(cli) > 5 and {name: lines for name, lines in cli.items() if lines > MAX_CLI_MODULE_LINES} == {}


def test_a_command_starts_without_the_statistics_libraries() -> None:
    """scipy.stats takes half a second to import: a window's start, a watchdog and every command would pay it
    (the suite runs `campaign run` hundreds of times). Only a judgment imports it, where it is used."""
    import subprocess
    import sys

    probe = ("import sys, campaign.cli, campaign.window.run, campaign.failsafe.watchdog, campaign.daily.restore; "
             "print(sorted(m for m in sys.modules if m == 'scipy.stats' or m.startswith('scipy.stats.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout[:500]


def test_every_gate_kind_has_a_spec_and_a_gate() -> None:
    kinds = [typing.get_args(spec.model_fields["kind"].annotation)[0] for spec in GATE_SPECS.values()]
    assert len(set(kinds)) == len(kinds)
    assert set(kinds) == set(GATES)


def test_every_engine_kind_has_facts_and_an_adapter() -> None:
    from campaign.contracts.schema import LaneFields

    accepted = typing.get_args(typing.get_args(LaneFields.model_fields["engine"].annotation)[0])
    assert set(accepted) == set(ENGINES) == set(ADAPTERS)
    assert all(ENGINES[kind] is vars(ADAPTERS[kind])["facts"] for kind in ADAPTERS)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_kind_declares_how_it_is_built_and_its_context(engine: str) -> None:
    """The doctor's fix for a missing engine names the make target that builds it (SGLang's was empty, so its
    doctor said only "install sglang-cpu-python"); the context checks need the option that sets the context."""
    facts = ENGINES[engine]
    targets = re.findall(r"^([a-z][a-z-]*):", (PACKAGE.parent / "Makefile").read_text(encoding="utf-8"), re.M)
    assert facts.build_hint.startswith("make ") and facts.build_hint.removeprefix("make ") in targets, facts.build_hint
    assert facts.context_options


@pytest.mark.parametrize("part", ["gates", "daily", "failsafe", "promotion", "window"])
def test_no_function_over_60_lines(part: str) -> None:
    long = []
    for path in sorted((PACKAGE / part).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


# --- a gate kind's name is used as a kind only where the kind lives -------------------------------------

def _kind_homes(kind: str) -> set[str]:
    """Modules that may name ``kind`` as a kind: the kind's own module, spec and gate (its sub-package when it
    spans files)."""
    module = GATES[kind].__module__
    package = module.rsplit(".", 1)[0]
    return {package if package != "campaign.gates" else module}


def _is_kind(node: ast.AST) -> bool:
    """An expression that reads a kind: ``kind``, ``x.kind``, ``x["kind"]``, ``x.get("kind")``."""
    if isinstance(node, ast.Name):
        return node.id == "kind" or node.id.endswith("_kind")
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
    return False


def _kinds_in(node: ast.AST, kinds: set[str]) -> set[str]:
    """Kind names a literal holds: a string, or a tuple, list or set of strings."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {item.value for item in items if isinstance(item, ast.Constant) and item.value in kinds}


def kind_uses(source: str, kinds: set[str]) -> list[tuple[int, str]]:
    """(line, kind) wherever a kind name is used as a kind: compared with a kind (``==``, ``in``, a
    ``match`` case), passed as ``kind=``, or a key of a kind table (a dict whose keys are all kind names, or
    two or more of them). The same word meaning something else (an observable "speed", ``purpose="kl"``,
    a tag ``{"task": ...}`` among other keys) is not a kind."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_kind(o) for o in operands):
                found += [(node.lineno, k) for o in operands for k in sorted(_kinds_in(o, kinds))]
        elif isinstance(node, ast.Match) and _is_kind(node.subject):
            found += [(case.pattern.lineno, k) for case in node.cases
                      for value in ast.walk(case.pattern) if isinstance(value, ast.MatchValue)
                      for k in sorted(_kinds_in(value.value, kinds))]
        elif isinstance(node, ast.keyword) and node.arg == "kind":
            found += [(node.value.lineno, k) for k in sorted(_kinds_in(node.value, kinds))]
        elif isinstance(node, ast.Dict):
            named = [key for key in node.keys if key is not None and _kinds_in(key, kinds)]
            if len(named) >= 2 or (named and len(named) == len(node.keys)):
                found += [(key.lineno, key.value) for key in named]  # type: ignore[attr-defined]
    return found


def test_a_gate_kind_is_named_as_a_kind_only_in_its_own_module() -> None:
    """So a new kind is its module: no table elsewhere keyed by kind names (a report's headlines, its
    plots) and no dispatch on a kind's name (a screen, a speed gate) that a new kind would silently miss."""
    kinds = set(GATES)
    wrong = sorted(f"{name}:{line} uses the kind {kind!r}" for name, path in _modules().items()
                   for line, kind in kind_uses(path.read_text(encoding="utf-8"), kinds)
                   if not any(name == home or name.startswith(home + ".") for home in _kind_homes(kind)))
    assert wrong == []


def test_the_kind_check_finds_a_planted_use_and_leaves_other_words_alone() -> None:
    kinds = set(GATES)
    planted = '''
if result.kind == "speed":
    pass
if gate.get("kind") in ("screen", "needle"):
    pass
if r["kind"] != "task":
    pass
_HEADLINE = {"greedy": ("self_identical",), "kl": ("kl_mean",)}
_DRAWERS = {"teacher_forced": []}
made = GateResult(kind="tools")
match spec.kind:
    case "ruler":
        pass
'''
    assert sorted(kind for _, kind in kind_uses(planted, kinds)) == sorted(
        ["speed", "screen", "needle", "task", "greedy", "kl", "teacher_forced", "tools", "ruler"])
    unrelated = '''
if observable == "speed":
    pass
score_texts(run, sink, refs, purpose="kl")
sink.put(tags={"task": task.id, "kind": task.kind, "repeat": 0})
if record.get("kind") == "instrument":
    pass
ACTING = ("outputs", "logprobs", "metrics", "speed")
'''
    assert kind_uses(unrelated, kinds) == []


def _broad(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(kind is None or (isinstance(kind, ast.Name) and kind.id in ("Exception", "BaseException"))
               for kind in kinds)


@pytest.mark.parametrize("part", ["daily", "failsafe", "promotion", "window"])
def test_a_broad_except_only_at_a_documented_top_level(part: str) -> None:
    """Errors are caught by their kind (Docker's through lanes/runtimes/dockererrors.py); `except Exception`
    is left only where a loop or a restore must go on whatever broke, and says so ("top level") where it is."""
    undocumented = []
    for path in sorted((PACKAGE / part).rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ExceptHandler) and _broad(node):
                said = " ".join(lines[node.lineno - 1:node.lineno + 1])
                if "top level" not in said:
                    undocumented.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert undocumented == []


TESTS = PACKAGE.parent / "tests"


def _test_module_imports(path: Path) -> list[str]:
    """The test modules (``test_*.py`` under tests/) that ``path`` imports, at any depth of its code."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):  # the module itself, or a test module imported from its package
            names = [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found += [name for name in names if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    """A helper two test modules share lives in tests/support (or tests/fuzz's own helpers): a test module that
    another imports runs its module-level set-up twice and is one rename away from breaking its importer."""
    importing = {str(path.relative_to(TESTS)): names for path in sorted(TESTS.rglob("*.py"))
                 if (names := _test_module_imports(path))}
    assert importing == {}, importing


def test_the_test_import_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text("from tests.unit.window.test_judge import x\nimport tests.support.cli\n"
                      "from tests.unit.window import test_promote, helper\n"
                      "def f():\n    import tests.fuzz.test_cli_output\n")
    assert _test_module_imports(module) == ["tests.unit.window.test_judge", "tests.unit.window.test_promote",
                                            "tests.fuzz.test_cli_output"]


SHARED_TEMP_LOOK = re.compile(r"gettempdir\(\)\)?\s*\.\s*(?:r?glob|iterdir)\(")


def _looks_in_the_shared_temp_folder(text: str) -> bool:
    """A test that lists the temp folder without a folder of its own (``own_tempdir``, or tempfile.tempdir set
    by the test): under ``make test``'s two workers it sees the other worker's commands' files there."""
    return bool(SHARED_TEMP_LOOK.search(text)) and "own_tempdir" not in text and \
        'setattr(tempfile, "tempdir"' not in text


def test_no_unit_test_lists_the_shared_temp_folder() -> None:
    shared = [str(path.relative_to(TESTS)) for folder in ("unit", "fuzz")
              for path in sorted((TESTS / folder).rglob("test_*.py")) if _looks_in_the_shared_temp_folder(path.read_text())]
    assert shared == [], shared


def test_the_temp_folder_check_sees_a_listing() -> None:
    listing = 'before = set(Path(tempfile.gettempdir()).glob("campaign-verify-*"))'
    assert _looks_in_the_shared_temp_folder(listing)
    assert not _looks_in_the_shared_temp_folder(f'pytestmark = pytest.mark.usefixtures("own_tempdir")\n{listing}')
    assert not _looks_in_the_shared_temp_folder("root = Path(tempfile.gettempdir()) / 'x'")
