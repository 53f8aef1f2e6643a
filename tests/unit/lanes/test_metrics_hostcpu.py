"""Prometheus text parsing and counter deltas (pure), the llama-server adapter's summary of them
(on text copied from a real llama-server /metrics with speculative decoding on), and host CPU time."""

from __future__ import annotations

from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.prometheus import counter_deltas, parse_prometheus

BEFORE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 39
llamacpp:prompt_tokens_cached_total 0
llamacpp:tokens_predicted_total 12
llamacpp:spec_decode_num_draft_tokens_total 0
llamacpp:spec_decode_num_accepted_tokens_total 0
llamacpp:spec_decode_num_drafts_total 0
llamacpp:requests_processing 0
"""

AFTER = """\
llamacpp:prompt_tokens_total 140
llamacpp:prompt_tokens_cached_total 24
llamacpp:tokens_predicted_total 67
llamacpp:spec_decode_num_draft_tokens_total 48
llamacpp:spec_decode_num_accepted_tokens_total 43
llamacpp:spec_decode_num_drafts_total 1
llamacpp:requests_processing 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 1
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="10"} 1
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 0
some_histogram_bucket{le="+Inf",model="a b"} 7 1700000000
not a sample line
"""


def test_parse_keeps_labels_sorted_and_skips_comments() -> None:
    samples = parse_prometheus(AFTER)
    assert samples["llamacpp:tokens_predicted_total"] == 67
    assert samples['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="10"}'] == 1
    assert samples['some_histogram_bucket{le="+Inf",model="a b"}'] == 7  # timestamp dropped
    assert not any(key.startswith("#") or key.startswith("not") for key in samples)


def test_deltas_count_new_series_from_zero_and_keep_resets() -> None:
    deltas = counter_deltas(parse_prometheus(BEFORE), parse_prometheus(AFTER))
    assert deltas["llamacpp:tokens_predicted_total"] == 55
    assert deltas['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 1
    reset = counter_deltas(parse_prometheus(AFTER), parse_prometheus(BEFORE))
    assert reset["llamacpp:tokens_predicted_total"] == -55  # an engine restart is visible, not hidden


def test_llamacpp_summary_names_and_prompt_token_total() -> None:
    summary = LlamaCppAdapter().metric_summary(counter_deltas(parse_prometheus(BEFORE), parse_prometheus(AFTER)))
    assert summary["generated_tokens"] == 55
    assert summary["prompt_tokens"] == 101 + 24  # the engine's counter excludes cached tokens
    assert summary["cached_prompt_tokens"] == 24
    assert (summary["spec_drafts"], summary["spec_draft_tokens"], summary["spec_accepted_tokens"]) == (1, 48, 43)
    assert list(summary["spec_accepted_per_position"]) == ["0", "2", "10"]  # numeric order
    assert "requests" not in summary  # llama-server has no request counter
    assert LlamaCppAdapter().metrics_busy(parse_prometheus("llamacpp:requests_processing 2\n"))


def test_host_and_session_cpu_seconds_grow_with_work() -> None:
    # A child in a session of its own, as a process lane is started: the test's own session leader may
    # live outside this PID namespace (CI runs under one), so the product's case is the one measured.
    import subprocess
    import sys
    import time

    from campaign.lanes.hostcpu import host_busy_seconds, session_cpu_seconds

    host = host_busy_seconds()
    burner = subprocess.Popen(
        [sys.executable, "-c",
         "import time,sys\nend=time.process_time()+0.4\nwhile time.process_time()<end: pass\n"
         "print('done', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert burner.stdout.readline().strip() == "done"
        assert session_cpu_seconds(burner.pid) >= 0.3
        assert host_busy_seconds() - host >= 0.3
    finally:
        burner.kill()
        burner.wait()
    time.sleep(0.05)
    assert session_cpu_seconds(burner.pid) is None  # leader gone
    assert session_cpu_seconds(2**22 + 12345) is None  # no such session
