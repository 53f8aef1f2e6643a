"""No silent broad catch in campaign/: a handler of ``Exception``, ``BaseException`` or everything either
raises again or says what it caught (uses the exception, or writes its traceback). A catch that does
neither hides a bug as an ordinary outcome."""

from __future__ import annotations

import ast
from pathlib import Path

import campaign

BROAD = {"Exception", "BaseException"}
SAYS = {"format_exc", "print_exc", "exception", "format_exception"}  # traceback.*, logging's .exception


def _broad(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(isinstance(k, ast.Name) and k.id in BROAD for k in kinds)


def _accounts_for_it(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if handler.name and isinstance(node, ast.Name) and node.id == handler.name:
            return True
        if isinstance(node, ast.Attribute) and node.attr in SAYS:
            return True
    return False


def silent_catches(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ExceptHandler) and _broad(node) and not _accounts_for_it(node):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_broad_catch_in_campaign_is_silent() -> None:
    assert silent_catches(Path(campaign.__file__).parent) == []


def test_the_check_finds_a_silent_catch_and_passes_the_ones_that_say_or_raise(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "try:\n    x()\nexcept Exception:\n    pass\n"                      # silent: found
        "try:\n    x()\nexcept (OSError, BaseException) as e:\n    y = 1\n"  # bound but unused: found
        "try:\n    x()\nexcept:\n    cleanup()\n    raise\n"               # raises again
        "try:\n    x()\nexcept Exception as e:\n    log(str(e))\n"          # says what it caught
        "try:\n    x()\nexcept Exception:\n    write(traceback.format_exc())\n"
        "try:\n    x()\nexcept ValueError:\n    pass\n")                    # narrow: not this test's business
    assert silent_catches(package) == ["pkg/m.py:3", "pkg/m.py:7"]
