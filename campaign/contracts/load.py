"""Load a contract: safe YAML, schema, and the checks that need the whole document.

Every error names the file, the line and the field. Cross-references (lanes, controls, inputs, gate
ids), referenced files and the one-axis rule are checked here, once, so a run never discovers them.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import ValidationError

from campaign.contracts.args import parse_args
from campaign.contracts.engines import ENGINES
from campaign.contracts.gatespecs import BUNDLE_COPY
from campaign.contracts.hashing import canonical_sha256
from campaign.contracts.kinds import require_kinds
from campaign.contracts.manifest import MANIFEST_BYTES, ManifestError, parse_manifest
from campaign.contracts.model import INPUT_FILE_BYTES, SERVED_ROLE
from campaign.contracts.modelrefs import draft_problems, model_refs, option_values
from campaign.contracts.nearest import did_you_mean, known_fields
from campaign.contracts.resolve import (
    FILE_REF,
    EffectiveLane,
    axis_difference,
    contract_docker_host,
    effective_lane,
    flatten_serving,
    implied_by_models,
    normalize_axis,
)
from campaign.contracts.schema import Contract, LaneFile, LaneModel, engine_is_local
from campaign.contracts.secretrefs import literal_secrets, refuse_secrets_in_text, secrets_anywhere
from campaign.contracts.yamlsafe import LocatedDocument, dotted, load_located, shown_path, without_gc
from campaign.errors import AxisError, ContractError
from campaign.fsutil import UnreadableFile, open_regular, read_text_bounded

__all__ = ["INPUT_FILE_BYTES", "LoadedContract", "dotted", "file_problem", "load_contract"]


@dataclass(frozen=True)
class LoadedContract:
    path: Path
    contract: Contract
    lanes: dict[str, EffectiveLane]
    document: LocatedDocument = field(repr=False)
    allowed_roots: list[Path] = field(default_factory=list)  # opted in by the runner (--allow-path)
    # a bundle's copy only: how fields of an older schema were read in today's terms (gatespecs.BUNDLE_COPY)
    read_as: list[str] = field(default_factory=list)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else self.base_dir / candidate

    @property
    def canonical(self) -> dict[str, Any]:
        """What the file says, normalized (units parsed, scalars typed); defaults are left out so a
        newer tool that adds a field does not change the hash of a contract that never used it."""
        return self.contract.model_dump(mode="json", exclude_unset=True)

    @property
    def canonical_sha256(self) -> str:
        return canonical_sha256(self.canonical)

    def referenced_places(self) -> list[tuple[tuple[Any, ...], str]]:
        """(YAML path, contract path) of every file whose bytes are part of the frozen contract: inputs,
        model manifests and lane files."""
        places: list[tuple[tuple[Any, ...], str]] = [(("inputs", name, "file"), spec.file)
                                                     for name, spec in self.contract.inputs.items()]
        for index, lane in enumerate(self.contract.lanes):
            manifest = self.lanes[lane.name].model.sha256_manifest
            if manifest:
                places.append((("lanes", index, "model", "sha256_manifest"), manifest))
        for where, file in self.written_files():
            places.append(((*where, "path"), file.path))
        return places

    def written_files(self) -> list[tuple[tuple[Any, ...], LaneFile]]:
        """Every pinned file as the contract writes it (path relative to the contract), with its YAML path:
        lane files, and each screen's inputs and script."""
        found: list[tuple[tuple[Any, ...], LaneFile]] = [
            (("lane_defaults", "files", i), f) for i, f in enumerate(self.contract.lane_defaults.files or [])]
        for index, lane in enumerate(self.contract.lanes):
            found += [(("lanes", index, "set", "files", i), f) for i, f in enumerate(lane.set.files or [])]
        for index, gate in enumerate(self.contract.gates):
            found += [(("gates", index, "files", i), f) for i, f in enumerate(getattr(gate, "files", None) or [])]
            if script := getattr(gate, "script", None):
                found.append((("gates", index, "script"), LaneFile(name="script", path=script.path,
                                                                    sha256=script.sha256)))
        return found

    def written_models(self) -> list[tuple[tuple[Any, ...], str, LaneModel]]:
        """Every pinned model (besides the served ones) as the contract writes it, with its YAML path and role:
        a lane's ``models`` and each lane's ``set.models`` (a null there removes a role: nothing to pin)."""
        found: list[tuple[tuple[Any, ...], str, LaneModel]] = [(("lane_defaults", "models", role), role, model)
                 for role, model in (self.contract.lane_defaults.models or {}).items()]
        for index, lane in enumerate(self.contract.lanes):
            found += [(("lanes", index, "set", "models", role), role, model)
                      for role, model in (lane.set.models or {}).items() if model is not None]
        return found

    def read_whole(self) -> set[str]:
        """Referenced files a window reads whole (input sets, model manifests), held to ``INPUT_FILE_BYTES``;
        the others (lane and screen files) are only hashed, streamed."""
        return {written for where, written in self.referenced_places()
                if where[0] == "inputs" or where[-1] == "sha256_manifest"}

    def referenced_files(self) -> dict[str, Path]:
        """Files whose bytes are part of the frozen contract (inputs, model manifests, lane files), by contract path."""
        return {written: self.resolve(written) for _, written in self.referenced_places()}

    def controls(self) -> list[EffectiveLane]:
        return [lane for lane in self.lanes.values() if lane.role == "control"]

    def candidates(self) -> list[EffectiveLane]:
        return [lane for lane in self.lanes.values() if lane.role == "candidate"]

    def gate_ids(self) -> list[str]:
        return [gate.id or gate.kind for gate in self.contract.gates]

    def serving_fields(self, lane: str) -> dict[str, Any]:
        """A lane as dotted keys, for `campaign diff --lanes` (what the one-axis check compares)."""
        return flatten_serving(self.lanes[lane])

    def error(self, path: tuple[Any, ...], message: str) -> ContractError:
        return ContractError(message, file=self.document.file, line=self.document.line_for(path), field=dotted(path))


