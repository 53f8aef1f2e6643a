"""Freezing: record the contract's canonical hash, its effective form and every referenced file's sha256, signed.

A frozen contract never changes; ``check_frozen`` refuses a run whose contract or any referenced file
differs from its freeze record, and says what changed. What the file says is not all that judges a window:
every field it leaves out takes the tool's default, and a newer tool may have other defaults. So the record
also holds the effective contract (every default resolved, as the freezing tool had them), and a tool whose
defaults would judge the same file by other rules refuses to run it unless told to accept them
(``--accept-tool-defaults``), which the bundle then records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from campaign import __version__
from campaign.contracts.effective import ADDED_AS_BEFORE, effective_contract
from campaign.contracts.hashing import canonical_json, canonical_sha256, sha256_bytes
from campaign.contracts.load import LoadedContract, file_problem
from campaign.contracts.manifest import ManifestError, manifest_problems, read_manifest, render_manifest, tree_digests
from campaign.contracts.model import INPUT_FILE_BYTES, LANE_FILE_BYTES
from campaign.contracts.yamlsafe import MAX_CONTRACT_BYTES, without_gc
from campaign.errors import FrozenChanged, InputError
from campaign.fsutil import (
    UnreadableFile,
    atomic_write_bytes,
    atomic_write_json,
    hash_regular_file,
    load_json_strict,
    read_bounded,
)
from campaign.signing import SigningKey, TrustedKeys

__all__ = ["FREEZE_SCHEMA", "ToolDefaultsChanged", "check_frozen", "default_record_path", "directory_manifest",
           "freeze", "freeze_record", "tool_default_changes"]

FREEZE_SCHEMA = "campaign.freeze/v1"


class ToolDefaultsChanged(FrozenChanged):
    """The contract is as frozen, but this tool's defaults would judge it by other rules."""


def default_record_path(contract_path: Path) -> Path:
    return contract_path.with_name(contract_path.stem + ".freeze.json")


def _file_digests(loaded: LoadedContract) -> dict[str, str]:
    """sha256 of every referenced file, streamed through fsutil's reader (a FIFO, a device, a directory, a
    loop or a kernel file is refused by what it is); a file read whole is within its cap. An error is the
    contract's, at the line that names the file."""
    read_whole = loaded.read_whole()
    places: dict[str, tuple[Any, ...]] = {}
    for where, written in loaded.referenced_places():
        places.setdefault(written, where)
    files: dict[str, str] = {}
    for written in sorted(places):
        try:
            files[written] = hash_regular_file(loaded.resolve(written),
                                               what="input file" if written in read_whole else "file",
                                               limit=INPUT_FILE_BYTES if written in read_whole else LANE_FILE_BYTES)
        except UnreadableFile as exc:
            raise loaded.error(places[written], file_problem(loaded, written, exc)) from None
    return files


def directory_manifest(directory: Path) -> tuple[str, str, int]:
    """What pins a directory model (``campaign manifest``): its ``sha256sum`` manifest text, that text's
    sha256 (the pin a contract writes) and its number of files. A directory that cannot be pinned (a link
    in it, a special file, too many files) is an InputError naming the path."""
    try:
        digests = tree_digests(directory)
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    text = render_manifest(digests)
    return text, sha256_bytes(text.encode()), len(digests)


def _model_digests(loaded: LoadedContract) -> dict[str, str]:
    """Each pinned model's digest by the path the contract writes (a file's own; a directory's manifest's),
    checked against its pin; a directory's files are hashed and checked against its manifest (no file
    missing, changed or unlisted). Run calls this again (``check_frozen``): the models are re-hashed."""
    digests: dict[str, str] = {}
    walked: set[tuple[str, str]] = set()  # a directory pinned by one manifest in several places: walked once
    for where, _role, model in loaded.written_models():
        written = model.sha256_manifest or model.path
        try:
            if written not in digests:
                digests[written] = hash_regular_file(loaded.resolve(written), what="model manifest" if
                                                     model.sha256_manifest else "model")
            if digests[written] != model.sha256:  # before the walk: a wrong pin costs no gigabytes of hashing
                raise loaded.error((*where, "sha256"), f"{written} has sha256 {digests[written]}, not the pinned "
                                                       f"{model.sha256}")
            if model.sha256_manifest is not None and (model.path, written) not in walked:
                walked.add((model.path, written))
                problems = manifest_problems(read_manifest(loaded.resolve(model.sha256_manifest)),
                                             tree_digests(loaded.resolve(model.path)))
                if problems:
                    raise loaded.error((*where, "path"), f"{model.path} is not the directory "
                                                         f"{model.sha256_manifest} lists: {problems}")
        except UnreadableFile as exc:
            raise loaded.error((*where, "sha256_manifest" if model.sha256_manifest else "path"),
                               file_problem(loaded, written, exc)) from None
        except ManifestError as exc:
            raise loaded.error((*where, "path"), str(exc)) from None
    return digests


