"""The report of a bundle, with each gate's presentation: a result carries its headlines and plot data;
one written before results carried them gets them from its gate kind's own builders
(``Gate.stored_presentation``), here, because the report (``receipts/``) never imports the gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.gates.registry import GATES
from campaign.presentation import Presentation
from campaign.receipts import publish as receipts_publish

__all__ = ["load_report_data", "publish", "stored_presentation"]


def stored_presentation(result: dict[str, Any]) -> Presentation | None:
    """What the result's gate kind shows of it (None: a kind this tool does not know, shown without)."""
    gate = GATES.get(str(result.get("kind")))
    return gate.stored_presentation(result) if gate is not None else None


def load_report_data(bundle: Path) -> dict[str, Any]:
    return receipts_publish.load_report_data(bundle, stored_presentation)


def publish(bundle: Path, out_dir: Path | None = None) -> dict[str, Path]:
    return receipts_publish.publish(bundle, out_dir, stored_presentation)