ALLOW_PATH_ENV = "CAMPAIGN_ALLOW_PATH"


def allowed_roots_from_env() -> list[Path]:
    """Folders outside the contract's own tree that the runner opted in to (``--allow-path``, passed to
    child processes as CAMPAIGN_ALLOW_PATH, os.pathsep-separated)."""
    return [Path(p).resolve() for p in os.environ.get(ALLOW_PATH_ENV, "").split(os.pathsep) if p]


def load_contract(path: str | Path, *, check_files: bool = True, allow_paths: list[Path] | None = None,
                  bundle_copy: bool = False) -> LoadedContract:
    """The contract at ``path``, checked whole; every check is linear in lanes (10,000 lanes: a few
    seconds, ``benchmarks/contract_scale.py``). ``bundle_copy``: the copy in a signed bundle, judged again
    (rejudge, promote): a field an older schema had and today's replaced is read in today's terms and listed
    in ``read_as``, where a contract to run is refused naming its replacement."""
    with without_gc():  # tens of thousands of objects that make no cycles: see yamlsafe.without_gc
        return _load_contract(Path(path), check_files, allow_paths, bundle_copy)


def _load_contract(path: Path, check_files: bool, allow_paths: list[Path] | None, bundle_copy: bool) -> LoadedContract:
    require_kinds()
    document = load_located(path)
    read_as: list[str] = []
    try:
        contract = Contract.model_validate(document.data, context={BUNDLE_COPY: read_as} if bundle_copy else None)
    except ValidationError as exc:
        raise _located_error(document, exc) from None
    lanes: dict[str, EffectiveLane] = {}
    roots = allowed_roots_from_env() if allow_paths is None else [p.resolve() for p in allow_paths]
    loaded = LoadedContract(path=path, contract=contract, lanes=lanes, document=document, allowed_roots=roots,
                            read_as=read_as)
    _check_host(loaded)
    _check_names(loaded)
    defaults, absolute = contract.lane_defaults.model_dump(exclude_none=True), _absolute_paths(loaded)
    for index, lane in enumerate(contract.lanes):
        try:
            merged = effective_lane(contract, lane, defaults)
            if "files" in merged:  # a process engine reads them from wherever it runs: absolute paths
                merged["files"] = [{**file, "path": absolute(file["path"])} for file in merged["files"]]
            if "models" in merged:  # the same for models and their manifests (read back at run)
                merged["models"] = {role: {**model, "path": absolute(model["path"]),
                                           **({"sha256_manifest": absolute(model["sha256_manifest"])}
                                              if model.get("sha256_manifest") else {})}
                                    for role, model in merged["models"].items()}
            lanes[lane.name] = EffectiveLane.model_validate(merged)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ("lanes", index, *[p for p in first["loc"] if isinstance(p, (str, int))])
            raise loaded.error(where, f"{first['msg']} (after merging lane_defaults)") from None
        except ValueError as exc:
            raise loaded.error(("lanes", index, "set"), str(exc)) from None
        effective = lanes[lane.name]
        if effective.runtime == "process" and not effective.executable:
            raise loaded.error(("lanes", index), "a process lane needs `executable`")
        if effective.runtime == "docker" and not effective.image:
            raise loaded.error(("lanes", index), "a docker lane needs `image` pinned by digest")
    if check_files:  # a contract only described (diff, status, a bundle's copy) reads no file
        _check_confined(loaded)
        _check_files(loaded)
        _check_models(loaded)
        _check_served_models(loaded)
    if not bundle_copy:  # a bundle's copy is judged as it ran
        _check_model_forms(loaded, check_files)
    _check_literal_secrets(loaded)
    _check_file_refs(loaded)
    _check_model_refs(loaded, draft_flags=not bundle_copy)
    _check_roles(loaded)
    _check_incumbent(loaded)
    _check_gates(loaded)
    for index, gate in enumerate(loaded.contract.gates):
        gate.check_contract(loaded, index, check_files)
    _check_axes(loaded)
    return loaded


