"""One example's call under a time and memory bound, and the checks every fuzz property shares.

Why a forked child and not tracemalloc or hypothesis's deadline alone:

- a hang (a FIFO opened for reading, a read of /dev/zero, a quadratic regex) never returns, so a deadline
  measured after the call cannot stop it; the parent kills the child after ``SECONDS`` and reports a hang;
- memory that C code allocates (PyYAML's C parts, zlib, tarfile's reads into bytes, orjson) is mostly
  invisible to tracemalloc, and tracemalloc slows every allocation; RLIMIT_AS in the child turns any
  allocation past the bound into a MemoryError (or a clean death), reported as such, and costs nothing;
- the parent survives whatever the child does (RecursionError, a segfault, os._exit).

A fork of this process is a few milliseconds (copy-on-write), so each example pays little for it. The
child's address-space limit is the parent's address space at the fork plus ``MEGABYTES``: what the call may
add, whatever the interpreter already holds. The child's temporary folder is a private, empty one, so what a
call leaves behind there is seen (and a concurrent test's files are not).
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import subprocess
import tempfile
import time
import traceback
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["CATALOG", "MEGABYTES", "SECONDS", "Outcome", "bad_terminal_chars", "check_outcome", "finding",
           "make_chain", "preload", "remove_scratch", "remove_tree", "run_bounded", "scratch", "where_raised"]

SECONDS = 5.0
MEGABYTES = 200


@dataclass
class Outcome:
    kind: str  # "ok", "raised", "hang", "died"
    value: Any = None  # what the call returned (picklable), for "ok"
    exc_type: str = ""  # module.Qualname of what was raised
    campaign_error: bool = False  # an instance of campaign.errors.CampaignError
    message: str = ""
    tail: str = ""  # the traceback's last lines
    seconds: float = 0.0
    leftovers: list[str] = field(default_factory=list)  # what the call left in its temporary folder
    detail: str = ""

    def describe(self) -> str:
        if self.kind == "hang":
            return f"no result after {self.seconds:.1f} s (killed): a hang or unbounded work"
        if self.kind == "died":
            return f"the child died: {self.detail}"
        if self.kind == "raised":
            return f"{self.exc_type}: {self.message[:2000]!r}\n{self.tail}"
        return f"returned {self.value!r}"[:2000]


def preload() -> None:
    """Import every campaign module (and what they import: scipy, matplotlib, docker...) here, once, so no
    forked child imports anything: an import costs each example a second, and a library that sets itself up
    on import (OpenBLAS sizing its thread buffers) can stall under the child's address-space limit. A module
    that does not import now is left for the child to import, and to report."""
    import importlib
    import pkgutil

    import campaign

    for module in pkgutil.walk_packages(campaign.__path__, "campaign."):
        if module.name.endswith(".__main__"):  # importing one runs its program (`python -m campaign.cli`)
            continue
        try:
            importlib.import_module(module.name)
        except Exception:
            pass


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _child(call: Callable[[], Any], write_fd: int, private_tmp: str) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        limit = _address_space() + MEGABYTES * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.environ["TMPDIR"] = private_tmp
        tempfile.tempdir = private_tmp
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            result: dict[str, Any] = {"kind": "ok", "value": call()}
        except BaseException as exc:  # everything is a finding to report, SystemExit and MemoryError too
            from campaign.errors import CampaignError

            result = {"kind": "raised", "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                      "campaign_error": isinstance(exc, CampaignError), "message": _text(exc),
                      "tail": "".join(traceback.format_exception(exc)[-6:])[-3000:]}
        try:
            data = pickle.dumps(result)
        except Exception as exc:
            data = pickle.dumps({"kind": "died", "detail": f"unpicklable result: {exc!r}"})
        view = memoryview(data)
        while view:
            written = os.write(write_fd, view[:65536])
            view = view[written:]
    except BaseException:
        code = 3
    finally:
        os._exit(code)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:100_000]
    except BaseException as inner:  # a message that cannot be made is itself a finding
        return f"<str() of the exception failed: {type(inner).__name__}>"


def run_bounded(call: Callable[[], Any], *, seconds: float = SECONDS) -> Outcome:
    """``call()`` in a forked child with ``seconds`` of wall time and MEGABYTES more address space."""
    private_tmp = tempfile.mkdtemp(prefix="child-tmp-", dir=_SCRATCH)
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(call, write_fd, private_tmp)
    os.close(write_fd)
    chunks: list[bytes] = []
    hung = False
    try:
        while True:
            left = seconds - (time.monotonic() - started)
            if left <= 0:
                hung = True
                break
            ready, _, _ = select.select([read_fd], [], [], left)
            if ready:
                block = os.read(read_fd, 1 << 20)
                if not block:
                    break
                chunks.append(block)
    finally:
        os.close(read_fd)
        if hung:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    elapsed = time.monotonic() - started
    leftovers = sorted(os.listdir(private_tmp))
    if leftovers:
        remove_tree(private_tmp)
    else:
        os.rmdir(private_tmp)
    if hung:
        return Outcome(kind="hang", seconds=elapsed)
    if os.WIFSIGNALED(status):
        return Outcome(kind="died", seconds=elapsed, detail=f"signal {signal.Signals(os.WTERMSIG(status)).name}")
    if not chunks:
        return Outcome(kind="died", seconds=elapsed, detail=f"exit status {os.WEXITSTATUS(status)}, no result")
    result = pickle.loads(b"".join(chunks))
    return Outcome(**result, seconds=elapsed, leftovers=leftovers)


def remove_tree(root: Path | str) -> None:
    """rm -rf: through FIFOs, sockets and links (removed, never followed), and through a 1,500-level folder
    chain, which defeats shutil.rmtree on Python 3.11 (it recurses per level)."""
    subprocess.run(["rm", "-rf", "--", str(root)], check=False)


_SCRATCH = Path(tempfile.mkdtemp(prefix="campaign-fuzz-"))


def scratch(prefix: str = "case-") -> Path:
    """A new folder for one example, removed with all the others at the end of the session (tests/fuzz's
    conftest): removing a deep chain costs seconds on a busy disk, which would count against the example's
    deadline."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH))


