"""Process lanes write boot.log through the same redactor as containers: a real child process echoing its
arguments and environment, no engine needed."""

from __future__ import annotations

import time
from pathlib import Path

from campaign.lanes.redact import MARK, Redactor
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.process import ProcessRuntime

SECRET = "sk-" + "PlantedProcessKey1234"


def test_process_output_is_redacted_as_written_and_complete_at_exit(tmp_path: Path) -> None:
    script = 'echo "args: $*"; echo "token=$TOKEN"; i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; exit 4'
    spec = LaunchSpec(lane="p", argv=["sh", "-c", script, "x", "--api-key", SECRET], env={"TOKEN": SECRET},
                      log_path=tmp_path / "boot.log")
    lane = ProcessRuntime(Redactor([SECRET])).start(spec)
    deadline = time.monotonic() + 30
    while lane.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lane.exit_code() == 4
    text = (tmp_path / "boot.log").read_text()  # read right after alive() said no: nothing may be missing
    assert text.endswith("line 1999\n") and SECRET not in text
    assert f"args: --api-key {MARK}" in text and f"token={MARK}" in text
    assert lane.stop() == 4