def _absolute_paths(loaded: LoadedContract) -> Callable[[str], str]:
    """A contract path as the absolute path it names, each worked out once (many lanes share a file)."""
    done: dict[str, str] = {}

    def absolute(written: str) -> str:
        if written not in done:
            done[written] = str(loaded.resolve(written))
        return done[written]

    return absolute


def _check_file_refs(loaded: LoadedContract) -> None:
    """Every ${file:NAME} in a lane's args and env names one of that lane's files, and is a whole value (an
    argument, the value after '=', an env value): a path built around it (``${file:map}.lora``) would make
    the engine read a file nobody pinned."""
    for index, lane in enumerate(loaded.contract.lanes):
        effective = loaded.lanes[lane.name]
        names = {f.name for f in effective.files}
        values = [arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg for arg in effective.args]
        for value in [*values, *effective.env.values()]:
            for name in FILE_REF.findall(value):
                if name not in names:
                    raise loaded.error(("lanes", index, "set"), f"${{file:{name}}} names no file of lane "
                                                                f"{lane.name!r} (its files: {sorted(names) or 'none'})")
                if not FILE_REF.fullmatch(value):
                    raise loaded.error(("lanes", index, "set"), f"{value!r}: ${{file:{name}}} must be a whole value "
                                       "(an argument, the value after '=', an env value): a path built around it "
                                       "names a file nobody pinned")