def remove_scratch() -> None:
    remove_tree(_SCRATCH)


def make_chain(base: Path, depth: int, name: str = "d") -> Path:
    """``base/d/d/.../d`` (``depth`` folders; the first named ``d_``... if ``d`` is taken), made one level at a
    time through a descriptor: os.makedirs recurses once per level, and a path past PATH_MAX cannot be named
    whole."""
    first = name
    while os.path.lexists(base / first):
        first += "_"
    names = [first] + [name] * (depth - 1)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in names:
            os.mkdir(part, dir_fd=fd)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return base.joinpath(*names)


# Characters that must never reach a terminal from data: C0 controls (a line's own "\n" aside), DEL, C1
# controls (0x9b is a one-byte CSI on some terminals), bidi embeddings, overrides and isolates, and the
# line and paragraph separators.
_BIDI = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e",
         "\u200f", "\u061c"}


def bad_terminal_chars(text: str) -> list[str]:
    """The forbidden characters in ``text`` (each as its code point), in order of first appearance."""
    found: list[str] = []
    for char in text:
        code = ord(char)
        bad = (code < 0x20 and char != "\n") or code == 0x7f or 0x80 <= code <= 0x9f or char in _BIDI \
            or char in "\u2028\u2029" or unicodedata.category(char) == "Cs"
        if bad and f"U+{code:04X}" not in found:
            found.append(f"U+{code:04X}")
    return found


CATALOG = os.environ.get("CAMPAIGN_FUZZ_CATALOG", "")


def where_raised(tail: str) -> str:
    """The innermost frame of campaign's own code in a formatted traceback: "campaign/x.py:123 in f"."""
    import re

    frames = re.findall(r'File "([^"]*)", line (\d+), in (\S+)', tail)
    ours = [f for f in frames if "/campaign/" in f[0] and "/tests/" not in f[0]] or frames
    if not ours:
        return "?"
    path, line, func = ours[-1]
    return f"{path[path.rfind('/campaign/') + 1:] if '/campaign/' in path else path}:{line} in {func}"


def finding(signature: str, message: str, evidence: str = "") -> None:
    """A property broken: an AssertionError, or, with CAMPAIGN_FUZZ_CATALOG=FILE, one JSON line appended to
    FILE (the test goes on), to list every distinct failure a run meets rather than the first."""
    if not CATALOG:
        raise AssertionError(message)
    import json

    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    with open(CATALOG, "a") as out:
        out.write(json.dumps({"test": test, "signature": signature, "message": message[:3000],
                              "evidence": evidence[:3000]}) + "\n")


def check_outcome(outcome: Outcome, *, may_pass: bool = True, what: str = "the call", evidence: str = "") -> bool:
    """The shared property: ``what`` either succeeds (when ``may_pass``) or raises a CampaignError whose
    message is one non-empty line; never another exception, a hang, a death, or files left in its temp
    folder. True when it held."""
    if outcome.kind == "ok" and not may_pass:
        finding("accepted", f"{what} accepted an input it must refuse: {outcome.describe()}", evidence)
        return False
    if outcome.kind in ("hang", "died"):
        finding(outcome.kind, f"{what}: {outcome.describe()}", evidence)
        return False
    if outcome.kind == "raised" and not outcome.campaign_error:
        finding(f"{outcome.exc_type} at {where_raised(outcome.tail)}",
                f"{what} raised something other than a CampaignError: {outcome.describe()}", evidence)
        return False
    if outcome.kind == "raised" and (len(outcome.message.splitlines()) != 1 or not outcome.message.strip()):
        finding("not one line", f"{what}: the error is not one line "
                                f"({len(outcome.message.splitlines())} lines): {outcome.message[:600]!r}", evidence)
        return False
    if outcome.leftovers:
        finding("leftovers", f"{what} left files in its temporary folder: {outcome.leftovers[:5]}", evidence)
        return False
    return True
