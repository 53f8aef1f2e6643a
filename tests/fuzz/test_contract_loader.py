"""Fuzzing the contract loader (load_contract, and yamlsafe.load_located under it): random YAML texts and
documents, mutated valid contracts, and hostile paths, both as the contract's own path and inside it.

Property: the load succeeds or raises a CampaignError with a one-line message, within 5 s and 200 MB. A load
that succeeds must also say what the file says: its canonical hash can be computed (freeze does it), it
holds no non-finite number, and no two lanes, inputs or gate ids differ only in case (they name files)."""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.harness import check_outcome, finding, run_bounded, scratch
from tests.fuzz.samples import MINIMAL
from tests.fuzz.strategies import (
    RAW_YAML_TOKENS,
    SPECIAL_PATHS,
    Raw,
    file_names,
    hostile_texts,
    nasty_scalars,
    special_path,
    to_yaml,
    walk_paths,
)
from tests.support.contracts import EXAMPLES

# The examples a user starts from, plus the smallest contract that loads; each is mutated in place.
BASES = {"minimal": MINIMAL, **{name: yaml.safe_load((EXAMPLES / name).read_text())
                                for name in ("demo.yaml", "demo-vllm.yaml", "demo-docker.yaml")}}


@pytest.fixture(scope="module")
def examples_copy() -> Path:
    """A copy of examples/ (the inputs the bases name), where each mutated contract is written."""
    root = scratch("contracts-")
    shutil.copytree(EXAMPLES, root / "examples")
    (root / "models").mkdir()
    return root / "examples"


def _non_finite(node: Any, path: str = "") -> list[str]:
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{path or '(top)'} = {node}"]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _non_finite(v, f"{path}.{k}")]
    if isinstance(node, (list, tuple)):
        return [p for i, v in enumerate(node) for p in _non_finite(v, f"{path}[{i}]")]
    return []


def _case_twins(kind: str, names: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    twins = []
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            twins.append(f"{kind} {other!r} and {name!r} differ only in case")
    return twins


def load_and_check(path: str | Path, allow_paths: list[Path] | None = None) -> dict[str, Any]:
    """In the child: the load, then what a successful load must hold."""
    from campaign.contracts.load import load_contract

    loaded = load_contract(path, allow_paths=allow_paths)
    problems = [("a non-finite number", p) for p in _non_finite(loaded.contract.model_dump(mode="python"))]
    problems += [("names differing only in case", p) for p in
                 _case_twins("lanes", [lane.name for lane in loaded.contract.lanes])
                 + _case_twins("inputs", list(loaded.contract.inputs)) + _case_twins("gate ids", loaded.gate_ids())]
    kernel = [str(p) for p in loaded.referenced_files().values()
              if str(Path(p).resolve()).startswith(("/proc/", "/sys/", "/dev/"))]
    problems += [("a file on a kernel file system", f"a referenced file lies on a kernel file system: {p}")
                 for p in kernel]
    return {"lanes": len(loaded.lanes), "sha256": loaded.canonical_sha256, "problems": problems}


def check_load(path: str | Path, *, may_pass: bool = True, allow_paths: list[Path] | None = None,
               evidence: str = "") -> None:
    """The property for one contract; ``evidence``: what to list for it in a catalog (default: its path and
    the file's first bytes)."""
    outcome = run_bounded(lambda: load_and_check(path, allow_paths))
    if not evidence:
        evidence = f"path {str(path)[:300]!r}"
        try:
            if Path(path).is_file():
                with open(path, "rb") as handle:
                    evidence += f"; file starts {handle.read(1500)!r}"
        except (OSError, ValueError):
            pass
    if check_outcome(outcome, may_pass=may_pass, what=f"load_contract({str(path)[:200]!r})", evidence=evidence) \
            and outcome.kind == "ok" and outcome.value["problems"]:
        kind, _ = outcome.value["problems"][0]
        finding(f"loaded, but {kind}", f"loaded, but: {[text for _, text in outcome.value['problems']]}", evidence)


def write_case(folder: Path, text: str | bytes, name: str = "fuzzed.yaml") -> Path:
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


# ---------------------------------------------------------------- random documents

yaml_texts = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="{}[]:,-?!&*|>'\"#%@` \n\t.0123456789abcxyz\\", max_size=300),
    st.lists(st.sampled_from(RAW_YAML_TOKENS + ["\n", ": ", "- ", "  ", "key", "{", "}", "[", "]", ", "]),
             max_size=40).map("".join),
)


