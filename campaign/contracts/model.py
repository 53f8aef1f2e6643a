"""The one strict config every contract model shares, and the field types more than one model uses."""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["ENV_NAME_PATTERN", "FILE_REF", "INPUT_FILE_BYTES", "FILES_MOUNT_ROOT", "MAX_CONTEXT_TOKENS", "MAX_COUNT",
           "MAX_SEED", "MODEL_REF", "MODELS_MOUNT_ROOT", "MODELS_SINCE", "NAME_PATTERN", "SERVED_ROLE", "LaneFile",
           "LaneModel", "SHA256_PATTERN", "ContractJsonSchema", "CountRule", "EnvName", "StrDict", "StrList",
           "StrictModel", "parse_fraction", "stringify_scalars", "takes", "unique_file_names", "valid_regexes"]

# names become file names in the bundle: identifiers, never paths (no '@', which visit keys use)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# an environment variable's name as a shell and `${env:NAME}` write it: never empty, no '=' (it would
# split into another name and value), no newline or NUL, no '.' (axis keys are env.NAME)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN)]

# Bounds on numbers a contract states (see docs/contracts.md's table of what the tool refuses):
MAX_SEED = 2**32 - 1  # a request seed every engine takes (llama.cpp and vLLM read an unsigned 32-bit int)
MAX_CONTEXT_TOKENS = 1 << 24  # 16M tokens: past every model's context (the longest today is 10M)
MAX_COUNT = 1_000_000  # k/n count rules, tolerated errors, replay subsampling: a million is past any real gate
# Files a window reads whole into memory (input sets, model manifests): the gates' reader has the same cap
# (gates.common.inputs); a hundred 128k-token prompts are about 50 MB.
INPUT_FILE_BYTES = 128 << 20
# Lane and screen files (a slot map, a chat template, a hook, a screen's script and data) are only hashed,
# streamed, at freeze, at run and read back inside each lane: held to this cap, so that a huge or sparse file
# is refused at once by its size, not after minutes of hashing. What is larger is a model (`models:`, pinned
# by sha256 or a manifest), which has no cap.
LANE_FILE_BYTES = 1 << 30

_BOOLEAN_AS_NUMBER = ("a boolean where a number belongs (YAML reads yes, no, on, off, true and false as "
                      "booleans); write the number")


def _number_shape(annotation: Any) -> Any:
    """Where a field of this type takes a number and no boolean (pydantic would take True as 1): "number"
    for the value itself, ("items", shape) for a list's items, ("values", shape) for a dict's values, or
    None where a boolean is fine or refused anyway."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _number_shape(args[0])
    if annotation is Any or annotation is bool:
        return None
    if annotation in (int, float):
        return "number"
    if origin is Literal:
        return "number" if any(isinstance(a, int) and not isinstance(a, bool) for a in args) and \
            not any(isinstance(a, bool) for a in args) else None
    if origin in (Union, types.UnionType):
        shapes = [_number_shape(a) for a in args]
        if any(a is Any or a is bool for a in args):
            return None
        return "number" if "number" in shapes else next((shape for shape in shapes if shape is not None), None)
    if origin in (list, tuple, set, frozenset) and args:
        inner = _number_shape(args[0])
        return ("items", inner) if inner is not None else None
    if origin is dict and len(args) == 2:
        inner = _number_shape(args[1])
        return ("values", inner) if inner is not None else None
    return None


def _booleans(shape: Any, value: Any, loc: tuple[Any, ...]) -> list[InitErrorDetails]:
    """An error for every boolean ``value`` holds where ``shape`` says a number belongs."""
    if shape == "number":
        if isinstance(value, bool):
            return [InitErrorDetails(type=PydanticCustomError("boolean_number", "{value} is " + _BOOLEAN_AS_NUMBER,
                                                              {"value": str(value).lower()}), loc=loc, input=value)]
        return []
    found: list[InitErrorDetails] = []
    if shape[0] == "items" and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += _booleans(shape[1], item, (*loc, index))
    elif shape[0] == "values" and isinstance(value, dict):
        for key, item in value.items():
            found += _booleans(shape[1], item, (*loc, key))
    return found


_SHAPES: dict[type, tuple[tuple[str, Any], ...]] = {}


def _number_fields(model: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """(field, shape) of every field of ``model`` that takes numbers; a field whose own validator reads
    the value first (a duration, a size) says what is wrong itself."""
    shapes = _SHAPES.get(model)
    if shapes is None:
        shapes = _SHAPES[model] = tuple(
            (name, shape) for name, field in model.model_fields.items()
            if not any(isinstance(m, BeforeValidator) for m in field.metadata)
            and (shape := _number_shape(field.annotation)) is not None)
    return shapes


class StrictModel(BaseModel):
    """The one config every contract model shares. Numbers are strict: a boolean (YAML 1.1's ``yes``,
    ``on``, ``true``) is refused where a number belongs, instead of becoming 1, located at its field; and
    a number is finite, whatever spelled it (``.inf`` is refused by the loader, but ``inf`` and ``"1e400"``
    are YAML strings that a float field would parse to infinity, which no engine takes and no canonical
    form can write)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False,
                              validate_default=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = [error for name, shape in _number_fields(cls) if name in data
                     for error in _booleans(shape, data[name], (name,))]
            if found:  # raised as a ValidationError, its errors keep their field's location
                raise ValidationError.from_exception_data(cls.__name__, found)
        return data


