"""The one Prometheus text parser, on the shapes its three readers need: the speed gate and the adapters'
summaries (labelled counters, deltas), the ruler (every counter by name and labels, time-valued ones
left out) and SGLang's metric values (a metric summed over its label sets, histograms' _sum and _count)."""

from __future__ import annotations

from campaign.gates.ruler import counter_deltas as ruler_counter_deltas
from campaign.lanes.engines.prometheus import (
    counter_deltas,
    metric_name,
    parse_prometheus,
    sample_key,
    series,
    series_sum,
    totals,
)
from campaign.lanes.engines.sglang import METRICS, SGLangAdapter

SCRAPE = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen",tp_rank="0"} 120.0
sglang:prompt_tokens_total{tp_rank="1",model_name="qwen"} 80.0

llamacpp:n_decode_total 14
llamacpp:prompt_seconds_total 2.5
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="qwen"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="qwen"} 1.75
sglang:time_to_first_token_seconds_count{model_name="qwen"} 4.0
sglang:cache_hit_rate{model_name="qwen"} 0.25 1700000000000
odd_label{path="a}b",quote="say \\"hi\\""} 7
this is not a sample
sglang:num_requests_total{model_name="qwen"} not-a-number
broken_nan NaN
"""


def test_counters_with_and_without_labels() -> None:
    samples = parse_prometheus(SCRAPE)
    assert samples["llamacpp:n_decode_total"] == 14.0
    # labels are keyed sorted, whatever order the engine wrote them in
    assert samples[sample_key("sglang:prompt_tokens_total", {"tp_rank": "1", "model_name": "qwen"})] == 80.0
    assert 'sglang:prompt_tokens_total{model_name="qwen",tp_rank="1"}' in samples
    assert sorted(labels["tp_rank"] for labels, _ in series(samples, "sglang:prompt_tokens_total")) == ["0", "1"]
    assert series_sum(samples, "sglang:prompt_tokens_total") == 200.0
    assert series_sum(samples, "sglang:prompt_tokens_total", tp_rank="0") == 120.0
    assert series_sum(samples, "sglang:spec_accept_length") is None  # absent is not zero
    assert samples['odd_label{path="a}b",quote="say \\"hi\\""}'] == 7.0
    assert metric_name('odd_label{path="a}b"}') == "odd_label"


def test_histograms_timestamps_comments_and_malformed_lines() -> None:
    samples = parse_prometheus(SCRAPE)
    assert samples['sglang:time_to_first_token_seconds_sum{model_name="qwen"}'] == 1.75
    assert samples['sglang:time_to_first_token_seconds_count{model_name="qwen"}'] == 4.0
    assert samples['sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"}'] == 4.0
    assert samples['sglang:cache_hit_rate{model_name="qwen"}'] == 0.25  # the timestamp is not the value
    # comments, the blank line, a line that is no sample, a value that is no number and NaN are skipped,
    # and one odd line loses nothing else
    assert not any(key.startswith(("#", "this", "broken_nan", "sglang:num_requests_total")) for key in samples)
    assert len(samples) == 10  # the 10 sample lines
    assert parse_prometheus("") == {}


def test_totals_sum_label_sets_per_metric_in_first_seen_order() -> None:
    samples = parse_prometheus(SCRAPE)
    summed = totals(samples)
    assert list(summed)[:2] == ["sglang:prompt_tokens_total", "llamacpp:n_decode_total"]
    assert summed["sglang:prompt_tokens_total"] == 200.0
    assert totals(samples, ["llamacpp:n_decode_total", "absent_total"]) == {"llamacpp:n_decode_total": 14.0}


def test_the_ruler_reads_counters_through_the_parser() -> None:
    before = parse_prometheus("# HELP x\nllamacpp:n_decode_total 10\nllamacpp:prompt_seconds_total 1.5\n")
    deltas = ruler_counter_deltas(before, parse_prometheus(SCRAPE))
    # counters only (no gauges, histogram parts or time-valued counters); a series first seen counts from 0
    assert deltas == {'sglang:prompt_tokens_total{model_name="qwen",tp_rank="0"}': 120.0,
                      'sglang:prompt_tokens_total{model_name="qwen",tp_rank="1"}': 80.0,
                      "llamacpp:n_decode_total": 4.0}
    assert counter_deltas(before, parse_prometheus(SCRAPE))["llamacpp:prompt_seconds_total"] == 1.0


def test_sglang_metric_values_through_the_parser() -> None:
    values = SGLangAdapter.metric_values(SCRAPE)
    assert values == {METRICS["prompt_tokens"]: 200.0, "sglang:time_to_first_token_seconds_sum": 1.75,
                      "sglang:time_to_first_token_seconds_count": 4.0, METRICS["cache_hit_rate"]: 0.25}
