"""A pytest plugin (``-p tests.support.schemacorpus``) that writes every contract document the tests load,
as the loader parsed it, one JSON line each, to the file CAMPAIGN_SCHEMA_CORPUS names: the test contracts
the JSON Schema test (tests/unit/contracts/test_json_schema.py) checks, whatever test wrote them and however."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def pytest_configure(config: Any) -> None:
    target = os.environ.get("CAMPAIGN_SCHEMA_CORPUS")
    if not target:
        return
    from campaign.contracts import load

    original = load.load_located

    def recording(path: Path) -> Any:
        document = original(path)
        try:
            line = json.dumps(document.data, allow_nan=False)
        except (TypeError, ValueError):  # not JSON (a date, a non-finite number): the loader refuses it anyway
            return document
        with open(target, "a", encoding="utf-8") as corpus:
            corpus.write(line + "\n")
        return document

    load.load_located = recording  # type: ignore[assignment]