def _check_models(loaded: LoadedContract) -> None:
    """Each pinned model is what its pin says it is: a file opens as a regular file; a directory is a
    directory whose manifest is a readable ``sha256sum`` listing within its cap. Hashing is freeze's and
    run's (a model may be gigabytes); models are never copied into a bundle, so they may lie anywhere."""
    for where, _role, model in loaded.written_models():
        path = loaded.resolve(model.path)
        if model.sha256_manifest is None:
            try:
                with open_regular(path, what="model"):
                    pass
            except UnreadableFile as exc:
                why = file_problem(loaded, model.path, exc)
                raise loaded.error((*where, "path"), why + (" (a directory is pinned by sha256_manifest)"
                                                            if path.is_dir() else "")) from None
            continue
        if not path.is_dir():
            raise loaded.error((*where, "path"), f"{model.path!r} is not a directory (a sha256_manifest pins "
                                                 "a directory; a file is pinned by sha256 alone)")
        try:
            parse_manifest(read_text_bounded(loaded.resolve(model.sha256_manifest), MANIFEST_BYTES,
                                             what="model manifest"), model.sha256_manifest)
        except UnreadableFile as exc:
            raise loaded.error((*where, "sha256_manifest"), file_problem(loaded, model.sha256_manifest, exc)) from None
        except ManifestError as exc:
            raise loaded.error((*where, "sha256_manifest"), str(exc)) from None


def _check_served_models(loaded: LoadedContract) -> None:
    """The served model of each lane that runs on this machine (a process lane, or a docker lane of this
    box's engine; another box's paths are its pre-flight's) is what its pin says it can be, checked where the
    contract writes it: a folder for ``sha256_manifest``, a file that opens as a regular file for ``sha256``,
    either without a pin. A device, a FIFO, a socket, a symlink loop or a dangling link is refused here, never
    handed to an engine. A path not there at all is left to the run's pre-flight (a model fetched later)."""
    checked: set[tuple[Any, ...]] = set()
    for index, lane in enumerate(loaded.contract.lanes):
        effective = loaded.lanes[lane.name]
        if effective.runtime == "docker" and not engine_is_local(effective.docker_host):
            continue
        where = _served_model_place(lane, index)
        if where in checked:
            continue
        checked.add(where)
        model = effective.model
        path = loaded.resolve(model.path)
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) and not os.path.exists(path) and not _is_loop(path):
            raise loaded.error(where, f"{model.path!r}: a symlink to nothing (its target is gone)")
        folder = os.path.isdir(path)
        if model.sha256_manifest is not None or (folder and model.sha256 is None):
            if not folder:
                raise loaded.error(where, f"{model.path!r} is not a directory (a sha256_manifest pins a "
                                          "directory; a file is pinned by sha256 alone)")
            continue
        try:
            with open_regular(path, what="model"):
                pass
        except UnreadableFile as exc:
            raise loaded.error(where, file_problem(loaded, model.path, exc) + (
                " (a directory is pinned by sha256_manifest)" if folder else "")) from None


_FORM_WORDS = {"file": "a model file (a GGUF, pinned by sha256)",
               "directory": "a model folder (Hugging Face's layout, pinned by sha256_manifest)"}


def _check_model_forms(loaded: LoadedContract, check_files: bool) -> None:
    """Each lane's served model is of a form its engine serves (its adapter's ``facts.model_forms``): a GGUF
    handed to vLLM, or a folder to llama-server, fails only at boot, after the daily went down. The form is
    the pin's (``sha256_manifest``: a folder), else, where the files are read, the path's own."""
    for index, lane in enumerate(loaded.contract.lanes):
        effective = loaded.lanes[lane.name]
        model, forms = effective.model, ENGINES[effective.engine].model_forms
        path = loaded.resolve(model.path)
        if model.sha256_manifest is not None or model.sha256 is not None:
            form = "directory" if model.sha256_manifest is not None else "file"
        elif check_files and (effective.runtime != "docker" or engine_is_local(effective.docker_host)) \
                and os.path.exists(path):
            form = "directory" if os.path.isdir(path) else "file"
        else:
            continue
        if form not in forms:
            raise loaded.error(_served_model_place(lane, index), f"{model.path!r} is {_FORM_WORDS[form]}; engine {effective.engine} serves "
                                      f"{' or '.join(_FORM_WORDS[f] for f in forms)}")


