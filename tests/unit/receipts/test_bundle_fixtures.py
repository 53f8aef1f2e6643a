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
from campaign.errors import ContractError
from campaign.fsutil import load_json_strict
from campaign.signing import load_trusted
from tests.support.cli import campaign

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "made.json").is_file())


def test_every_shipped_version_has_its_fixture() -> None:
    made = {json.loads((FIXTURES / v / "made.json").read_text())["tool_version"] for v in VERSIONS}
    assert {"0.1.0", "0.2.0"} <= made  # 0.1.0: before effective contracts; 0.2.0: with them
    # and the speed gate's boots before they interleaved (control_boots, made at 2bce6c3, the last commit with it)
    assert "control_boots: 2" in (FIXTURES / "v0.1.0-control-boots" / "bundle" / "contract" / "fixture.yaml").read_text()


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
    if "control_boots" in (bundle / "contract" / "fixture.yaml").read_text():
        # judged by today's speed gate: one candidate boot is measured and reported, and never decides
        assert "read in today's terms: speed: control_boots: 2 read as max_boot_pairs: 1" in rejudged.stdout
        speed = load_json_strict(new / "gates" / "speed" / "spec.json")
        assert speed["verdict"] == "INCONCLUSIVE" and "after 1 boot pair(s)" in speed["reasons"][0], speed["reasons"]
        assert speed["details"]["schedule"]["boots"][:3] == [
            {"visit": "base", "role": "control", "position": 0, "not_counted_at": []},
            {"visit": "spec", "role": "candidate", "position": 1, "not_counted_at": []},
            {"visit": "base@rerun1", "role": "control_rerun1", "position": 2, "not_counted_at": []}]
        assert load_json_strict(new / "SUMMARY.json")["rejudge"]["read_as"]
    published = campaign("publish", str(bundle), "--trust", key, "--out", str(tmp_path / "report"))
    assert published.returncode == 0, published.stdout + published.stderr
    assert (tmp_path / "report" / "report.html").stat().st_size > 1000
    # its results carry no presentation: each gate derives its headlines and plots from the stored result
    assert "greedy self\\_identical " in (tmp_path / "report" / "SUMMARY.md").read_text()
    if (bundle / "gates" / "speed").is_dir():
        html = (tmp_path / "report" / "report.html").read_text()
        assert 'data-title="C1: decode_tok_s of every boot, in window order' in html
        assert 'data-title="C1: paired change per prompt' in html
    # publish reads a bundle from another box with its key, and only with it
    foreign = campaign("publish", str(bundle), "--out", str(tmp_path / "refused"))
    assert foreign.returncode != 0 and "trusted key" in foreign.stderr, foreign.stdout + foreign.stderr
    # the dry run runs every check the promotion runs: the bundle's decision holds (no `refused:` line), and
    # the daily it would replace is not running on this machine, which a promotion would refuse too
    promoted = campaign("promote", str(bundle), "--candidate", "spec", "--dry-run", "--trust", key)
    assert promoted.returncode == 1 and "refused:" not in promoted.stderr, promoted.stdout + promoted.stderr
    assert "incumbent is not running" in promoted.stderr and "daily.pid: no such pidfile" in promoted.stderr


def test_an_old_freeze_record_verifies_and_says_what_it_froze(fixture: Path, tmp_path: Path) -> None:
    """The record's own contract, rebuilt from the bundle's copies, checks against it; a record from before
    effective contracts is refused by name (and accepted when told), one with them passes."""
    record = load_json_strict(fixture / "freeze.json")
    copy = fixture / "bundle" / "contract"
    (tmp_path / "c" / "prompts").mkdir(parents=True)
    shutil.copyfile(copy / record["contract_file"], tmp_path / "c" / record["contract_file"])
    shutil.copyfile(next((copy / "inputs").iterdir()), tmp_path / "c" / "prompts" / "p.jsonl")
    if "control_boots" in (copy / record["contract_file"]).read_text():  # to run it, the user rewrites the field
        with pytest.raises(ContractError, match="control_boots was replaced by max_boot_pairs"):
            load_contract(tmp_path / "c" / record["contract_file"], check_files=False)
        return
    loaded = load_contract(tmp_path / "c" / record["contract_file"], check_files=False)
    trusted = load_trusted([fixture / "signing.pub"], include_local=False)
    if "effective" in record:  # passes; or, once a default has changed since, is refused naming each field
        try:
            assert check_frozen(loaded, fixture / "freeze.json", trusted) == record
        except ToolDefaultsChanged as refused:
            assert ": frozen " in str(refused) and ", this tool " in str(refused), refused
            accepted = check_frozen(loaded, fixture / "freeze.json", trusted, accept_tool_defaults=True)
            assert accepted["accepted_tool_defaults"]
    else:
        with pytest.raises(ToolDefaultsChanged, match="holds no effective contract"):
            check_frozen(loaded, fixture / "freeze.json", trusted)
        assert check_frozen(loaded, fixture / "freeze.json", trusted, accept_tool_defaults=True)


def _keys(value: dict, depth: int = 2, prefix: str = "") -> set[str]:
    found = set()
    for key, inner in value.items():
        found.add(prefix + key)
        if depth > 1 and isinstance(inner, dict) and key in ("contract", "restore"):
            found |= _keys(inner, depth - 1, prefix + key + ".")
    return found


def test_a_change_of_what_bundles_and_records_hold_comes_with_its_fixture(tmp_path: Path) -> None:
    """What today's code writes into SUMMARY.json and a freeze record has the newest fixture's shape: a new key
    fails here until a fixture of the new shape is made (tests/fixtures/bundles/make.sh)."""
    from campaign import __version__
    from campaign.contracts.freeze import freeze_record
    from campaign.window.judge import LaneOutcome, build_gates, judge_bundle, summarize
    from tests.support.judging import unjudged_bundle

    newest = f"v{__version__}"
    assert newest in VERSIONS, f"no fixture of this version ({__version__}): make one with make.sh"
    bundle, loaded = unjudged_bundle(tmp_path)
    lanes = {"base": LaneOutcome(status="ran"), "spec": LaneOutcome(status="ran")}
    summary = summarize(loaded, {}, bundle.name, 0.0, "complete", lanes,
                        judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle))
    fixture_summary = load_json_strict(FIXTURES / newest / "bundle" / "SUMMARY.json")
    assert _keys(summary) - {"restore"} <= _keys(fixture_summary), _keys(summary) - _keys(fixture_summary)
    record = freeze_record(loaded)
    fixture_record = load_json_strict(FIXTURES / newest / "freeze.json")
    assert set(record) <= set(fixture_record) and set(record["effective"]) == set(fixture_record["effective"])
