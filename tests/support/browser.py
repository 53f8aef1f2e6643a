"""A published report opened in real headless Chromium (Debian's chromium, installed by .ci/run): the DOM
after scripts would have run, the console, and every network request the page itself made."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["labelled_plots", "open_in_chromium"]


def open_in_chromium(page: Path, fragment: str = "") -> tuple[str, list[str], list[str]]:
    """``fragment``: the page opened at that element, as a link to it opens it."""
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium for this test")
    with tempfile.TemporaryDirectory() as profile:
        netlog = Path(profile) / "net.json"
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", "--disable-component-update", "--disable-sync",
                               f"--user-data-dir={profile}/u", "--enable-logging=stderr", "--v=0",
                               f"--log-net-log={netlog}", "--dump-dom", page.as_uri() + (f"#{fragment}" if fragment else "")],
                              capture_output=True, text=True, timeout=120)
        log = json.loads(netlog.read_text())
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    requests = [e["params"].get("url") for e in log["events"]
                if types.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in e.get("params", {})
                and e["params"].get("initiator") != "not an origin"]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console, requests


def labelled_plots(dom: str) -> list[str]:
    """The title of every plot in the DOM, after checking that its title and both axis labels are text in
    its SVG (what a reader sees and searches)."""
    figures = re.findall(r'<figure class="plot" data-title="([^"]*)" data-xlabel="([^"]*)" data-ylabel="([^"]*)">'
                         r'(.*?)</figure>', dom, flags=re.DOTALL)
    titles = []
    for title, xlabel, ylabel, body in figures:
        texts = html.unescape(" ".join(re.findall(r"<text[^>]*>([^<]*)</text>", body)))
        assert "<svg" in body and html.unescape(title)[:40] in texts, title
        assert html.unescape(xlabel) in texts and html.unescape(ylabel) in texts, title
        titles.append(html.unescape(title))
    return titles