def stringify_scalars(value: Any) -> Any:
    # YAML turns `262144` into an int; a command line is strings, and the same text must hash the same.
    if isinstance(value, list):
        return [_scalar_to_str(v) for v in value]
    if isinstance(value, dict):
        return {k: (v if v is None or isinstance(v, bool) else _scalar_to_str(v)) for k, v in value.items()}
    return value


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


class ContractJsonSchema(GenerateJsonSchema):
    """`campaign schema`'s generator. pydantic states a mapping's key pattern as ``patternProperties`` alone,
    which a validator reads as "any other key is fine too": the loader refuses a key off the pattern
    (``env: {A=B: x}``), so the schema does."""

    def dict_schema(self, schema: Any) -> JsonSchemaValue:
        emitted = super().dict_schema(schema)
        if "patternProperties" in emitted and "additionalProperties" not in emitted:
            emitted["additionalProperties"] = False
        return emitted


def takes(input_type: Any) -> WithJsonSchema:
    """What the JSON Schema (`campaign schema`) says a field takes, when a before-validator reads more than
    the field's own type: the input as written (a YAML number where a string is kept)."""
    return WithJsonSchema(TypeAdapter(input_type).json_schema(schema_generator=ContractJsonSchema))


# a YAML number or boolean in an argv list becomes its text; in a mapping a boolean is kept (refused by str)
StrList = Annotated[list[str], BeforeValidator(stringify_scalars), takes(list[str | int | float | bool])]
StrDict = Annotated[dict[str, str], BeforeValidator(stringify_scalars), takes(dict[str, str | int | float])]


