"""The last check before a signature: no file a window writes about launches holds a credential's shape
(the loader's and the redactor's own detection), and no file at all holds a value the runner knows. Engine
replies and the user's pinned inputs are data: a model may write "Bearer x" in an answer."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaign.errors import RunError
from campaign.receipts.bundle import ENVELOPE, find_secrets, sign_bundle
from campaign.signing import init_keys, load_signing_key
from tests.support.secretshapes import SHAPES

LAUNCH_FILES = ["lanes/base/boot.log", "lanes/base/inspect.json", "lanes/cand/launch_failure.txt",
                "incumbent/snapshot.json", "contract/c.yaml", "journal.jsonl"]
DATA_FILES = ["raw/greedy/base.jsonl", "gates/greedy/cand.json", "contract/inputs/p.jsonl", "SUMMARY.json",
              "contract/files/0123abcd"]


def make_bundle(root: Path, planted: dict[str, str]) -> Path:
    for name in [*LAUNCH_FILES, *DATA_FILES]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("ordinary line\n" + planted.get(name, "") + "\nlast line\n")
    return root


@settings(max_examples=25, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=SHAPES, where=st.sampled_from(LAUNCH_FILES + DATA_FILES))
def test_a_shape_in_a_launch_file_stops_the_signature(tmp_path_factory: pytest.TempPathFactory, value: str,
                                                       where: str) -> None:
    root = make_bundle(tmp_path_factory.mktemp("b"), {where: f"value: {value}"})
    assert find_secrets(root, []) == ([where] if where in LAUNCH_FILES else [])


def test_signing_names_the_file_never_the_value(tmp_path: Path) -> None:
    init_keys()
    rng = random.Random(14)
    key = "".join(rng.choices(string.ascii_letters + string.digits, k=40))
    root = make_bundle(tmp_path / "b", {"lanes/base/boot.log": f"loaded with {key}"})
    with pytest.raises(RunError, match="lanes/base/boot.log") as info:
        sign_bundle(root, load_signing_key(), {"window": "w"})
    assert key not in str(info.value) and not (root / ENVELOPE).exists()


def test_a_known_value_is_found_across_a_chunk_border_in_any_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import campaign.receipts.bundle as bundle

    monkeypatch.setattr(bundle, "_SCAN_CHUNK", 16)
    secret = "plain-but-known-" + "".join(random.Random(3).choices(string.ascii_lowercase, k=12))
    root = make_bundle(tmp_path / "b", {"raw/greedy/base.jsonl": "x" * 13 + secret})
    assert find_secrets(root, [secret, "short"]) == ["raw/greedy/base.jsonl"]
    assert find_secrets(root, ["another-value-nobody-wrote"]) == []
