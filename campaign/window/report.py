"""The report of a bundle, with each gate's presentation: a result carries its headlines and plot data;
one written before results carried them gets them from its gate kind's own builders
(``Gate.stored_presentation``), here, because the report (``receipts/``) never imports the gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.errors import InputError, VerifyError
from campaign.fsutil import atomic_write_json
from campaign.gates.registry import GATES
from campaign.presentation import Presentation
from campaign.receipts import index as receipts_index
from campaign.receipts import publish as receipts_publish
from campaign.receipts.bundle import verify_bundle
from campaign.signing import TrustedKeys

__all__ = ["load_report_data", "publish", "publish_into_index", "rebuild_index", "stored_presentation"]


def stored_presentation(result: dict[str, Any]) -> Presentation | None:
    """What the result's gate kind shows of it (None: a kind this tool does not know, shown without)."""
    gate = GATES.get(str(result.get("kind")))
    return gate.stored_presentation(result) if gate is not None else None


def load_report_data(bundle: Path) -> dict[str, Any]:
    return receipts_publish.load_report_data(bundle, stored_presentation)


def publish(bundle: Path, out_dir: Path | None = None, data: dict[str, Any] | None = None) -> dict[str, Path]:
    """``data``: the bundle's report data when the caller read it already (it is read once)."""
    return receipts_publish.publish(bundle, out_dir, stored_presentation, data=data)


def publish_into_index(bundle: Path, folder: Path, trusted: TrustedKeys) -> tuple[dict[str, Path], dict[str, Any]]:
    """Verify ``bundle``, publish it into ``folder``'s ``windows/<bundle>/`` with its index entry, and write the
    index again with it; what was written, and the report data it was written from."""
    verified = verify_bundle(bundle, trusted)
    data = load_report_data(bundle)
    entry = receipts_index.window_entry(data, verified.keyid)
    place = folder / receipts_index.WINDOWS / entry["window"]
    written = receipts_publish.publish(bundle, place, stored_presentation, archive_name=entry["window"], data=data)
    atomic_write_json(place / receipts_index.ENTRY, entry, mode=receipts_publish.SHARED)
    return {**written, **receipts_index.write_index(folder)}, data


def rebuild_index(folder: Path, trusted: TrustedKeys) -> tuple[dict[str, Path], list[str]]:
    """Every window's entry derived again from its archive (``windows/<bundle>/<bundle>.tar.gz``), each verified
    first; a window whose archive does not verify leaves the index (the reason is returned), then the index is
    written. The same archives give the same index, byte for byte."""
    left: list[str] = []
    for place in sorted(p for p in (folder / receipts_index.WINDOWS).glob("*") if p.is_dir()):
        entry_path, archive = place / receipts_index.ENTRY, place / f"{place.name}.tar.gz"
        try:
            with receipts_publish.unpacked_archive(archive) as bundle:
                verified = verify_bundle(bundle, trusted)
                entry = receipts_index.window_entry(load_report_data(bundle), verified.keyid)
            if entry["window"] != place.name:
                raise InputError(f"{archive}: holds the window {entry['window']!r}, not {place.name!r}")
        except (InputError, VerifyError, OSError) as exc:
            entry_path.unlink(missing_ok=True)
            left.append(f"{place.name}: left out of the index: {exc}")
            continue
        atomic_write_json(entry_path, entry, mode=receipts_publish.SHARED)
    return receipts_index.write_index(folder), left