def _served_model_place(lane: Any, index: int) -> tuple[Any, ...]:
    """Where a lane's served model is written: its own ``set.model``, else ``lane_defaults.model``."""
    return ("lanes", index, "set", "model", "path") if lane.set.model is not None else \
        ("lane_defaults", "model", "path")


def _is_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _arg_place(loaded: LoadedContract, index: int, kind: str, name: str) -> tuple[Any, ...]:
    """Where a lane's argument (or env variable) ``name`` is written: its ``set``, else ``lane_defaults``."""
    changes = getattr(loaded.contract.lanes[index].set, kind) or {}
    if name in changes:
        return ("lanes", index, "set", kind, name)
    defaults = getattr(loaded.contract.lane_defaults, kind) or ([] if kind == "args" else {})
    if kind == "env":
        return ("lane_defaults", "env", name) if name in defaults else ("lanes", index)
    return next((("lane_defaults", "args", i) for i, token in enumerate(defaults)
                 if token == name or token.startswith(name + "=")), ("lanes", index))


def _check_model_refs(loaded: LoadedContract, *, draft_flags: bool = True) -> None:
    """Every ${model:ROLE} names one of its lane's models and stands where it may (``modelrefs``), and every
    draft model an engine is handed is a pinned one: a drafter path written as such is refused, naming
    the option and the line. ``draft_flags`` False: a signed bundle's copy, measured before drafters had to
    be pinned, is judged again as it was run (its receipt says what it pinned)."""
    for index, lane in enumerate(loaded.contract.lanes):
        effective = loaded.lanes[lane.name]
        roles = set(effective.models)
        written = [("args", name, value) for name, value in option_values(effective.args) if value is not None]
        written += [("env", name, value) for name, value in effective.env.items()]
        for kind, name, value in written:
            try:
                refs = model_refs(value)
            except ValueError as exc:
                raise loaded.error(_arg_place(loaded, index, kind, name), str(exc)) from None
            for role, _key in refs:
                if role == SERVED_ROLE and role not in roles:
                    raise loaded.error(_arg_place(loaded, index, kind, name),
                                       f"${{model:{role}}}: the served model is the lane's `model:`, which the engine "
                                       "adapter passes itself; `models:` holds the others")
                if role not in roles:
                    raise loaded.error(_arg_place(loaded, index, kind, name),
                                       f"${{model:{role}}} names no model of lane {lane.name!r} (its models: "
                                       f"{', '.join(sorted(roles)) or 'none'})")
        for kind, name, why in draft_problems(effective.engine, effective.args, effective.env, roles) if draft_flags \
                else []:
            raise loaded.error(_arg_place(loaded, index, kind, name), why)


def _check_confined(loaded: LoadedContract) -> None:
    """Every file whose bytes a window reads into its bundle (inputs, model manifests) lies inside the
    contract's own folder tree, or under a root the runner allowed: a contract from someone else cannot
    make the runner copy /etc/hostname into a bundle it signs and publishes. Links are followed first."""
    inside, read_whole = [loaded.base_dir.resolve(), *loaded.allowed_roots], loaded.read_whole()
    for where, written in loaded.referenced_places():
        try:
            target = loaded.resolve(written).resolve()
        except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte: open_regular words it
            target = _unreadable(loaded, where, written, "input file" if written in read_whole else "file")
        if not any(target.is_relative_to(root) for root in inside):
            folder = shown_path(loaded.base_dir.resolve())
            raise loaded.error(where, f"{written!r} is outside the contract's folder ({folder}); "
                                      "a runner that trusts it says so: --allow-path DIR")