def valid_regexes(patterns: list[str]) -> list[str]:
    """Boot-log rules are regexes: a broken one is a contract error at load, not a surprise at run time."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from exc
    return patterns


# stripped first, so no two unbounded repeats meet at the end (linear on any text)
_FRACTION = re.compile(r"^(?:>=\s*+)?+(\d++)\s*+/\s*+(\d++)$")  # possessive: linear


def parse_fraction(text: str) -> tuple[int, int]:
    """``"20/20"`` or ``">= 19/20"`` -> (19, 20): at least k of n, n at most ``MAX_COUNT``."""
    match = _FRACTION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a count rule like '20/20' or '>= 19/20'")
    if len(match.group(1)) > 7 or len(match.group(2)) > 7 or int(match.group(2)) > MAX_COUNT:
        raise ValueError(f"{text.strip()[:40]!r}: n is at most {MAX_COUNT:,}")
    k, n = int(match.group(1)), int(match.group(2))
    if n <= 0 or k > n:
        raise ValueError(f"{text!r}: need 0 <= k <= n and n > 0")
    return k, n


# A count rule such as "20/20" or ">= 19/20" (at least k of n), checked when the contract is loaded.
CountRule = Annotated[str, AfterValidator(lambda text: (parse_fraction(text), text)[1])]


FILES_MOUNT_ROOT = "/campaign/files"
# ${file:slotmap} in args and env (and a screen's args): the path the reader sees the file at
FILE_REF = re.compile(r"\$\{file:([A-Za-z0-9][A-Za-z0-9_.-]*+)\}")


def unique_file_names(files: list[Any], what: str = "file names") -> None:
    """File names are unique, also ignoring case: a lane's files are mounted and copied into a bundle by
    name, and a case-insensitive file system would make ``Map`` and ``map`` one file."""
    names = [file.name for file in files]
    if len(set(names)) != len(names):
        raise ValueError(f"{what} must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    seen: dict[str, str] = {}
    for name in names:
        earlier = seen.setdefault(name.casefold(), name)
        if earlier != name:
            raise ValueError(f"{what} {earlier!r} and {name!r} differ only in case (one file on a "
                             "case-insensitive file system)")


class LaneFile(StrictModel):
    """A file a lane's engine reads (a per-layer slot map, a chat template, a hook), pinned by sha256: part
    of what the lane is, so a candidate may change it as its one axis (``files.<name>``)."""

    name: str = Field(pattern=NAME_PATTERN, description="How args and env refer to it: ${file:<name>}.")
    path: str = Field(description="The file on this box; relative paths are relative to the contract.")
    sha256: str = Field(pattern=SHA256_PATTERN, description="Pinned digest; checked at freeze, at run, and read "
                                                            "back inside the running lane.")
    mount: str | None = Field(None, pattern=r"^/\S*$",
                              description="docker runtime: where the container sees it (read-only); default "
                                          f"{FILES_MOUNT_ROOT}/<name>. A process lane sees the file's own path.")


MODELS_MOUNT_ROOT = "/campaign/models"
MODELS_SINCE = "0.3.0"  # the release that pins every model a lane reads (the reference's "since" column)
_SINCE: dict[str, Any] = {"since": MODELS_SINCE}
# ${model:draft} in args and env: the path the engine sees that role's model at
MODEL_REF = re.compile(r"\$\{model:([A-Za-z0-9][A-Za-z0-9_.-]*+)\}")
# the served model is the lane's `model:` (passed by the engine adapter); `models:` holds every other role
SERVED_ROLE = "served"


class LaneModel(StrictModel):
    """A model the lane's engine reads besides the one it serves (a drafter, a tokenizer, an adapter), by
    role, pinned: a file by its sha256, a directory by a ``sha256sum``-format manifest of its files and the
    manifest's own sha256. Part of what the lane is, so a candidate may change it as its one axis
    (``models.<role>``: drafter A against drafter B is one digest against another)."""

    path: str = Field(description="The model file or directory on this box; relative paths are relative to "
                                  "the contract.", json_schema_extra=_SINCE)
    sha256: str = Field(pattern=SHA256_PATTERN, json_schema_extra=_SINCE,
                        description="Pinned digest: of the file, or of the manifest for a directory. Checked at "
                                    "freeze, at run, and read back inside the running lane.")
    sha256_manifest: str | None = Field(
        None, json_schema_extra=_SINCE,
        description="A directory: its files in `sha256sum` format (`campaign manifest DIR --out FILE` writes one), "
                    "relative to the contract. Every file it lists must match, and the directory may hold no "
                    "other file.")
    mount: str | None = Field(None, pattern=r"^/\S*$", json_schema_extra=_SINCE,
                              description="docker runtime: where the container sees it (read-only); default "
                                          f"{MODELS_MOUNT_ROOT}/<role>. A process lane sees its own path.")

    @property
    def is_directory(self) -> bool:
        return self.sha256_manifest is not None
