"""`campaign daily stop` on a real daily llama-server: the one `campaign daily start` started is stopped; one
started by hand under the same pidfile is refused (one line, exit 2) unless --force. (After a window's restore,
a promotion and rollbacks: tests/integration/window/test_promote.py; a container: test_docker_daily.py.)"""

from __future__ import annotations

import os
import subprocess

import pytest

from campaign.daily.state import process_start_time
from tests.support.cli import campaign
from tests.support.contracts import MODEL
from tests.support.daily import daily_pid, serves, serves_within

pytestmark = pytest.mark.integration


def test_daily_stop_stops_the_daily_it_started_and_refuses_one_started_by_hand(daily: dict,
                                                                                llama_server: str) -> None:
    contract, port = str(daily["contract"]), daily["port"]
    pid = daily_pid(daily["root"])
    stopped = campaign("daily", "stop", contract)
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"daily stopped: pid {pid}", stopped.stderr
    assert process_start_time(pid) is None and not serves(port)
    again = campaign("daily", "stop", contract)
    assert again.returncode == 0 and "nothing to stop" in again.stdout

    # the same engine started by hand under the same pidfile: not the tool's to stop
    by_hand = subprocess.Popen([llama_server, "-m", str(MODEL), "--port", str(port), "--ctx-size", "512",
                                "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        (daily["root"] / "daily.pid").write_text(f"{by_hand.pid}\n")
        assert serves_within(port, 60)
        refused = campaign("daily", "stop", contract)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert f"daily pid {by_hand.pid}" in refused.stderr and "--force" in refused.stderr
        assert by_hand.poll() is None and serves(port)
        forced = campaign("daily", "stop", contract, "--force")
        assert forced.returncode == 0 and "(not started by campaign; --force)" in forced.stdout, forced.stderr
        assert by_hand.wait(timeout=30) is not None and not serves(port)
    finally:
        if by_hand.poll() is None:
            os.killpg(by_hand.pid, 9)
            by_hand.wait()

