"""The peer check's pure parts: the arrival schedule both clients replay is the one `vllm bench serve` draws,
llama-server's per-request timings are read from its log, and the tolerance says what it states."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def peer_check():
    spec = importlib.util.spec_from_file_location("peer_check", ROOT / "benchmarks" / "peer_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_check"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("peer_check", None)


def test_the_shared_schedule_is_vllms_draw(peer_check) -> None:
    # as vllm/benchmarks/serve.py get_request draws it: the global numpy state seeded in main_async, one
    # gamma(burstiness, 1 / (rate * burstiness)) gap per request, cumulated, rescaled to end at n / rate
    np.random.seed(7)
    gaps = [np.random.gamma(shape=1.0, scale=1.0 / 2.0) for _ in range(24)]
    delays = list(np.cumsum(gaps))
    expected = [d * (24 / 2.0) / delays[-1] for d in delays]
    got = peer_check.vllm_poisson_offsets(24, 2.0, 7)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got[-1] == pytest.approx(12.0) and got[0] > 0 and got == sorted(got)
    assert peer_check.vllm_poisson_offsets(24, 2.0, 8) != got


LOG = """\
0.05.384.977 I slot print_timing: id  3 | task 0 | prompt eval time =     568.52 ms /    38 tokens (   14.96 ms per token,    66.84 tokens per second)
0.05.385.024 I slot print_timing: id  3 | task 0 |        eval time =     694.79 ms /    32 tokens (   22.41 ms per token,    44.62 tokens per second)
0.05.385.040 I slot print_timing: id  3 | task 0 |       total time =    1263.30 ms /    70 tokens
0.06.001.000 I slot print_timing: id  1 | task 12 | prompt eval time =      30.00 ms /    40 tokens (    0.75 ms per token,  1333.33 tokens per second)
0.06.100.000 I slot print_timing: id  2 | task 9 | prompt eval time =      31.00 ms /    38 tokens (    0.82 ms per token,  1225.81 tokens per second)
0.06.100.100 I slot print_timing: id  2 | task 9 |        eval time =     310.00 ms /    32 tokens (   10.00 ms per token,   100.00 tokens per second)
"""


def test_server_timings_are_read_per_task_from_the_log(peer_check) -> None:
    timings = peer_check.server_timings(LOG)
    # task 12 has not finished (no eval line): left out; the rest in task order
    assert [t["task"] for t in timings] == [0, 9]
    first = timings[0]
    assert first["prompt_ms"] == 568.52 and first["predicted_ms"] == 694.79 and first["predicted_n"] == 32
    # generation time over the 31 steps after the first token, as llama-server's predicted_per_token_ms
    assert first["predicted_per_token_ms"] == pytest.approx(694.79 / 31)


def test_the_tolerance_is_relative_with_an_absolute_floor(peer_check) -> None:
    assert peer_check.within(104.9, 100.0, 50) and not peer_check.within(111.0, 100.0, 50)
    assert peer_check.within(24.0, 20.0, 50)  # 4 ms: under the 5 ms floor though 20%
    assert peer_check.within(119.0, 100.0, 90) and not peer_check.within(121.0, 100.0, 99)
    assert peer_check.within(29.0, 20.0, 95)  # 9 ms: under the 10 ms floor of a tail


def test_a_tail_under_the_gates_sample_rule_is_thin(peer_check) -> None:
    assert not peer_check.thin(64, 50) and not peer_check.thin(64, 90)
    assert peer_check.thin(64, 95) and peer_check.thin(499, 99) and not peer_check.thin(500, 99)


def test_the_clients_take_turns_so_a_linear_drift_cancels(peer_check) -> None:
    assert peer_check._order(2, "ABBA") == [(0, "campaign"), (0, "vllm"), (1, "vllm"), (1, "campaign")]
    assert peer_check._order(2, "ABAB") == [(0, "campaign"), (0, "vllm"), (1, "campaign"), (1, "vllm")]
