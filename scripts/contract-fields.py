#!/usr/bin/env python3
"""Print the contract fields (``Model.field``, sorted, as JSON) of the campaign checkout at DIR: what a release
had, for tests/fixtures/contract-fields.json. At a release: `git worktree add /tmp/rel COMMIT`, then
`.venv/bin/python scripts/contract-fields.py /tmp/rel` and add its list under the version."""

from __future__ import annotations

import json
import sys
import typing


def main(checkout: str) -> None:
    sys.path.insert(0, checkout)  # that checkout's campaign, not this one's
    from pydantic import BaseModel

    from campaign.contracts.schema import Contract
    try:
        from campaign.contracts.gatespecs import GATE_SPECS
    except ImportError:  # before the specs had a module of their own
        from campaign.contracts.schema import GATE_SPECS  # type: ignore[attr-defined,no-redef]

    def nested(annotation: typing.Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [model for arg in typing.get_args(annotation) for model in nested(arg)]

    queue: list[type[BaseModel]] = [Contract, *(GATE_SPECS.values() if isinstance(GATE_SPECS, dict) else GATE_SPECS)]
    fields: set[str] = set()
    for model in queue:  # grows as nested models are found
        for name, info in model.model_fields.items():
            fields.add(f"{model.__name__}.{info.alias or name}")
            queue += [found for found in nested(info.annotation) if found not in queue]
    print(json.dumps(sorted(fields), indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