@given(text=yaml_texts)
@example(text='a: "\\ud800"\n')
@example(text="a: " + "1" * 5000 + "\n")
@example(text=to_yaml(MINIMAL) + 'description: "\\ud800"\n').via("a lone surrogate (issue #30 item 9)")
@example(text=to_yaml(MINIMAL) + '"x\\ry": 1\n').via("a key holding a carriage return, quoted in the error")
def test_random_yaml_text(examples_copy: Path, text: str) -> None:
    path = write_case(examples_copy, text)
    check_load(path)


@given(data=st.binary(max_size=400))
@example(data=b"\xef\xbb\xbfcontract: x\n")
@example(data=b"\xff\xfe" + "contract: x\n".encode("utf-16-le"))
def test_random_bytes(examples_copy: Path, data: bytes) -> None:
    check_load(write_case(examples_copy, data))


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=10), hostile_texts, st.sampled_from(RAW_YAML_TOKENS[:40]).map(Raw))
    return st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4))


yaml_documents = st.recursive(nasty_scalars, _containers, max_leaves=12)


@given(document=yaml_documents, flow=st.sampled_from([False, True, None]), unicode=st.booleans())
def test_random_yaml_documents(examples_copy: Path, document: Any, flow: bool | None, unicode: bool) -> None:
    check_load(write_case(examples_copy, to_yaml(document, flow=flow, unicode=unicode)))


# ---------------------------------------------------------------- mutated valid contracts

def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _nested(value: Any, depth: int, kind: str) -> Any:
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@st.composite
def mutated_contracts(draw: st.DrawFn) -> tuple[Any, bool | None]:
    """A valid contract with one to three random edits: replace, insert, delete, rename, nest, case twins."""
    document = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = walk_paths(document)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "insert", "delete", "rename", "nest", "twin"]))
        node = _get(document, path)
        parent = _get(document, path[:-1]) if path else None
        if op == "replace" and path:
            parent[path[-1]] = draw(nasty_scalars)
        elif op == "insert" and isinstance(node, dict):
            node[draw(st.one_of(hostile_texts, st.sampled_from(RAW_YAML_TOKENS[:40]).map(Raw)))] = draw(nasty_scalars)
        elif op == "insert" and isinstance(node, list):
            node.insert(draw(st.integers(0, len(node))), draw(nasty_scalars))
        elif op == "delete" and path:
            del parent[path[-1]]
        elif op == "rename" and path and isinstance(parent, dict):
            value = parent.pop(path[-1])
            key = str(path[-1])
            parent[draw(st.one_of(hostile_texts, st.just(key.swapcase()), st.just(key.upper())))] = value
        elif op == "nest" and path:
            parent[path[-1]] = _nested(node, draw(st.sampled_from([1, 5, 31, 32, 33, 64])),
                                       draw(st.sampled_from(["list", "dict"])))
        elif op == "twin":
            _add_case_twin(document, draw)
    return document, draw(st.sampled_from([False, True, None]))


def _add_case_twin(document: dict[str, Any], draw: st.DrawFn) -> None:
    """A second lane, input or gate whose name differs from an existing one only in case."""
    where = draw(st.sampled_from(["lanes", "inputs", "gates"]))
    if where == "lanes" and isinstance(document.get("lanes"), list) and document["lanes"]:
        lane = copy.deepcopy(draw(st.sampled_from(document["lanes"])))
        if isinstance(lane, dict) and isinstance(lane.get("name"), str):
            lane["name"] = lane["name"].swapcase() if lane["name"].swapcase() != lane["name"] else lane["name"] + "A"
            document["lanes"].append(lane)
    elif where == "inputs" and isinstance(document.get("inputs"), dict) and document["inputs"]:
        name = draw(st.sampled_from(sorted(map(str, document["inputs"]))))
        document["inputs"][name.upper() if name.upper() != name else name.lower()] = document["inputs"][name]
    elif where == "gates" and isinstance(document.get("gates"), list) and document["gates"]:
        gate = copy.deepcopy(draw(st.sampled_from(document["gates"])))
        if isinstance(gate, dict):
            gate["id"] = str(gate.get("id") or gate.get("kind")).upper()
            document["gates"].append(gate)


@given(case=mutated_contracts())
def test_mutated_contracts(examples_copy: Path, case: tuple[Any, bool | None]) -> None:
    document, flow = case
    check_load(write_case(examples_copy, to_yaml(document, flow=flow)), evidence=_changes(document))