def freeze_record(loaded: LoadedContract) -> dict[str, Any]:
    files = {**_model_digests(loaded), **_file_digests(loaded)}
    for input_name, spec in loaded.contract.inputs.items():
        if spec.sha256 and files[spec.file] != spec.sha256:
            raise loaded.error(("inputs", input_name, "sha256"),
                               f"{spec.file} has sha256 {files[spec.file]}, not the pinned {spec.sha256}")
    for where, file in loaded.written_files():
        if files[file.path] != file.sha256:
            raise loaded.error((*where, "sha256"), f"{file.path} has sha256 {files[file.path]}, not the pinned "
                                                   f"{file.sha256}")
    canonical = loaded.canonical  # dumped once, for the hash and the record
    effective = effective_contract(loaded)
    return {
        "schema": FREEZE_SCHEMA,
        "contract_file": loaded.path.name,
        "contract_sha256": loaded.document.sha256 or sha256_bytes(
            read_bounded(loaded.path, MAX_CONTRACT_BYTES, what="contract")),  # the bytes read at load
        "canonical_sha256": canonical_sha256(canonical),
        "canonical": canonical,
        # what the file leaves out, as this tool resolves it: a later tool with other defaults is caught
        "effective_sha256": canonical_sha256(effective),
        "effective": effective,
        "files": files,
        "tool_version": __version__,
    }


def _write_record(path: Path, body: dict[str, Any]) -> None:
    """The record as indented JSON; orjson writes 10,000 lanes' record in milliseconds where the stdlib's
    indenting encoder (pure Python) takes seconds. Only the layout of some floats differs (1e-05 is
    0.00001): the signature is over the canonical JSON, never these bytes."""
    try:
        data = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    except (orjson.JSONEncodeError, TypeError):  # what orjson refuses (an integer past 64 bits) the stdlib writes
        atomic_write_json(path, body)
        return
    atomic_write_bytes(path, data)


