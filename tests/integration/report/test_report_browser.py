"""The published report in real headless Chromium: it renders, logs nothing to the console and makes
no network request of its own (Chromium's own background requests are told apart by their initiator)."""

from __future__ import annotations

import html
import json
import re
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


def test_the_report_opens_with_the_decision_and_every_plot_is_titled_and_labelled(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    """The decision header says what SUMMARY.json says; each plot's title and axis labels are text in its
    SVG; markup in a contract name, a candidate name or a reference text is shown as text, never run."""
    from campaign.receipts.decision import decisions

    hostile = "<script>document.title='pwned'</script>"
    summary_path = bundle / "SUMMARY.json"
    summary = json.loads(summary_path.read_text())
    summary["contract"]["name"] = f"demo {hostile}"
    summary["candidates"][f"spec{hostile}"] = summary["candidates"]["spec"]
    summary_path.write_text(json.dumps(summary))
    dom, console, requests = open_in_chromium(publish(bundle, tmp_path / "out")["html"])
    assert console == [] and requests == []
    assert dom.split("</title>")[0].split("<title>")[1] != "pwned" and "<script" not in dom  # shown, never run
    assert dom.count("&lt;script&gt;document.title='pwned'&lt;/script&gt;") >= 3  # name, title, candidate
    header = dom.split('id="decision"')[1].split("</section>")[0]
    for decision in decisions(summary):
        assert f'data-decision="{decision.decision}"' in header and decision.next_step.split()[0] in header
    figures = re.findall(r'<figure class="plot" data-title="([^"]*)" data-xlabel="([^"]*)" data-ylabel="([^"]*)">'
                         r'(.*?)</figure>', dom, flags=re.DOTALL)
    assert figures, "no plot in the report"
    for title, xlabel, ylabel, body in figures:
        texts = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", body))
        assert "<svg" in body and html.unescape(title)[:40] in html.unescape(texts), title
        assert html.unescape(xlabel) in html.unescape(texts) and html.unescape(ylabel) in html.unescape(texts)


def test_the_check_sees_a_report_that_reaches_out(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    report = publish(bundle, tmp_path / "out")["html"]
    bad = report.with_name("bad.html")
    bad.write_text(report.read_text().replace("<h2>Verdicts</h2>",
                                              '<h2>Verdicts</h2><img src="http://127.0.0.1:9/x.png">'))
    _, console, _ = open_in_chromium(bad)
    assert any("127.0.0.1:9" in line for line in console)
