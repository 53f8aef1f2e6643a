"""Rows of the speed gate: one lane x level (concurrency or rate) x prompt class, measured in reps.

A row attempt is valid only if its error records stay within the frozen limit, its reps agree
(spread = (max - min) / mean of the reps' aggregate tok/s within the frozen limit: a leaked warm pass
or a noisy neighbour shows as spread), and the engine's own counters account for exactly our traffic
(anything more is another client on the port); at a rate level, the client kept the schedule (late sends
within the frozen share). The same pure function decides live (to re-run a VOID
row) and offline (to judge), so the bundle re-judges to the live decision.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from campaign.gates.common.streams import StreamFacts, StreamStats, analyze_stream
from campaign.gates.speed.spec import Arrival, Level, SpeedRule, level_tag, load_order
from campaign.lanes.engines.prometheus import counter_deltas, parse_prometheus

__all__ = ["BUSY_HOST", "RowAttempt", "RowResult", "evaluate_row", "facts_from", "group_attempts", "spread"]

# how a row says other processes used the host's CPUs while it measured: the gate's decision and the
# report's next step (receipts/decision.py, by its own pattern) look for these words
BUSY_HOST = "other processes used"

Summarize = Callable[[dict[str, float]], dict[str, Any]]


@dataclass
class RowAttempt:
    level: Level
    cls: str
    attempt: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    reps: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # before / after scrape records
    live: dict[str, Any] | None = None  # the row record written when it was measured


@dataclass
class RowResult:
    status: str  # valid | VOID
    reasons: list[str]
    spread: float | None
    rep_rows: list[dict[str, Any]]  # one per rep: throughput, latency, client CPU
    stats: list[tuple[dict[str, Any], StreamStats]]  # (tags, stats) of every whole stream
    errors: list[tuple[dict[str, Any], str]]  # (tags, reason) of every error record
    engine: dict[str, Any]  # counter deltas in engine-neutral names; {} when the engine has none

    @property
    def valid(self) -> bool:
        return self.status == "valid"

    @property
    def requests_sent(self) -> int:
        """Measured requests of this attempt, whole or not: the denominator of its error records."""
        return len(self.stats) + len(self.errors)

    @property
    def median_aggregate(self) -> float | None:
        values = [r["aggregate_tok_s"] for r in self.rep_rows]
        return statistics.median(values) if values else None


def spread(values: list[float]) -> float | None:
    """(max - min) / mean: the seeds' rule (one rep at 135 against two at 700 is a 110% spread)."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / mean if mean > 0 else float("inf")


def facts_from(records: list[dict[str, Any]]) -> StreamFacts:
    for record in records:
        if record.get("kind") == "instrument":
            return StreamFacts(token_counter=record.get("token_counter"),
                               tokens_per_chunk=record.get("tokens_per_chunk"),
                               count_by_tokenizer=bool(record.get("count_by_tokenizer")))
    return StreamFacts()


def group_attempts(records: list[dict[str, Any]]) -> dict[tuple[Level, str], list[RowAttempt]]:
    """Measured records of one visit, by row and attempt (attempts in the order they ran)."""
    attempts: dict[tuple[Level, str, int], RowAttempt] = {}

    def slot(level: Any, cls: Any, attempt: Any) -> RowAttempt:
        key = (level if isinstance(level, str) else int(level), str(cls), int(attempt))
        if key not in attempts:
            attempts[key] = RowAttempt(level=key[0], cls=key[1], attempt=key[2])
        return attempts[key]

    for record in records:
        kind = record.get("kind")
        if kind in ("rep", "metrics", "row"):
            row = slot(record["level"], record["class"], record["attempt"])
            if kind == "rep":
                row.reps.append(record)
            elif kind == "metrics":
                row.metrics[str(record.get("when"))] = record
            else:
                row.live = record
        elif "events" in record or "error" in record:
            tags = record.get("tags") or {}
            if tags.get("phase") == "measure":
                slot(tags["level"], tags["class"], tags["attempt"]).requests.append(record)
    grouped: dict[tuple[Level, str], list[RowAttempt]] = {}
    for key in sorted(attempts, key=lambda k: (load_order(k[0]), k[1], k[2])):
        grouped.setdefault((key[0], key[1]), []).append(attempts[key])
    return grouped