def file_problem(loaded: LoadedContract, written: str, exc: UnreadableFile) -> str:
    """What is wrong with a file the contract names, in words about the user's own path."""
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno == errno.ENOENT:
        if os.path.islink(loaded.resolve(written)):  # the link is there, what it names is not
            return f"{written!r}: a symlink to nothing (its target is gone)"
        return f"file not found: {shown_path(loaded.resolve(written))}"
    return f"{written!r}: {exc.reason}"


def _unreadable(loaded: LoadedContract, where: tuple[Any, ...], written: str, what: str) -> Path:
    """The located error for a path that cannot be opened as a regular file (or the path, if it can)."""
    try:
        with open_regular(loaded.resolve(written), what=what):
            return loaded.resolve(written)
    except UnreadableFile as exc:
        raise loaded.error(where, file_problem(loaded, written, exc)) from None


def _check_files(loaded: LoadedContract) -> None:
    """Every referenced file opens as a regular file on an ordinary file system: a directory, a FIFO, a
    device, a symlink loop or /proc/self/environ is refused by what it is (whatever --allow-path says),
    before anything reads it; a file read whole is within its cap."""
    read_whole = loaded.read_whole()
    seen: set[str] = set()
    for where, written in loaded.referenced_places():
        if written in seen:
            continue
        seen.add(written)
        what = "input file" if written in read_whole else "file"
        try:
            with open_regular(loaded.resolve(written), what=what) as fd:
                size = os.fstat(fd).st_size
        except UnreadableFile as exc:
            raise loaded.error(where, file_problem(loaded, written, exc)) from None
        if written in read_whole and size > INPUT_FILE_BYTES:
            raise loaded.error(where, f"{written!r} is {size:,} bytes, over the {INPUT_FILE_BYTES:,}-byte cap for "
                                      "a file read whole (an input set, a model manifest)")


def _check_names(loaded: LoadedContract) -> None:
    """Lane names, input names and gate ids become folder and file names in a bundle: two that differ only
    in case are one on a case-insensitive file system (macOS, Windows), so they are refused."""
    contract = loaded.contract
    groups: list[tuple[str, list[tuple[tuple[Any, ...], str]]]] = [
        ("lane", [(("lanes", i, "name"), lane.name) for i, lane in enumerate(contract.lanes)]),
        ("input set", [(("inputs", name), name) for name in contract.inputs]),
        ("gate id", [(("gates", i) if gate.id is None else ("gates", i, "id"), gate.id or gate.kind)
                     for i, gate in enumerate(contract.gates)])]
    for what, names in groups:
        first: dict[str, tuple[tuple[Any, ...], str]] = {}
        for where, name in names:
            earlier = first.setdefault(name.casefold(), (where, name))
            if earlier[0] == where:
                continue
            if earlier[1] == name:
                hint = ": give each gate an `id`" if what == "gate id" else ""
                raise loaded.error(where, f"duplicate {what} {name!r}{hint}")
            raise loaded.error(where, f"{what} {name!r} differs from {what} {earlier[1]!r} (line "
                                      f"{loaded.document.line_for(earlier[0])}) only in case: names become file "
                                      "names in a bundle, and a case-insensitive file system makes them one")


def _check_host(loaded: LoadedContract) -> None:
    try:
        contract_docker_host(loaded.contract)
    except (ValueError, ValidationError) as exc:
        message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise loaded.error(("host",), message) from None


