"""The published report in real headless Chromium: it renders, logs nothing to the console and makes
no network request of its own (Chromium's own background requests are told apart by their initiator)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from campaign.receipts.publish import publish

pytestmark = pytest.mark.integration


def open_in_chromium(page: Path) -> tuple[str, list[str], list[str]]:
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium for this test")
    with tempfile.TemporaryDirectory() as profile:
        netlog = Path(profile) / "net.json"
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", "--disable-component-update", "--disable-sync",
                               f"--user-data-dir={profile}/u", "--enable-logging=stderr", "--v=0",
                               f"--log-net-log={netlog}", "--dump-dom", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        log = json.loads(netlog.read_text())
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    requests = [e["params"].get("url") for e in log["events"]
                if types.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in e.get("params", {})
                and e["params"].get("initiator") != "not an origin"]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console, requests


def test_report_opens_without_console_errors_or_network(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    report = publish(bundle, tmp_path / "out")["html"]
    dom, console, requests = open_in_chromium(report)
    assert 'id="verdicts"' in dom and "self_identical 8/8" in dom
    assert console == [] and requests == []


def test_the_check_sees_a_report_that_reaches_out(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    report = publish(bundle, tmp_path / "out")["html"]
    bad = report.with_name("bad.html")
    bad.write_text(report.read_text().replace("<h2>Verdicts</h2>",
                                              '<h2>Verdicts</h2><img src="http://127.0.0.1:9/x.png">'))
    _, console, _ = open_in_chromium(bad)
    assert any("127.0.0.1:9" in line for line in console)
