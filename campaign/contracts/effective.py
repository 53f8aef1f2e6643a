"""The effective contract: every field resolved, defaults included, as one tool version resolves them.

The file a user freezes says only what they wrote; the rules a window is judged by also hold every default
the tool fills in. Freezing records this form beside the canonical one, a bundle carries the form its
window was judged by (``contract/effective.json``), and whatever judges a bundle again (``rejudge``,
``promote``) reads the rules from there, never from the defaults of the tool that happens to run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from campaign.contracts.hashing import canonical_sha256
from campaign.errors import InputError
from campaign.fsutil import load_json_strict

if TYPE_CHECKING:
    from campaign.contracts.load import LoadedContract

__all__ = ["ADDED_AS_BEFORE", "EFFECTIVE_FILE", "EFFECTIVE_SCHEMA", "LANE_TOOL_DEFAULTS", "contract_rules",
           "effective_contract", "effective_document", "read_document", "recorded_rules", "with_rules"]

EFFECTIVE_FILE = "effective.json"
EFFECTIVE_SCHEMA = "campaign.effective/v1"


# Beside the contract's own fields: the defaults a lane took from the tool itself when neither lane_defaults
# nor its `set` gave the field (its host, readiness, boot_log, stop, network, ...). lane_defaults and `set` are
# dumped whole with the contract, nested defaults included; these are the only ones applied later, when each
# lane is merged.
LANE_TOOL_DEFAULTS = "lane_tool_defaults"

# Fields added since effective contracts were first recorded, with the value that does what the tool did
# before them. A frozen record without one is judged with that value (never this tool's default), and it is a
# change of the frozen rules only where this tool's default differs from it.
ADDED_AS_BEFORE: dict[str, Any] = {"aa": False, "instrument": "generation", "fail_levels": "each",
                                   "futility": "reach", "min_conditional_power": 0.05, "host_quiet_wait_s": 0.0}


def effective_contract(loaded: LoadedContract) -> dict[str, Any]:
    """The contract with every default resolved by this tool: the rules a window of it is judged by. Linear in
    lanes and cheap: a lane's tool defaults are the same for every lane that takes them, so each field is
    recorded once (from the first lane that took it)."""
    effective = loaded.contract.model_dump(mode="json")
    lanes = list(loaded.lanes.values())
    took: dict[str, Any] = {}
    for name in (type(lanes[0]).model_fields if lanes else {}):
        holder = next((lane for lane in lanes if name not in lane.model_fields_set), None)
        if holder is not None:
            took[name] = holder.model_dump(mode="json", include={name})[name]
    effective[LANE_TOOL_DEFAULTS] = took
    return effective


def effective_document(loaded: LoadedContract, tool_version: str, accepted: list[str]) -> dict[str, Any]:
    """``contract/effective.json``: the rules this window is judged by, the tool that resolved them, and
    the differences from the frozen rules it ran under (``--accept-tool-defaults``), if any."""
    effective = effective_contract(loaded)
    return {"schema": EFFECTIVE_SCHEMA, "tool_version": tool_version, "effective_sha256": canonical_sha256(effective),
            "accepted_tool_defaults": accepted, "contract": effective}


def contract_rules(effective: dict[str, Any]) -> dict[str, Any]:
    """An effective contract's own fields, without the lanes' tool defaults: what judges a bundle again, whose
    lanes are read as they ran (their spec.json, every field set)."""
    return {k: v for k, v in effective.items() if k != LANE_TOOL_DEFAULTS}


def with_rules(loaded: LoadedContract, rules: dict[str, Any], where: Path) -> LoadedContract:
    """``loaded`` judged by ``rules`` (an effective contract): every field the file left out takes the value
    those rules resolved it to, whatever this tool's default is; what the file wrote stays as written (so its
    canonical form, its hash and every check of what was written are unchanged). A field this tool added
    since takes the value that does what the tool before it did (``ADDED_AS_BEFORE``), else its own default;
    a recorded value this tool cannot read is an InputError naming ``where``."""
    contract = loaded.contract.model_copy(deep=True)
    _overlay(contract, contract_rules(rules), where, "")
    return dataclasses.replace(loaded, contract=contract)


def _overlay(model: BaseModel, frozen: dict[str, Any], where: Path, path: str) -> None:
    for name, info in type(model).model_fields.items():
        if name not in frozen:
            if name in ADDED_AS_BEFORE and name not in model.model_fields_set:
                # added since these rules were recorded: judged as the tool that recorded them judged
                model.__dict__[name] = _as_before_value(info, name)
            continue
        at = f"{path}.{name}" if path else name
        if name in model.model_fields_set:  # written: kept, its nested models filled the same way
            _overlay_value(getattr(model, name), frozen[name], where, at)
            continue
        try:
            shape: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            value = TypeAdapter(shape).validate_python(frozen[name])
        except ValidationError as exc:
            raise InputError(f"{where}: the rules it holds are not ones this tool can apply: {at}: "
                             f"{exc.errors()[0]['msg']}") from None
        _as_before(value, frozen[name])
        model.__dict__[name] = value  # not through validation of the whole model: it is not "written"


def _as_before_value(info: Any, name: str) -> Any:
    shape: Any = info.annotation
    return TypeAdapter(shape).validate_python(ADDED_AS_BEFORE[name])


def _as_before(value: Any, frozen: Any) -> None:
    """A model built whole from recorded rules: the fields added since take their as-before values, not
    this tool's defaults."""
    if isinstance(value, BaseModel) and isinstance(frozen, dict):
        for name, info in type(value).model_fields.items():
            if name not in frozen and name in ADDED_AS_BEFORE:
                value.__dict__[name] = _as_before_value(info, name)
            elif name in frozen:
                _as_before(getattr(value, name), frozen[name])
    elif isinstance(value, list) and isinstance(frozen, list) and len(value) == len(frozen):
        for item, old in zip(value, frozen, strict=True):
            _as_before(item, old)
    elif isinstance(value, dict) and isinstance(frozen, dict):
        for key, item in value.items():
            if key in frozen:
                _as_before(item, frozen[key])