def _check_literal_secrets(loaded: LoadedContract) -> None:
    """A credential written into a contract would be frozen into it and copied into every bundle."""
    places: list[tuple[tuple[Any, ...], dict[str, Any], list[tuple[str, Any]]]] = []
    defaults = loaded.contract.lane_defaults
    places.append((("lane_defaults",), dict(defaults.env or {}), parse_args(defaults.args or [])))
    for index, lane in enumerate(loaded.contract.lanes):
        places.append((("lanes", index, "set"), dict(lane.set.env or {}), list((lane.set.args or {}).items())))
    for where, why in secrets_anywhere(loaded.document.data):
        raise loaded.error(where, f"{why}: write \"${{env:NAME}}\" and set NAME in the runner's environment, so "
                                  "the secret is neither frozen nor copied into bundles")
    for where, env, args in places:
        pairs = [(k, None if isinstance(v, bool) else v) for k, v in args]
        for place, why in literal_secrets(env, pairs):
            kind, name = place.split(".", 1)
            raise loaded.error((*where, kind, name), f"{why}: write \"${{env:NAME}}\" and set NAME in the "
                                                     "runner's environment, so the secret is neither frozen nor "
                                                     "copied into bundles")
    # the file's own text too, comments included: its bytes are what freeze pins and bundles copy
    refuse_secrets_in_text(loaded.document.text, str(loaded.path), loaded.document.root)


def _located_error(document: LocatedDocument, exc: ValidationError) -> ContractError:
    errors = exc.errors()
    first = errors[0]
    path = _document_path(document.data, tuple(first["loc"]))
    if first["type"].endswith("_type"):  # a union's members each report; the one the value's type fits says why
        first = next((error for error in errors[1:] if not error["type"].endswith("_type")
                      and _document_path(document.data, tuple(error["loc"])) == path), first)
    message = first["msg"]
    if first["type"] == "extra_forbidden":  # with the nearest name the place takes, if one is close
        message = "unknown field" + did_you_mean(first["loc"][-1], known_fields(Contract, tuple(first["loc"][:-1])))
    path = _document_path(document.data, tuple(first["loc"]))
    line = document.line_for(path)
    node = document.node_at(path)
    if first["type"] == "boolean_number" and isinstance(node, yaml.ScalarNode):
        message = message.replace(str(first["ctx"]["value"]), node.value, 1)  # `yes` as written, not `true`
    if first["loc"] and first["loc"][-1] == "[key]":  # a dict key failed: the mapping is the field
        *parent, name = _document_path(document.data, tuple(first["loc"][:-1]))
        path = tuple(parent)
        if path and path[-1] == "env":
            message = (f"{name!r} is not an environment variable name (letters, digits and '_', not starting "
                       "with a digit: no '=', newline or empty name)")
        else:  # a name, which becomes a file name
            message = f"name {name!r} is not an identifier (letters, digits, '_', '.', '-'; it names files)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return ContractError(message + more, file=document.file, line=line, field=dotted(path))


