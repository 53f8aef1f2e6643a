"""What the promoted daily keeps: the lane's --host and --port mapped back to the daily's, and validate's
one line per candidate measured elsewhere than the daily's endpoint."""

from __future__ import annotations

import textwrap
from pathlib import Path

from campaign.contracts.load import load_contract
from campaign.promotion.identity import map_listen, promoted_daily_summary
from tests.support.contracts import demo_like


def test_listen_options_take_the_dailys_values_or_go_where_the_daily_gave_none() -> None:
    words = ["llama-server", "-m", "m", "--host", "127.0.0.1", "--port", "18442", "--threads", "2"]
    at = {"--host": 3, "--port": 5}
    assert map_listen(words, at, ["llama-server", "--host", "0.0.0.0", "--port=8000"]) == [
        "llama-server", "-m", "m", "--host", "0.0.0.0", "--port", "8000", "--threads", "2"]
    assert map_listen(words, at, ["llama-server", "--port", "8000"]) == [
        "llama-server", "-m", "m", "--port", "8000", "--threads", "2"]


def contract(tmp_path: Path, lane_port: int, daily: str) -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "p.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    path = tmp_path / f"c{lane_port}.yaml"
    path.write_text(textwrap.dedent(demo_like(lane_port)) + textwrap.dedent(daily))
    return path


def test_validate_says_what_the_promoted_daily_will_be_only_when_the_lane_listens_elsewhere(tmp_path: Path) -> None:
    daily = """\
        incumbent:
          runtime: docker
          container: glm-daily
          endpoint: http://127.0.0.1:30006
        failsafe: {deadline: 10m}
        """
    (line,) = promoted_daily_summary(load_contract(contract(tmp_path, 18442, daily), check_files=False))
    assert line.startswith("lane spec is measured at 127.0.0.1:18442 on this host, the daily answers at "
                           "http://127.0.0.1:30006: promoted, spec runs as container glm-daily with the daily's name")
    assert "published ports, engine host and port arguments, restart policy" in line
    assert "only args.spec-type, args.spec-draft-n-max" in line
    assert promoted_daily_summary(load_contract(contract(tmp_path, 30006, daily), check_files=False)) == []