def _overlay_value(value: Any, frozen: Any, where: Path, path: str) -> None:
    if isinstance(value, BaseModel) and isinstance(frozen, dict):
        _overlay(value, frozen, where, path)
    elif isinstance(value, list) and isinstance(frozen, list) and len(value) == len(frozen):
        for index, (item, old) in enumerate(zip(value, frozen, strict=True)):
            _overlay_value(item, old, where, f"{path}[{index}]")
    elif isinstance(value, dict) and isinstance(frozen, dict):
        for key, item in value.items():
            if key in frozen:
                _overlay_value(item, frozen[key], where, f"{path}.{key}")


def read_document(folder: Path) -> dict[str, Any] | None:
    """A bundle's ``contract/effective.json`` (``folder`` is its contract/), checked to be one; None when the
    bundle was written before those were."""
    path = folder / EFFECTIVE_FILE
    if not path.exists():
        return None
    document = load_json_strict(path, what="effective contract")
    if not isinstance(document, dict) or not isinstance(document.get("contract"), dict):
        raise InputError(f"{path}: not an effective contract (no `contract` object)")
    return document


def recorded_rules(folder: Path, freeze_record: dict[str, Any]) -> tuple[dict[str, Any] | None, Path]:
    """The effective contract a bundle's window was judged by: its ``effective.json``, else (a bundle written
    before those were) the freeze record's; None when neither holds one (judged by this tool's defaults)."""
    document = read_document(folder)
    if document is not None:
        return document["contract"], folder / EFFECTIVE_FILE
    frozen = freeze_record.get("effective")
    return (frozen, folder / "freeze.json") if isinstance(frozen, dict) else (None, folder / EFFECTIVE_FILE)