def _document_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop the union tags pydantic inserts (``gates.0.greedy.repeats`` -> ``gates.0.repeats``; a scalar
    has no parts: ``lane_defaults.gpus.str`` -> ``lane_defaults.gpus``)."""
    kept: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part not in node and part == node.get("kind"):
            continue
        if kept and node is not None and not isinstance(node, (dict, list)):
            continue
        kept.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(kept)


def _check_roles(loaded: LoadedContract) -> None:
    contract = loaded.contract
    position = {lane.name: index for index, lane in enumerate(contract.lanes)}
    for index, lane in enumerate(contract.lanes):
        if lane.aa and lane.role != "candidate":
            raise loaded.error(("lanes", index, "aa"), "an A/A lane is a candidate (role: candidate): the control "
                                                       "again, compared with it")
    control_names = [lane.name for lane in contract.lanes if lane.role == "control"]
    if not control_names:
        raise loaded.error(("lanes",), "at least one lane must have role: control")
    for index, lane in enumerate(contract.lanes):
        if lane.role == "control":
            if lane.axis:
                raise loaded.error(("lanes", index, "axis"), "a control lane has no axis")
            if lane.control:
                raise loaded.error(("lanes", index, "control"), "a control lane is not compared with another")
            continue
        if lane.control is None and len(control_names) > 1:
            raise loaded.error(("lanes", index), f"several controls exist ({', '.join(control_names)}): "
                                                 "name this candidate's `control`")
        control = lane.control or control_names[0]
        if control not in loaded.lanes:
            raise loaded.error(("lanes", index, "control"), f"no lane named {control!r}")
        if contract.lanes[position[control]].role != "control":
            raise loaded.error(("lanes", index, "control"), f"lane {control!r} is not a control")
        if lane.aa and (lane.axis or lane.set.model_dump(exclude_defaults=True)):
            raise loaded.error(("lanes", index, "axis" if lane.axis else "set"),
                               "an A/A lane is the control again: it declares no `axis` and sets nothing")
        if not lane.axis and not lane.aa:
            raise loaded.error(("lanes", index), "a candidate must declare its `axis` (or be the control again: "
                                                 "`aa: true`)")
        if position[control] > index:
            raise loaded.error(("lanes", index), f"control {control!r} must come before its candidate "
                                                 "(control runs first)")
        loaded.lanes[lane.name] = loaded.lanes[lane.name].model_copy(update={"control": control})


def _check_incumbent(loaded: LoadedContract) -> None:
    incumbent = loaded.contract.incumbent
    if incumbent is None:
        return
    if loaded.contract.failsafe is None:
        raise loaded.error(("incumbent",), "an incumbent is only stopped behind a failsafe: add `failsafe`")
    if incumbent.runtime == "process" and not incumbent.pidfile:
        raise loaded.error(("incumbent",), "a process incumbent needs `pidfile`")
    if incumbent.runtime == "docker" and not incumbent.container:
        raise loaded.error(("incumbent",), "a docker incumbent needs `container`")
    if incumbent.lane is not None and incumbent.lane not in loaded.lanes:
        raise loaded.error(("incumbent", "lane"), f"no lane named {incumbent.lane!r}")


def _check_gates(loaded: LoadedContract) -> None:
    contract = loaded.contract
    seen = set(loaded.gate_ids())  # unique, also in case (_check_names)
    for index, gate in enumerate(contract.gates):
        input_name = getattr(gate, "input", None)
        if input_name is not None and input_name not in contract.inputs:
            raise loaded.error(("gates", index, "input"), f"no input set named {input_name!r}")
        references = getattr(gate, "references", None)
        if references is not None and references not in contract.inputs:
            raise loaded.error(("gates", index, "references"), f"no input set named {references!r}")
        oracle = getattr(gate, "oracle", None)
        if oracle is not None and oracle not in loaded.lanes:
            raise loaded.error(("gates", index, "oracle"), f"no lane named {oracle!r}")
    if contract.promotion:
        for index, required in enumerate(contract.promotion.requires):
            if required not in seen:
                raise loaded.error(("promotion", "requires", index), f"no gate with id {required!r}")


def _check_axes(loaded: LoadedContract) -> None:
    flat: dict[str, dict[str, Any]] = {}  # each control flattened once, however many candidates it has
    for index, lane in enumerate(loaded.contract.lanes):
        if lane.role != "candidate":
            continue
        effective = loaded.lanes[lane.name]
        control = loaded.lanes[effective.control or ""]
        if control.name not in flat:
            flat[control.name] = flatten_serving(control)
        computed = axis_difference(control, effective, flat[control.name])
        declared = {normalize_axis(entry) for entry in lane.axis}
        for key in implied_by_models(control, effective, set(computed), declared):
            del computed[key]  # the arguments that hand an added (or removed) model to the engine
        if set(computed) != declared:
            undeclared = sorted(set(computed) - declared)
            unchanged = sorted(declared - set(computed))
            parts = []
            if undeclared:
                parts.append("changed but not declared: " + ", ".join(
                    f"{k} ({computed[k][0]!r} -> {computed[k][1]!r})" for k in undeclared))
            if unchanged:
                parts.append("declared but unchanged: " + ", ".join(unchanged))
            line = loaded.document.line_for(("lanes", index, "axis"))
            raise AxisError(f"{loaded.document.file}:{line}: lanes[{index}].axis: lane {lane.name!r} vs control "
                            f"{control.name!r}: " + "; ".join(parts))
