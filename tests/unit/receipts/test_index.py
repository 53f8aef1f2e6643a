"""A history of windows (`campaign publish --index`, `campaign index`): built from the shipped fixture bundles
(real windows of three tool versions, one contract), verified on the way in, rebuilt from the archives alone
byte for byte, and every text from a bundle escaped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign.cli import app
from campaign.errors import InputError, VerifyError
from campaign.receipts.index import render_index, window_entry
from campaign.signing import load_trusted
from campaign.window.report import load_report_data, publish_into_index, rebuild_index

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"
VERSIONS = ("v0.1.0", "v0.1.0-control-boots", "v0.2.0")


def _trusted():
    return load_trusted([FIXTURES / v / "signing.pub" for v in VERSIONS], include_local=False)


@pytest.fixture
def published(tmp_path: Path) -> Path:
    folder = tmp_path / "history"
    for version in reversed(VERSIONS):  # published newest first: the index still lists the oldest first
        publish_into_index(FIXTURES / version / "bundle", folder, _trusted())
    return folder


def test_every_published_window_is_listed_oldest_first_with_its_decision_signer_and_files(published: Path) -> None:
    index = json.loads((published / "index.json").read_text())
    assert index["schema"] == "campaign.index/v1"
    windows = index["windows"]
    assert [w["started_at"] for w in windows] == sorted(w["started_at"] for w in windows) and len(windows) == 3
    for window in windows:
        summary = json.loads((published / "windows" / window["window"] / "report.html").parent.joinpath(
            "entry.json").read_text())
        assert summary == window
        assert window["contract"] == {"name": "fixture", "version": 1}
        assert [(c["name"], c["decision"]) for c in window["candidates"]] == [("spec", "PROMOTABLE")]
        assert len(window["signer"]) == 64
        for link in ("report", "summary", "archive"):
            assert (published / window[link]).is_file()
    page = (published / "index.html").read_text()
    assert page.count("PROMOTABLE</span>") == 3 and "<svg" in page


def test_the_controls_figures_are_kept_per_contract_over_time(published: Path) -> None:
    history = json.loads((published / "index.json").read_text())["contracts"]["fixture"]
    identical = history["greedy control_self_identical"]
    assert [(p["value"], p["denominator"]) for p in identical] == [(2, 2)] * 3
    decode = history["speed C1.control.decode_tok_s"]  # only the speed fixture has a speed gate
    assert len(decode) == 1 and decode[0]["value"] > 0 and decode[0]["unit"] == "tok/s"
    assert not any("control_drift" in key or "rerun" in key for key in history)


def test_rebuilding_from_the_archives_alone_gives_the_same_page(published: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(published, copy)
    for made in [copy / "index.json", copy / "index.html", *copy.glob("windows/*/entry.json")]:
        made.unlink()
    written, left = rebuild_index(copy, _trusted())
    assert left == []
    assert written["html"].read_bytes() == (published / "index.html").read_bytes()
    assert written["index"].read_bytes() == (published / "index.json").read_bytes()


def test_an_archive_that_no_longer_verifies_leaves_the_index_with_the_reason(published: Path) -> None:
    place = sorted((published / "windows").iterdir())[0]
    (place / f"{place.name}.tar.gz").write_bytes(b"not an archive")
    _, left = rebuild_index(published, _trusted())
    assert len(left) == 1 and left[0].startswith(f"{place.name}: left out of the index: ")
    windows = json.loads((published / "index.json").read_text())["windows"]
    assert place.name not in [w["window"] for w in windows] and len(windows) == 2


def test_an_untrusted_signer_never_enters(tmp_path: Path) -> None:
    stranger = load_trusted([], include_local=False)
    with pytest.raises(VerifyError, match="no valid signature by a trusted key"):
        publish_into_index(FIXTURES / "v0.2.0" / "bundle", tmp_path / "history", stranger)
    assert not (tmp_path / "history").exists()


def test_a_window_id_that_would_name_another_folder_is_refused(tmp_path: Path) -> None:
    data = load_report_data(FIXTURES / "v0.2.0" / "bundle")
    for bad in ("../x", "a/b", "", ".hidden", "x" * 300):
        data["summary"]["window"] = bad
        with pytest.raises(InputError, match="is not a window id this tool writes"):
            window_entry(data, "k" * 64)


def test_text_from_a_bundle_is_shown_escaped() -> None:
    hostile = "<script>alert(1)</script>"
    entry = {"window": "w1", "started_at": "2026-12-01T00:00:00Z", "status": "complete", "signer": "k" * 64,
             "contract": {"name": hostile, "version": 1}, "report": "windows/w1/report.html",
             "summary": "windows/w1/SUMMARY.md", "archive": "windows/w1/w1.tar.gz",
             "candidates": [{"name": hostile, "decision": "REFUSED", "gate": hostile, "reason": "", "figure": hostile,
                             "suspect": ""}], "control": {}}
    page = render_index({"schema": "campaign.index/v1", "windows": [entry], "contracts": {hostile: {}}})
    assert "<script>" not in page and page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4


def test_the_command_line_publishes_into_an_index_and_rebuilds_it(tmp_path: Path) -> None:
    runner, folder = CliRunner(), tmp_path / "history"
    trust = [arg for v in VERSIONS for arg in ("--trust", str(FIXTURES / v / "signing.pub"))]
    done = runner.invoke(app, ["publish", str(FIXTURES / "v0.2.0" / "bundle"), "--index", str(folder), *trust])
    assert done.exit_code == 0, done.output
    assert f"html: {folder / 'index.html'}" in done.output
    both = runner.invoke(app, ["publish", str(FIXTURES / "v0.2.0" / "bundle"), "--index", str(folder),
                               "--out", str(tmp_path / "o"), *trust])
    assert both.exit_code == 2 and "--out and --index: give one" in both.output
    again = runner.invoke(app, ["index", str(folder), *trust])
    assert again.exit_code == 0 and "index: " in again.output
    missing = runner.invoke(app, ["index", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no such folder" in missing.output
