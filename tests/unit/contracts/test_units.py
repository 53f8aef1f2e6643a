"""Durations and sizes as a contract writes them, parsed once at load; anything else refused with a
message that says what to write instead."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError

from campaign.contracts.units import Duration, Size, format_cpuset, parse_cpuset, parse_duration, parse_size

# Duration


@pytest.mark.parametrize(("value", "seconds"), [
    (90, 90.0),
    (1.5, 1.5),
    ("90", 90.0),
    ("90s", 90.0),
    ("40m", 2400.0),
    ("8h", 28800.0),
    ("250ms", 0.25),
    ("1.5h", 5400.0),
    ("0.5m", 30.0),
    (" 40m ", 2400.0),
    ("40 m", 2400.0),
    ("007s", 7.0),
])
def test_duration_forms(value: object, seconds: float) -> None:
    result = parse_duration(value)
    assert isinstance(result, float)
    assert result == pytest.approx(seconds, rel=1e-12)  # "250ms" is 250 * 0.001: exact only up to rounding


@pytest.mark.parametrize("value", ["40min", "1d", "40M", "4 0m", "m", "", "s40", "1e3", "1,5m", "-5s", "+5s",
                                   ".5s", "40mm", "nan", "inf", None])
def test_duration_rejects_other_strings(value: object) -> None:
    with pytest.raises(ValueError, match=r"is not a duration \(use e.g. 90s, 40m, 8h\)"):
        parse_duration(value)


def test_duration_error_quotes_the_input() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("forty minutes")
    assert str(info.value) == "'forty minutes' is not a duration (use e.g. 90s, 40m, 8h)"


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, "0", "0s", "0ms", "0.0h"])
def test_duration_must_be_positive(value: object) -> None:
    with pytest.raises(ValueError, match="^a duration must be a positive, finite number of seconds$"):
        parse_duration(value)


@pytest.mark.parametrize("value", [True, False])
def test_duration_refuses_booleans(value: bool) -> None:
    # YAML's `yes` is a bool, and a bool is an int to Python: it must not become 1 second
    with pytest.raises(ValueError, match="a duration is a number of seconds or a string like '40m'"):
        parse_duration(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, ".nan", "inf"])
def test_duration_refuses_what_never_expires(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


# Size


@pytest.mark.parametrize(("value", "size"), [
    (1024, 1024),
    ("1024", 1024),
    ("1k", 1024),
    ("64g", 64 << 30),
    ("64G", 64 << 30),
    ("512m", 512 << 20),
    ("512MiB", 512 << 20),
    ("512mib", 512 << 20),
    ("512MB", 512 << 20),
    ("2t", 2 << 40),
    ("100b", 100),
    ("1.5k", 1536),
    ("0.5g", 1 << 29),
    (" 64 g ", 64 << 30),
])
def test_size_forms(value: object, size: int) -> None:
    result = parse_size(value)
    assert type(result) is int
    assert result == size


@pytest.mark.parametrize("value", ["64gi", "64x", "1p", "g", "", "64 gb extra", "-1g", "1e3", "1,5g", None])
def test_size_rejects_other_strings(value: object) -> None:
    with pytest.raises(ValueError, match=r"is not a size \(use e.g. 64g, 512m, 1024\)"):
        parse_size(value)


def test_size_error_quotes_the_input() -> None:
    with pytest.raises(ValueError) as info:
        parse_size("lots")
    assert str(info.value) == "'lots' is not a size (use e.g. 64g, 512m, 1024)"


@pytest.mark.parametrize("value", [0, -1, "0", "0g", "0.0001k"])
def test_size_must_be_positive(value: object) -> None:
    # "0.0001k" is 0.1 bytes: truncated to 0, refused rather than rounded up
    with pytest.raises(ValueError, match="^a size must be positive$"):
        parse_size(value)


@pytest.mark.parametrize("value", [True, False])
def test_size_refuses_booleans(value: bool) -> None:
    with pytest.raises(ValueError, match="a size is a number of bytes or a string like '64g'"):
        parse_size(value)


# as pydantic field types


class _Limits(BaseModel):
    timeout: Duration
    shm: Size | None = None


def test_annotated_types_parse_at_validation() -> None:
    limits = _Limits.model_validate({"timeout": "40m", "shm": "64g"})
    assert limits.timeout == 2400.0
    assert limits.shm == 64 << 30


def test_annotated_types_report_the_message_and_field() -> None:
    with pytest.raises(ValidationError) as info:
        _Limits.model_validate({"timeout": "soon"})
    errors = info.value.errors()
    assert len(errors) == 1
    assert errors[0]["loc"] == ("timeout",)
    assert "'soon' is not a duration (use e.g. 90s, 40m, 8h)" in errors[0]["msg"]


def test_annotated_size_reports_nonpositive() -> None:
    with pytest.raises(ValidationError) as info:
        _Limits.model_validate({"timeout": 1, "shm": "0g"})
    errors = info.value.errors()
    assert [e["loc"] for e in errors] == [("shm",)]
    assert "a size must be positive" in errors[0]["msg"]


# Cpusets


@pytest.mark.parametrize("text,cpus,canonical", [("1", {1}, "1"), ("0-3", {0, 1, 2, 3}, "0-3"),
                                                ("0,1,2,8,10-11", {0, 1, 2, 8, 10, 11}, "0-2,8,10-11"),
                                                ("3, 1", {1, 3}, "1,3")])
def test_cpuset_forms_and_one_canonical_spelling(text: str, cpus: set[int], canonical: str) -> None:
    assert parse_cpuset(text) == cpus and format_cpuset(parse_cpuset(text)) == canonical


@pytest.mark.parametrize("text", ["", "a", "1-", "3-1", "-2", "1,,2", "0x1"])
def test_cpuset_rejects_what_is_not_one(text: str) -> None:
    with pytest.raises(ValueError, match="is not a cpuset"):
        parse_cpuset(text)