def evaluate_row(row: RowAttempt, *, per_rep: int, reps: int, max_tokens: int, facts: StreamFacts,
                 rule: SpeedRule, summarize: Summarize | None, arrival: Arrival | None = None) -> RowResult:
    reasons: list[str] = []
    stats: list[tuple[dict[str, Any], StreamStats]] = []
    errors: list[tuple[dict[str, Any], str]] = []
    for record in row.requests:
        tags = record.get("tags") or {}
        result, problem = analyze_stream(record, max_tokens, facts)
        if result is None:
            errors.append((tags, problem or "unknown"))
        else:
            stats.append((tags, result))
    expected = reps * per_rep
    if len(row.requests) != expected:
        reasons.append(f"{len(row.requests)} request records, expected {expected} "
                       f"({reps} reps x {per_rep} requests): the row did not finish")
    if len(errors) > rule.max_errors:
        first = errors[0]
        reasons.append(f"{len(errors)} error records > limit {rule.max_errors}, e.g. prompt "
                       f"{first[0].get('prompt')} rep {first[0].get('rep')}: {first[1]}")

    rep_rows = _rep_rows(row, stats, errors, arrival)
    busy = [r for r in rep_rows if rule.max_host_busy is not None and (r["host_other_share"] or 0) > rule.max_host_busy]
    if busy:
        reasons.append(f"{BUSY_HOST} {busy[0]['host_other_share']:.0%} of the host's CPUs during rep "
                       f"{busy[0]['rep']} (limit {rule.max_host_busy:.0%}): another tenant on the host")
    reasons += _client_bottleneck(rep_rows, rule) + _late_sends(rep_rows, arrival, row.level)
    if len(rep_rows) != reps:
        reasons.append(f"{len(rep_rows)} reps recorded, expected {reps}")
    row_spread = spread([r["aggregate_tok_s"] for r in rep_rows])
    if row_spread is not None and row_spread > rule.max_spread:
        values = ", ".join(f"{r['aggregate_tok_s']:.1f}" for r in rep_rows)
        reasons.append(f"spread {row_spread:.1%} over reps ({values} tok/s) > limit {rule.max_spread:.0%}")

    engine, traffic = _engine_traffic(row, stats, errors, max_tokens, summarize)
    reasons += traffic
    return RowResult(status="VOID" if reasons else "valid", reasons=reasons, spread=row_spread, rep_rows=rep_rows,
                     stats=stats, errors=errors, engine=engine)


def _rep_rows(row: RowAttempt, stats: list[tuple[dict[str, Any], StreamStats]],
              errors: list[tuple[dict[str, Any], str]], arrival: Arrival | None) -> list[dict[str, Any]]:
    """One row per rep: throughput, latency, the client's CPU and, at a rate level, its late sends."""
    rep_rows = []
    for rep_record in sorted(row.reps, key=lambda r: r["rep"]):
        mine = [s for tags, s in stats if tags.get("rep") == rep_record["rep"]]
        failed = sum(1 for tags, _ in errors if tags.get("rep") == rep_record["rep"])
        tokens = sum(s.tokens for s in mine)
        duration = float(rep_record["duration_s"])
        aggregate = tokens / duration if duration > 0 else 0.0
        decode = [s.decode_tok_s for s in mine if s.decode_tok_s is not None]
        cpu = float(rep_record.get("client_cpu_s") or 0.0)
        late = [tags["late_s"] for tags, _ in [*stats, *errors] if tags.get("rep") == rep_record["rep"]
                and arrival is not None and isinstance(tags.get("late_s"), (int, float))
                and tags["late_s"] > arrival.late_after_s]
        rep_rows.append({
            "rep": rep_record["rep"], "requests": len(mine) + failed, "errors": failed, "output_tokens": tokens,
            "duration_s": duration, "aggregate_tok_s": aggregate,
            "per_user_tok_s": aggregate / row.level if isinstance(row.level, int) else None,
            "late_sends": len(late), "latest_send_s": max(late, default=None),
            "median_decode_tok_s": statistics.median(decode) if decode else None,
            "median_ttft_s": statistics.median([s.ttft_s for s in mine]) if mine else None,
            "median_effective_tok_s": statistics.median([s.effective_tok_s for s in mine]) if mine else None,
            "client_cpu_s": cpu, "client_cpu_share": cpu / duration if duration > 0 else None,
            "client_cpu_ms_per_1k_tokens": 1e6 * cpu / tokens if tokens else None,
            "host_other_share": _others(rep_record, cpu),
            "client_loop_lag_p99_ms": rep_record.get("loop_lag_p99_ms"),
        })
    return rep_rows