@without_gc()  # a record of 10,000 lanes is a million small objects that make no cycles
def freeze(loaded: LoadedContract, key: SigningKey, record_path: Path | None = None) -> tuple[Path, bool]:
    """Write the signed freeze record; returns (path, created). Freezing an unchanged contract again
    keeps the first record (its time is when the rules were fixed); a changed one is refused."""
    record_path = record_path or default_record_path(loaded.path)
    body = freeze_record(loaded)
    if record_path.exists():
        existing = load_json_strict(record_path)
        previous = {k: existing.get(k) for k in ("canonical_sha256", "contract_sha256", "files")}
        if previous == {k: body[k] for k in previous}:
            return record_path, False
        raise FrozenChanged(f"{record_path}: {loaded.path.name} was already frozen with other content "
                            f"({describe_changes(existing, body)}); a frozen contract never changes: "
                            "give the new one a new version and freeze it to a new record")
    body["frozen_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body["signature"] = {"keyid": key.keyid, "sig": key.sign(canonical_json(body))}
    _write_record(record_path, body)
    return record_path, True


@without_gc()
def check_frozen(loaded: LoadedContract, record_path: Path, trusted: TrustedKeys, *,
                 accept_tool_defaults: bool = False) -> dict[str, Any]:
    """The verified freeze record, or ``FrozenChanged`` naming what differs. A contract whose effective rules
    under this tool differ from the frozen ones is ``ToolDefaultsChanged`` unless ``accept_tool_defaults``;
    then the record comes back with ``accepted_tool_defaults`` (the differences, one line each) added, for
    the bundle to carry."""
    if not record_path.exists():
        raise FrozenChanged(f"{loaded.path}: not frozen (no {record_path}); run `campaign freeze {loaded.path}`")
    record = load_json_strict(record_path)
    if not isinstance(record, dict) or not isinstance(record.get("signature") or {}, dict):
        raise FrozenChanged(f"{record_path}: not a {FREEZE_SCHEMA} freeze record")
    signature = record.get("signature") or {}
    unsigned = {k: v for k, v in record.items() if k != "signature"}
    if record.get("schema") != FREEZE_SCHEMA:
        raise FrozenChanged(f"{record_path}: not a {FREEZE_SCHEMA} freeze record")
    if not trusted.verify(str(signature.get("keyid")), str(signature.get("sig")), canonical_json(unsigned)):
        raise FrozenChanged(f"{record_path}: freeze record signature is invalid or by an untrusted key "
                            f"({signature.get('keyid', 'no key id')})")
    current = freeze_record(loaded)
    changes = describe_changes(record, current)
    if changes:
        raise FrozenChanged(f"{loaded.path}: changed since freezing at {record.get('frozen_at')}: {changes}")
    same = record.get("effective_sha256") == current["effective_sha256"]  # the walk only when they differ
    moved = [] if same else tool_default_changes(record.get("effective"), current["effective"],
                                                 str(record.get("tool_version", "unknown")))
    if moved and not accept_tool_defaults:
        more = f" (and {len(moved) - 3} more)" if len(moved) > 3 else ""
        lead = (f"this tool ({__version__}) would judge it by other rules than were frozen at {record.get('frozen_at')} "
                f"(tool {record.get('tool_version', 'unknown')})" if isinstance(record.get("effective"), dict) else
                f"it was frozen at {record.get('frozen_at')} before freeze records held the rules it is judged by")
        raise ToolDefaultsChanged(
            f"{loaded.path}: {lead}: {'; '.join(moved[:3])}{more}; freeze it as a new version (a new `version:`; "
            "the same one keeps its record), or run with --accept-tool-defaults (recorded in the bundle)")
    return {**record, "accepted_tool_defaults": moved} if moved else record


def tool_default_changes(frozen: Any, effective: dict[str, Any], frozen_by: str = "unknown") -> list[str]:
    """Each field whose ``frozen`` effective value differs from ``effective`` (this tool's), as
    ``gates[speed].rule.max_control_drift: frozen 0.1, this tool 0.25``. Nothing frozen (a record made by tool
    ``frozen_by`` before effective contracts were) has nothing to compare: that is one difference, saying so."""
    if not isinstance(frozen, dict):
        return [f"the freeze record (tool {frozen_by}) holds no effective contract, "
                "so every field the file leaves out takes this tool's default"]
    return [f"{path}: frozen {_shown_value(old)}, this tool {_shown_value(new)}"
            for path, old, new in _changed_values(frozen, effective)]


_ABSENT = object()


def _shown_value(value: Any) -> str:
    if value is _ABSENT:
        return "(no such field)"
    text = canonical_json(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _item_key(item: Any, index: int) -> str:
    """A list item's name in a path: a gate's id (its kind when it has none: gates[speed]), a lane's name,
    else its index."""
    if isinstance(item, dict):
        for key in ("id", "name", "kind"):
            if isinstance(item.get(key), str):
                return item[key]
    return str(index)


def _changed_values(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += _changed_values(old.get(key, _ABSENT), new.get(key, _ABSENT),
                                   f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += _changed_values(a, b, f"{prefix}[{_item_key(a, i)}]")
        return out
    if old is _ABSENT and (new in (None, [], {}) or ADDED_AS_BEFORE.get(prefix.rsplit(".", 1)[-1], _ABSENT) == new):
        return []  # a field this tool added since, off by default: it changes no rule the contract was frozen with
    return [] if old == new else [(prefix or "<root>", old, new)]


def describe_changes(frozen: dict[str, Any], current: dict[str, Any]) -> str:
    parts = []
    if frozen.get("canonical_sha256") != current["canonical_sha256"]:
        fields = _changed_fields(frozen.get("canonical", {}), current["canonical"])
        parts.append("contract fields " + ", ".join(fields[:8]) + (" ..." if len(fields) > 8 else ""))
    elif frozen.get("contract_sha256") != current["contract_sha256"]:
        parts.append(f"contract file bytes of {current['contract_file']} (comments or layout)")
    old_files, new_files = frozen.get("files", {}), current["files"]
    for name in sorted(set(old_files) | set(new_files)):
        if name not in new_files:
            parts.append(f"file {name} no longer referenced")
        elif name not in old_files:
            parts.append(f"file {name} newly referenced")
        elif old_files[name] != new_files[name]:
            parts.append(f"file {name} (sha256 {old_files[name][:12]}... -> {new_files[name][:12]}...)")
    return "; ".join(parts)


def _changed_fields(old: Any, new: Any) -> list[str]:
    return [path for path, _old, _new in _changed_values(old, new)]
