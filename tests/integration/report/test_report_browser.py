"""The published report in real headless Chromium: it renders, logs nothing to the console and makes
no network request of its own (Chromium's own background requests are told apart by their initiator)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.window.report import publish  # the hand-made bundle is of the older shape: its gates derive their plots
from tests.support.browser import labelled_plots, open_in_chromium

pytestmark = pytest.mark.integration


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
    assert labelled_plots(dom), "no plot in the report"


def test_the_decision_table_shows_headlines_and_its_details_open(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    """A refused candidate whose gate reasoned at length: its cells in the decision table stay one short line;
    the full reasoning is folded under it, and a link to it opens it (Chromium opens a closed <details>
    when the page's address names an element in it)."""
    import html
    import re

    paragraph = "the candidate diverges at prompt p3 after 41 tokens; " * 12
    summary_path = bundle / "SUMMARY.json"
    summary = json.loads(summary_path.read_text())
    summary["candidates"]["lossy"] = {"control": "base", "promotion_gates": ["greedy"], "overall": "FAIL", "gates": {
        "greedy": {"verdict": "FAIL", "reasons": [paragraph, "self_identical 5/8 < required 8/8; the control's own "
                                                             "is 8/8, and the candidate diverges where the control "
                                                             "does not on 3 prompts"]}}}
    summary_path.write_text(json.dumps(summary))
    report = publish(bundle, tmp_path / "out")["html"]
    closed, console, requests = open_in_chromium(report)
    assert console == [] and requests == []
    row = closed.split('data-candidate="lossy"')[1].split("</tr>")[0]
    cells = [html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<details.*?</details>", "", cell, flags=re.DOTALL)))
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.DOTALL)]
    assert cells[3].startswith("greedy: FAIL self_identical 5/8 < required 8/8"), cells
    assert all(len(cell) <= 120 for cell in cells), cells  # a headline each: the gate's name and <= 100 characters
    assert '<details class="why" id="why:lossy">' in row and paragraph.strip()[:60] in html.unescape(row)
    opened, _, _ = open_in_chromium(report, fragment="why:lossy:reasons")
    assert re.search(r'<details class="why" id="why:lossy" open="">', opened), "the details did not open"


def test_the_check_sees_a_report_that_reaches_out(bundle: Path, tmp_path: Path) -> None:  # noqa: F811
    report = publish(bundle, tmp_path / "out")["html"]
    bad = report.with_name("bad.html")
    bad.write_text(report.read_text().replace("<h2>Verdicts</h2>",
                                              '<h2>Verdicts</h2><img src="http://127.0.0.1:9/x.png">'))
    _, console, _ = open_in_chromium(bad)
    assert any("127.0.0.1:9" in line for line in console)


def test_the_history_of_windows_opens_offline_with_its_plots_and_working_links(tmp_path: Path) -> None:
    """`campaign publish --index` of the three shipped fixture windows, opened in Chromium: one row per
    window, the control's figure over time plotted with its labels as text, every link a published file."""
    import html
    import re

    from campaign.signing import load_trusted
    from campaign.window.report import publish_into_index

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"
    versions = ("v0.1.0", "v0.1.0-control-boots", "v0.2.0")
    trusted = load_trusted([fixtures / v / "signing.pub" for v in versions], include_local=False)
    for version in versions:
        written, _ = publish_into_index(fixtures / version / "bundle", tmp_path / "history", trusted)
    dom, console, requests = open_in_chromium(written["html"])
    assert console == [] and requests == []
    assert dom.split('id="windows"')[1].split("</table>")[0].count("<tr>") == 1 + 3
    assert "fixture: greedy control_self_identical" in labelled_plots(dom)
    links = [html.unescape(href) for href in re.findall(r'<a href="([^"]+)"', dom)]
    assert len(links) == 9 and all((tmp_path / "history" / link).is_file() for link in links)
