"""Receipts outlive the tool: a signed bundle and a freeze record made by each tool version that shipped
(tests/fixtures/bundles/<version>/, made by that version's own code from git history with
tests/fixtures/bundles/make.sh) verify, rejudge, publish and promote (dry run) with today's tool. A change
of what a bundle or a freeze record holds comes with a new fixture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign.contracts.freeze import ToolDefaultsChanged, check_frozen
from campaign.contracts.load import load_contract
from campaign.fsutil import load_json_strict
from campaign.signing import load_trusted
from tests.support.cli import campaign

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "made.json").is_file())


def test_every_shipped_version_has_its_fixture() -> None:
    made = {json.loads((FIXTURES / v / "made.json").read_text())["tool_version"] for v in VERSIONS}
    assert {"0.1.0", "0.2.0"} <= made  # 0.1.0: before effective contracts; 0.2.0: with them


@pytest.fixture(params=VERSIONS)
def fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A private copy: the committed fixture is only read."""
    shutil.copytree(FIXTURES / request.param, tmp_path / request.param, symlinks=True)
    return tmp_path / request.param


def test_an_old_bundle_verifies_rejudges_publishes_and_promotes_dry_run(fixture: Path, tmp_path: Path) -> None:
    bundle, key = fixture / "bundle", str(fixture / "signing.pub")
    assert campaign("keys", "init").returncode == 0  # this machine's key signs the rejudged bundle
    assert campaign("verify", str(bundle), "--trust", key).returncode == 0
    rejudged = campaign("rejudge", str(bundle), "--trust", key, "--out", str(tmp_path / "rejudged"))
    assert rejudged.returncode == 0, rejudged.stdout + rejudged.stderr
    assert "greedy/spec: PASS" in rejudged.stdout and "changed:" not in rejudged.stdout, rejudged.stdout
    (new,) = (tmp_path / "rejudged").iterdir()
    assert campaign("verify", str(new)).returncode == 0  # signed by this test's key
    published = campaign("publish", str(bundle), "--trust", key, "--out", str(tmp_path / "report"))
    assert published.returncode == 0, published.stdout + published.stderr
    assert (tmp_path / "report" / "report.html").stat().st_size > 1000
    promoted = campaign("promote", str(bundle), "--candidate", "spec", "--dry-run", "--trust", key)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert f"would promote spec from {bundle}" in promoted.stdout, promoted.stdout


def test_an_old_freeze_record_verifies_and_says_what_it_froze(fixture: Path, tmp_path: Path) -> None:
    """The record's own contract, rebuilt from the bundle's copies, checks against it; a record from before
    effective contracts is refused by name (and accepted when told), one with them passes."""
    record = load_json_strict(fixture / "freeze.json")
    copy = fixture / "bundle" / "contract"
    (tmp_path / "c" / "prompts").mkdir(parents=True)
    shutil.copyfile(copy / record["contract_file"], tmp_path / "c" / record["contract_file"])
    shutil.copyfile(next((copy / "inputs").iterdir()), tmp_path / "c" / "prompts" / "p.jsonl")
    loaded = load_contract(tmp_path / "c" / record["contract_file"], check_files=False)
    trusted = load_trusted([fixture / "signing.pub"], include_local=False)
    if "effective" in record:
        assert check_frozen(loaded, fixture / "freeze.json", trusted) == record
    else:
        with pytest.raises(ToolDefaultsChanged, match="holds no effective contract"):
            check_frozen(loaded, fixture / "freeze.json", trusted)
        assert check_frozen(loaded, fixture / "freeze.json", trusted, accept_tool_defaults=True)
