"""An A/A lane (`aa: true`): the control again, a candidate that sets nothing and declares no axis."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from tests.support.contracts import demo_like, write_contract

AA_LANE = """
          - name: again
            role: candidate
            aa: true
"""


def _with_lane(tmp_path: Path, lane: str) -> Path:
    body = demo_like(18000).replace("        inputs:\n", lane.lstrip("\n") + "        inputs:\n", 1)
    return write_contract(tmp_path, body)


def test_an_a_a_lane_is_the_control_again_and_loads_without_an_axis(tmp_path: Path) -> None:
    loaded = load_contract(_with_lane(tmp_path, AA_LANE))
    again, base = loaded.lanes["again"], loaded.lanes["base"]
    assert again.aa and again.role == "candidate" and again.control == "base" and again.axis == []
    assert again.model_dump(exclude={"name", "role", "control", "aa"}) == base.model_dump(
        exclude={"name", "role", "control", "aa"})
    assert not loaded.lanes["spec"].aa


@pytest.mark.parametrize(("lane", "field", "words"), [
    (AA_LANE + "            axis: [env.NOTHING]\n", "axis", "it declares no `axis` and sets nothing"),
    (AA_LANE + "            set: {env: {NOTHING: '1'}}\n", "set", "it declares no `axis` and sets nothing"),
    (AA_LANE.replace("candidate", "control"), "aa", "an A/A lane is a candidate"),
    (AA_LANE.replace("aa: true", "aa: false"), "lanes[2]", "a candidate must declare its `axis` (or be the "
                                                           "control again: `aa: true`)"),
])
def test_an_a_a_lane_that_changes_something_or_is_a_control_is_one_line_naming_its_field(
        tmp_path: Path, lane: str, field: str, words: str) -> None:
    with pytest.raises(ContractError) as info:
        load_contract(_with_lane(tmp_path, lane))
    message = str(info.value)
    assert words in message and field in message and "\n" not in message, message
    assert message.startswith(f"{tmp_path / 'c.yaml'}:"), message
