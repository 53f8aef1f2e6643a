"""What a window copies into its bundle once, at its first start: the frozen contract, its freeze record,
the effective contract it is judged by, its inputs, and each pinned lane file (or only its digest, past the
contract's file_copy_limit); each lane as meant (spec.json) and the tool's source. Every read is bounded;
a file changed since the freeze check is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from campaign import __version__
from campaign.contracts.effective import EFFECTIVE_FILE, effective_document
from campaign.contracts.hashing import sha256_bytes
from campaign.contracts.load import LoadedContract
from campaign.contracts.model import INPUT_FILE_BYTES, LaneFile
from campaign.contracts.yamlsafe import MAX_CONTRACT_BYTES
from campaign.errors import FrozenChanged
from campaign.fsutil import MAX_JSON_BYTES, atomic_write_bytes, atomic_write_json, open_regular, read_bounded
from campaign.window.judge import input_copies
from campaign.window.source import source_snapshot

__all__ = ["copy_contract", "copy_once"]


def copy_once(loaded: LoadedContract, record_path: Path, bundle: Path, *, accepted: list[str]) -> None:
    """Everything a window copies at its first start; source.json last, so a start killed before it is
    known to have measured nothing."""
    copy_contract(loaded, record_path, bundle, accepted=accepted)
    for lane in loaded.lanes.values():  # every lane as meant, booted or not (a rejudge reads them all)
        atomic_write_json(bundle / "lanes" / lane.name / "spec.json", lane.model_dump(mode="json"))
    atomic_write_json(bundle / "source.json", source_snapshot())


def copy_contract(loaded: LoadedContract, record_path: Path, bundle: Path, *, accepted: list[str]) -> None:
    """The frozen contract, its record and its input files go into the bundle; gates read these copies. Beside
    them the effective contract this window is judged by: what judges it again later reads its rules there."""
    target = bundle / "contract"
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_json(target / EFFECTIVE_FILE, effective_document(loaded, __version__, accepted))
    # read bounded, never shutil.copyfile: a path swapped for /dev/zero since the freeze check would fill the disk
    atomic_write_bytes(target / loaded.path.name, read_bounded(loaded.path, MAX_CONTRACT_BYTES, what="contract"))
    atomic_write_bytes(target / "freeze.json", read_bounded(record_path, MAX_JSON_BYTES, what="freeze record"))
    for name, destination in input_copies(loaded, bundle).items():
        destination.parent.mkdir(exist_ok=True)
        atomic_write_bytes(destination, read_bounded(loaded.resolve(loaded.contract.inputs[name].file),
                                                     INPUT_FILE_BYTES, what=f"input {name}"))
    _copy_lane_files(loaded, target)


def _copy_lane_files(loaded: LoadedContract, target: Path) -> None:
    """Each lane file and screen input into contract/files/<sha256> (once per content), or only its digest
    when it is larger than the contract's file_copy_limit; contract/files.json says which lane (or screen)
    read which, and where."""
    pinned: list[tuple[str, LaneFile, Path, str | None]] = [
        (lane.name, file, Path(file.path), lane.file_seen_at(file))
        for lane in loaded.lanes.values() for file in lane.files]
    pinned += [(f"screen {loaded.contract.gates[where[1]].gate_id}", file, loaded.resolve(file.path), None)
               for where, file in loaded.written_files() if where[0] == "gates"]
    listed: dict[str, dict[str, Any]] = {}
    for owner, file, path, seen_at in pinned:
        size, data = _read_if_small(path, loaded.contract.file_copy_limit, f"file {file.name}")
        copied = data is not None
        if data is not None and not (target / "files" / file.sha256).exists():
            if sha256_bytes(data) != file.sha256:  # changed since the freeze check a moment ago
                raise FrozenChanged(f"{owner}: file {file.name} ({path}) changed since freezing")
            (target / "files").mkdir(exist_ok=True)
            atomic_write_bytes(target / "files" / file.sha256, data)
        listed.setdefault(owner, {})[file.name] = {"sha256": file.sha256, "bytes": size, "copied": copied,
                                                   "source": path.name, **({"seen_at": seen_at} if seen_at else {})}
    if listed:
        atomic_write_json(target / "files.json", listed)


def _read_if_small(path: Path, limit: int, what: str) -> tuple[int, bytes | None]:
    """A lane file's size, and its bytes when it holds at most ``limit``: opened once, proven a regular file
    (UnreadableFile names a FIFO, a device or a loop), never read past the limit however it grows."""
    with open_regular(path, what=what) as fd:
        size = os.fstat(fd).st_size
        if size > limit:
            return size, None
        chunks, total = [], 0
        while total <= limit and (block := os.read(fd, min(1 << 20, limit + 1 - total))):
            chunks.append(block)
            total += len(block)
    return (total, None) if total > limit else (total, b"".join(chunks))
