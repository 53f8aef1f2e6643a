"""The one strict config every contract model shares, and the field types more than one model uses."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = ["FILE_REF", "FILES_MOUNT_ROOT", "NAME_PATTERN", "LaneFile", "SHA256_PATTERN", "CountRule", "StrDict", "StrList", "StrictModel", "parse_fraction", "stringify_scalars",
           "valid_regexes"]

# names become file names in the bundle: identifiers, never paths (no '@', which visit keys use)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class StrictModel(BaseModel):
    """The one config every contract model shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False,
                              validate_default=True)


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


StrList = Annotated[list[str], BeforeValidator(stringify_scalars)]
StrDict = Annotated[dict[str, str], BeforeValidator(stringify_scalars)]


def valid_regexes(patterns: list[str]) -> list[str]:
    """Boot-log rules are regexes: a broken one is a contract error at load, not a surprise at run time."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from exc
    return patterns


_FRACTION = re.compile(r"^\s*(?:>=\s*)?(\d+)\s*/\s*(\d+)\s*$")


def parse_fraction(text: str) -> tuple[int, int]:
    """``"20/20"`` or ``">= 19/20"`` -> (19, 20): at least k of n."""
    match = _FRACTION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a count rule like '20/20' or '>= 19/20'")
    k, n = int(match.group(1)), int(match.group(2))
    if n <= 0 or k > n:
        raise ValueError(f"{text!r}: need 0 <= k <= n and n > 0")
    return k, n


# A count rule such as "20/20" or ">= 19/20" (at least k of n), checked when the contract is loaded.
CountRule = Annotated[str, AfterValidator(lambda text: (parse_fraction(text), text)[1])]


FILES_MOUNT_ROOT = "/campaign/files"
# ${file:slotmap} in args and env (and a screen's args): the path the reader sees the file at
FILE_REF = re.compile(r"\$\{file:([A-Za-z0-9][A-Za-z0-9_.-]*)\}")


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
