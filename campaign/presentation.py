"""What a gate shows a reader beside its verdict: headline figures and the data of its plots, typed.

A gate builds these from its own judging (``gates/``) and its result file carries them; the report
(``receipts/``) draws them with no knowledge of gate kinds. A leaf: pydantic only, so both the gates and the
receipts read the same models. Plots are generic: bars, points (lines and scatters) and intervals, each with
its series, labels and the bounds of the rule drawn as reference lines. Colours are roles (the control's,
the candidate's, a win's ...), chosen by the renderer, so every gate's plots share one palette.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["HEADLINE_CHARS", "Bars", "BarSeries", "Bound", "Headline", "Interval", "Intervals", "Marker", "Panel", "Plot", "PointSeries",
           "Points", "Presentation", "Role", "deciding_reason", "fit", "headline", "quantity"]

# A series' colour, by what it is; None leaves it to the renderer's cycle (several series of one kind).
Role = Literal["control", "candidate", "other", "win", "tie", "loss"]
Marker = Literal["o", "s", "^", "D", "v", "<", ">", "x"]


class _Strict(BaseModel):
    # strict: a result file's number written as a string is not made a number; nothing unknown is kept
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Headline(_Strict):
    """One figure a decision rests on, as a reader of the summary wants it beside the verdict: a metric
    (``value`` a number, out of ``denominator``) or a figure already in words (an estimate with its CI)."""

    label: str = Field(description="What it is, e.g. 'self_identical' or 'C1'.")
    value: float | int | str | None = Field(description="The number, or the figure in words; None: not measured.")
    unit: str = Field("", description="Its unit and, for an estimate, what it rests on (boots, prompts).")
    denominator: int | None = Field(None, description="Out of how many (a count's n).")


class Bound(_Strict):
    """A reference line on the value axis: a rule's limit (red dashed), a target to reach (green dashed) or
    the zero line (grey)."""

    value: float
    label: str | None = Field(None, description="Legend entry, e.g. the rule field it comes from.")
    kind: Literal["limit", "target", "zero"] = "limit"


class BarSeries(_Strict):
    name: str | None = Field(None, description="Legend entry.")
    values: list[float]
    role: Role | None = None
    roles: list[Role] | None = Field(None, description="A role per bar (e.g. by sign), over ``role``.")


class Bars(_Strict):
    """Bars over categories: several series side by side (grouped), on top of each other (stacked), or drawn
    one over the other (overlaid: the later one in front)."""

    type: Literal["bars"] = "bars"
    categories: list[str]
    series: list[BarSeries]
    layout: Literal["grouped", "stacked", "overlaid"] = "grouped"
    horizontal: bool = False
    bounds: list[Bound] = []
    xlabel: str = ""
    ylabel: str = ""
    value_range: list[float] | None = Field(None, min_length=2, max_length=2, description="Limits of the value axis.")


class PointSeries(_Strict):
    name: str | None = None
    x: list[float]
    y: list[float]
    role: Role | None = None
    line: bool = Field(False, description="Joined by a line (else a scatter).")
    marker: Marker = "o"
    faint: bool = Field(False, description="Drawn faint and small: the single values behind a line of means.")
    hollow: list[bool] | None = Field(None, description="Per point: drawn hollow (e.g. a rung whose needle was "
                                                        "not found).")


class Points(_Strict):
    type: Literal["points"] = "points"
    series: list[PointSeries]
    x_labels: list[str] | None = Field(None, description="Tick labels at x = 0, 1, ... (categories on the x axis).")
    bounds: list[Bound] = []
    xlabel: str = ""
    ylabel: str = ""


class Interval(_Strict):
    estimate: float
    low: float
    high: float
    text: str | None = Field(None, description="Written beside it, e.g. '+10.2% [+4.1, +16.0]'.")


class Intervals(_Strict):
    """An estimate with its confidence interval per category."""

    type: Literal["intervals"] = "intervals"
    categories: list[str]
    intervals: list[Interval]
    role: Role = "candidate"
    bounds: list[Bound] = []
    xlabel: str = ""
    ylabel: str = ""


Panel = Annotated[Union[Bars, Points, Intervals], Field(discriminator="type")]


class Plot(_Strict):
    """One figure: its title and one or more panels stacked top to bottom (the first is the main one, whose
    axis labels the report repeats beside the figure)."""

    title: str
    panels: list[Panel] = Field(min_length=1, max_length=8)
    heights: list[float] | None = Field(None, description="Relative panel heights (default: equal).")
    height: float = Field(3.0, gt=0, le=400, description="Inches (a bar per item grows with the items).")

    @model_validator(mode="after")
    def _a_height_per_panel(self) -> "Plot":
        if self.heights is not None and (len(self.heights) != len(self.panels) or min(self.heights) <= 0):
            raise ValueError("heights: one positive number per panel")
        return self


class Presentation(_Strict):
    headlines: list[Headline] = []
    plots: list[Plot] = []


def quantity(figure: Mapping[str, Any]) -> str:
    """A headline or a metric (as its file holds it: value, unit, denominator) as a person reads it: "7/8
    prompts" for a count, "0.0161 nats (n = 28)" for a measure, a figure in words as it is. One wording for
    the report, SUMMARY.md and the console."""
    value, unit, n = figure.get("value"), figure.get("unit") or "", figure.get("denominator")
    if value is None:
        return f"not measured ({unit})" if unit else "not measured"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value} {unit}".strip()
    if isinstance(value, int) and n is not None:
        return f"{value}/{n} {unit}".strip()
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{shown} {unit}".strip() + (f" (n = {n})" if n is not None else "")


# A gate result's headline: one line of at most HEADLINE_CHARS characters (the verdict, the number, the bar,
# and the pairs where it weighed boot pairs) that the console, SUMMARY.md, the report's tables and promote's
# refusal show. The full reasoning stays in the result's reasons: folded details in the report, --explain on
# the console. A kind may say the words after the verdict itself (``Gate.headline_words``: speed does, its
# reasons are paragraphs of statistics); any other result's are its deciding reason, so an older bundle's
# results, and SUMMARY.json's entries of them, get one too.

HEADLINE_CHARS = 100

# A rule's sentence that says it was not met ("KL mean 0.068 > 0.05 nats", "self_identical 5/8 < required 8/8",
# a screen's "hit_rate 0.4 >= 0.6: does not hold", the needle's "candidate is below it"), and one that was
_NOT_MET = re.compile(r" [<>] |\bnot met\b|\bdoes not hold\b|\bis below\b")
_MET = re.compile(r": (?:holds|met)$| <= | >= |\bis not below\b")
_SAID_MET = re.compile(r": (?:holds|met)$")  # a sentence that says its outcome: that word, whatever its operator
# teacher_forced's note on an instrument check that passed (a failed check is said in other words)
_PASSED_NOTE = re.compile(r"^instrument: lane \S+ gave back ")
_SPACES = re.compile(r"\s+")


def headline(result: Mapping[str, Any]) -> str:
    """The headline ``result`` carries (a gate result, or SUMMARY.json's entry of one), else one made from its
    verdict and deciding reason; always one line of at most ``HEADLINE_CHARS``."""
    carried = result.get("headline")
    verdict = str(result.get("verdict") or "INCONCLUSIVE")
    # a carried headline opens with its verdict: one that does not say the verdict the result holds is not its own
    if isinstance(carried, str) and carried.startswith(f"{verdict} "):
        return fit(carried)
    return fit(f"{verdict} {deciding_reason(result)}")


def deciding_reason(result: Mapping[str, Any]) -> str:
    """The reason that decided ``result``'s verdict, in full: the one its judge recorded (``deciding_reason``),
    else read from its reasons. There, a verdict a rule reached (PASS, FAIL) is never
    the instrument's: its notes on checks it passed come first in some gates (teacher_forced's) and are
    skipped; a FAIL is the first rule sentence not met. Under an undecided result's instrument heading
    ("instrument: the speed numbers cannot be judged"), the line that says what went wrong."""
    reasons = [str(reason) for reason in result.get("reasons") or [] if str(reason).strip()]
    if not reasons:
        return "without a stated reason"
    recorded = result.get("deciding_reason")
    if isinstance(recorded, str) and recorded in reasons:  # the rule that reached the verdict said so when judged
        return recorded
    # a result that records none (an instrument's verdict, a bundle older than the record): read from its reasons
    if result.get("verdict") in ("PASS", "FAIL"):
        weighed = [reason for reason in reasons if not reason.startswith("instrument:")] or reasons
        if result.get("verdict") == "FAIL":
            return next((reason for reason in weighed if _NOT_MET.search(reason) and not _SAID_MET.search(reason)),
                        next((reason for reason in weighed if not _MET.search(reason)), weighed[0]))
        return weighed[0]
    undecided = [reason for reason in reasons if not _PASSED_NOTE.match(reason)] or reasons
    if undecided[0].startswith("instrument:") and len(undecided) > 1:
        return f"instrument: {undecided[1].removeprefix('instrument: ')}"
    # an undecided gate's rules that were met are not why it is undecided
    return next((reason for reason in undecided if not _SAID_MET.search(reason)
                 and (not _MET.search(reason) or _NOT_MET.search(reason))), undecided[0])


def fit(text: str, limit: int = HEADLINE_CHARS) -> str:
    """``text`` on one line, cut at a word to ``limit`` characters with an ellipsis when longer."""
    line = _SPACES.sub(" ", text).strip()
    if len(line) <= limit:
        return line
    cut = line[:limit - 1]
    if " " in cut[limit // 2:]:
        cut = cut[:cut.rindex(" ")]
    return f"{cut.rstrip(' ;:,(')}…"