def _client_bottleneck(rep_rows: list[dict[str, Any]], rule: SpeedRule) -> list[str]:
    """A client near a full core, or whose loop woke up late, timed its own queue, not the lane."""
    reasons = []
    for row in rep_rows:
        share, lag = row["client_cpu_share"], row["client_loop_lag_p99_ms"]
        if rule.max_client_cpu_share is not None and share is not None and share > rule.max_client_cpu_share:
            reasons.append(f"the client was the bottleneck: it used {share:.0%} of a core during rep {row['rep']} "
                           f"(limit {rule.max_client_cpu_share:.0%})")
            break
        if rule.max_loop_lag_ms is not None and lag is not None and lag > rule.max_loop_lag_ms:
            reasons.append(f"the client was the bottleneck: its event loop woke up {lag:.1f} ms late (p99) during "
                           f"rep {row['rep']} (limit {rule.max_loop_lag_ms:g} ms)")
            break
    return reasons


def _late_sends(rep_rows: list[dict[str, Any]], arrival: Arrival | None, level: Level) -> list[str]:
    """At a rate level, a rep whose client sent too many requests late did not offer the stated load."""
    if arrival is None or isinstance(level, int):
        return []
    for row in rep_rows:
        if row["requests"] and row["late_sends"] / row["requests"] > arrival.max_late_share:
            return [f"the client could not keep the {level_tag(level)} schedule: {row['late_sends']} of "
                    f"{row['requests']} sends in rep {row['rep']} went out more than {arrival.late_after_s * 1000:g} ms "
                    f"late (up to {row['latest_send_s'] * 1000:.0f} ms; limit {arrival.max_late_share:.0%})"]
    return []


def _others(rep: dict[str, Any], client_cpu: float) -> float | None:
    """Share of the host's CPU time used by anything but the lane and this client during a rep."""
    host, lane, cpus = (rep.get(k) for k in ("host_busy_s", "lane_cpu_s", "host_cpus"))
    window = rep.get("host_window_s") or rep.get("duration_s")
    if host is None or lane is None or cpus is None or not window:
        return None
    return max(0.0, (host - lane - client_cpu) / (window * cpus))


def _engine_traffic(row: RowAttempt, stats: list[tuple[dict[str, Any], StreamStats]],
                    errors: list[tuple[dict[str, Any], str]], max_tokens: int,
                    summarize: Summarize | None) -> tuple[dict[str, Any], list[str]]:
    """The engine's counter deltas over the row, and reasons to void it if they show traffic that is
    not ours (or an engine that restarted, or counters that never settled)."""
    before, after = row.metrics.get("before"), row.metrics.get("after")
    if before is None and after is None:
        return {}, []
    for record in (before, after):
        if record is None or record.get("error"):
            return {}, [f"metrics scrape failed: {(record or {}).get('error', 'missing')}"]
    assert before is not None and after is not None  # for mypy: the loop returned on either missing
    if before.get("text") is None or after.get("text") is None:  # the engine exports none
        return {}, []
    deltas = counter_deltas(parse_prometheus(before["text"]), parse_prometheus(after["text"]))
    summary = summarize(deltas) if summarize else {}
    reasons = []
    if before.get("busy") or after.get("busy"):
        reasons.append(f"the engine had requests in flight {'before ours started' if before.get('busy') else ''}"
                       f"{' and ' if before.get('busy') and after.get('busy') else ''}"
                       f"{'after ours finished' if after.get('busy') else ''}: another client on the port")
    negative = sorted(k for k, v in deltas.items() if v < 0 and k.endswith("_total"))
    if negative:
        reasons.append(f"counter {negative[0]} went down during the row: the engine restarted, or another "
                       "client on the port reset it")
    ours = sum(s.tokens for _, s in stats)
    slack = len(errors) * max_tokens  # a failed stream's tokens are counted by the engine, not by us
    generated = summary.get("generated_tokens")
    if generated is not None and not ours <= generated <= ours + slack:
        reasons.append(f"the engine generated {generated:g} tokens during the row, our records account for "
                       f"{ours}{f' to {ours + slack}' if slack else ''}: another client on the port")
    requests = summary.get("requests")
    if requests is not None and not len(stats) <= requests <= len(row.requests):
        reasons.append(f"the engine counted {requests:g} requests during the row, we sent {len(row.requests)}: "
                       "another client on the port")
    return summary, reasons