def _changes(document: Any) -> str:
    """The lines a mutated contract changed in the nearest base (block style), for a catalog."""
    import difflib

    text = to_yaml(document).splitlines()
    base = min(BASES.values(), key=lambda b: len(set(to_yaml(b).splitlines()) ^ set(text)))
    diff = difflib.unified_diff(to_yaml(base).splitlines(), text, lineterm="", n=0)
    return "\n".join(line for line in diff if not line.startswith(("---", "+++")))[:1500]


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_unmutated_bases_load(examples_copy: Path, base: str) -> None:
    check_load(write_case(examples_copy, to_yaml(BASES[base])))


def _numeric_leaves(document: Any) -> list[tuple[Any, ...]]:
    return [p for p in walk_paths(document) if p and isinstance(_get(document, p), (int, float))
            and not isinstance(_get(document, p), bool)]


NUMERIC_FIELDS = [(base, path) for base in sorted(BASES) for path in _numeric_leaves(BASES[base])]
NOT_A_NUMBER = [Raw(t) for t in ("yes", "no", "on", "off", "true", "false", "y", "Yes", ".nan", ".NaN", ".inf",
                                 "-.inf", "+.inf", "1e400", "-1e400", "inf", "-inf", "nan", "NaN", "Infinity",
                                 '"1e400"', '"-Infinity"', '"nan"')] + [True, False, math.nan, math.inf, -math.inf]


@given(field=st.sampled_from(NUMERIC_FIELDS), token=st.sampled_from(NOT_A_NUMBER))
@example(field=("demo.yaml", ("gates", 4, "rule", "max_mean")), token=Raw("inf"))
@example(field=("demo.yaml", ("gates", 4, "rule", "max_mean")), token=Raw('"1e400"'))
@example(field=("minimal", ("version",)), token=Raw("yes"))
def test_numbers_are_strict(examples_copy: Path, field: tuple[str, tuple[Any, ...]], token: Any) -> None:
    """Items 10 and 11: a YAML 1.1 boolean or a non-finite number where the contract has a number is
    refused, never read as 1, 0 or null; so is a text a lax parser would read as a non-finite number
    (``inf``, ``"1e400"``: YAML reads them as strings, pydantic's float parsing as infinity)."""
    base, path = field
    document = copy.deepcopy(BASES[base])
    _get(document, path[:-1])[path[-1]] = token
    check_load(write_case(examples_copy, to_yaml(document)), may_pass=False,
               evidence=f"{base}: {'.'.join(map(str, path))}: {token}")


# ---------------------------------------------------------------- paths

@given(kind=st.sampled_from(SPECIAL_PATHS), name=file_names, valid=st.booleans())
def test_contract_paths(examples_copy: Path, kind: str, name: str, valid: bool) -> None:
    """The contract's own path: a special kind, or a file with a random name holding a valid contract."""
    folder = Path(tempfile.mkdtemp(prefix="paths-", dir=examples_copy))  # removed with the session's scratch
    path = write_case(folder, to_yaml(MINIMAL), name=name) if valid else special_path(kind, folder)
    check_load(path)


PLACES = ["inputs.p.file", "model.path", "model.sha256_manifest", "lane file", "incumbent.pidfile",
          "executable"]


def _place(document: dict[str, Any], place: str, path: str) -> None:
    defaults = document["lane_defaults"]
    if place == "inputs.p.file":
        document["inputs"]["p"]["file"] = path
    elif place == "model.path":
        defaults["model"]["path"] = path
    elif place == "model.sha256_manifest":
        defaults["model"]["sha256_manifest"] = path
    elif place == "lane file":
        defaults["files"] = [{"name": "f", "path": path, "sha256": "0" * 64}]
    elif place == "incumbent.pidfile":
        document["incumbent"] = {"runtime": "process", "endpoint": "http://127.0.0.1:18999", "pidfile": path}
        document["failsafe"] = {"deadline": "10m"}
    elif place == "executable":
        defaults["executable"] = path


@given(kind=st.sampled_from(SPECIAL_PATHS), place=st.sampled_from(PLACES), absolute=st.booleans(),
       allow_root=st.booleans())
def test_special_paths_inside_a_contract(examples_copy: Path, kind: str, place: str, absolute: bool,
                                         allow_root: bool) -> None:
    """A FIFO, a loop, /dev/zero, /proc/self/environ... as an input, a model, a manifest, a lane file."""
    folder = Path(tempfile.mkdtemp(prefix="inside-", dir=examples_copy))  # removed with the session's scratch
    target = special_path(kind, folder)
    if not absolute and target.startswith(str(examples_copy)):
        target = target[len(str(examples_copy)) + 1:]
    document = copy.deepcopy(MINIMAL)
    _place(document, place, target)
    check_load(write_case(examples_copy, to_yaml(document)), allow_paths=[Path("/")] if allow_root else None)
