"""What `campaign run` prints when a window ends, and as its daily comes back: one line for the daily (restored
and proved in how long), one per candidate (decision, the figure it rests on, the cause to act on first),
every text from the bundle escaped. The bundle is built by the real judge and summary from speed records
written by hand: a host that other processes kept busy cannot be ordered on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.fsutil import JsonlAppender, atomic_write_json
from campaign.gates.base import PAIRS_STOPPED
from campaign.receipts.publish import render_html, render_markdown
from campaign.window.judge import LaneOutcome, judge_one, summarize
from campaign.window.progress import daily_words, outcome_lines
from campaign.window.report import load_report_data
from campaign.window.schedule import pair_past_budget
from tests.support.speedrecords import TOKENS, load_gates, rates, speed_contract, write_visit

CONTRACT = speed_contract("""\
    - {name: base, role: control}
    - name: threads-2
      role: candidate
      axis: [args.threads]
      set: {args: {--threads: 2}}
    """, f"""\
    - kind: speed
      input: p
      concurrency: [1]
      max_tokens: {TOKENS}
      reps: 2
      max_boot_pairs: 3
    """) + "promotion:\n  requires: [speed]\n"
RESTORE = {"t": 1_700_000_000.0, "step": "incumbent.restore", "event": "done", "action": "started",
           "proof": {"pid": 4242, "completion": {"text": "OK"}, "proved_at": 1_700_000_001.06}}


def _busy_host_bundle(tmp_path: Path) -> tuple[Path, dict]:
    """One boot pair before the window's time budget ran out; the control's second boot VOID at every attempt:
    other processes used half of the host's CPUs. Judged, summarized and its daily restored as a window does."""
    loaded, (gate,) = load_gates(tmp_path, CONTRACT)
    write_visit(gate, "base", rates(), levels=(1,))
    write_visit(gate, "threads-2", rates(1.3), levels=(1,))
    write_visit(gate, "base@rerun1", rates(), levels=(1,), always_void=True, host_busy=0.5)
    late = pair_past_budget(seconds_left=400.0, pair_estimate_s=240.0, restore_s=600.0)
    with JsonlAppender(gate.ctx.bundle / "journal.jsonl") as journal:
        journal.append({"step": PAIRS_STOPPED, "event": "done", "after_pairs": 1, "reason": late})
    bundle = gate.ctx.bundle
    result = judge_one(bundle, gate, loaded.lanes["threads-2"], loaded.lanes["base"])
    atomic_write_json(bundle / "gates" / "speed" / "threads-2.json", result.dump())
    lanes = {"base": LaneOutcome(status="ran"), "threads-2": LaneOutcome(status="ran")}
    summary = summarize(loaded, {}, bundle.name, 0.0, "complete", lanes, [result])
    summary["restore"] = {"incumbent": "http://127.0.0.1:8000", "proved": True, "action": "started", "error": None}
    atomic_write_json(bundle / "SUMMARY.json", summary)
    atomic_write_json(bundle / "incumbent" / "restore.json", RESTORE)
    return bundle, summary


def test_a_busy_host_is_the_first_cause_and_the_measured_figure_is_shown(tmp_path: Path) -> None:
    bundle, summary = _busy_host_bundle(tmp_path)
    lines = [line.plain for line in outcome_lines(summary, bundle)]
    assert lines[0] == "daily restored and proved in 1.1 s"
    assert lines[1].startswith("threads-2: INCONCLUSIVE: speed: INCONCLUSIVE C1 81.25 vs 62.5 tok/s, candidate vs "
                               "control, one pair, no CI; bar +5%; next: other processes used 50% of the CPUs: run "
                               "on a "
                               "quiet host or pin lanes (cpus:); then a longer failsafe deadline"), lines[1]
    assert lines[2:] == [f"bundle: {bundle}"]  # one line for the daily, one per candidate, then where it is


def test_the_report_and_summary_md_name_the_busy_host_before_the_deadline(tmp_path: Path) -> None:
    bundle, _ = _busy_host_bundle(tmp_path)
    data = load_report_data(bundle)
    row = next(line for line in render_markdown(data).splitlines() if line.startswith("| threads-2 | **"))
    figure, why, step = (cell.strip() for cell in row.split(" | ")[2:5])
    assert figure == "speed C1 81.25 vs 62.5 tok/s decode\\_tok\\_s, candidate vs control, one pair, no CI"
    assert why == "speed: INCONCLUSIVE C1 81.25 vs 62.5 tok/s, candidate vs control, one pair, no CI; bar +5%"  # its headline
    assert step.startswith("other processes used 50% of the CPUs: run on a quiet host or pin lanes (cpus:); then "
                           "a longer failsafe deadline"), step
    html = render_html(data)
    decision = html.split('id="decision"')[1].split("</section>")[0]
    assert "<td>speed C1 81.25 vs 62.5 tok/s" in decision
    folded = decision.split('<details class="why" id="why:threads-2">')[1].split("</details>")[0]
    assert "other processes used 50% of the host&#39;s CPUs" in folded  # the full reasoning, one click away
    assert decision.index("run on a quiet host or pin lanes") < decision.index("a longer failsafe deadline")


def test_a_decision_without_a_figure_shows_its_reason_and_every_text_is_escaped(tmp_path: Path) -> None:
    summary = {"status": "complete", "window": "w", "restore": {"incumbent": "http://x", "proved": True},
               "candidates": {"c\x1b[2Jand": {"control": "base", "promotion_gates": ["greedy"],
                                               "gates": {"greedy": {"verdict": "FAIL",
                                                                    "reasons": ["lost \x1b]8;;http://x\x07here"]}}}},
               "lanes": {"base": {"status": "launch_failed", "cause": "readiness_timeout", "message": "\u202eboom"}},
               "warnings": ["AXIS MAY BE INERT\r\n"]}
    (tmp_path / "b").mkdir()
    lines = [line.plain for line in outcome_lines(summary, tmp_path / "b")]
    assert lines[0] == "daily restored and proved"  # no record of when: proved, without a time
    assert lines[1] == ("c\\x1b[2Jand: REFUSED: greedy: FAIL lost \\x1b]8;;http://x\\x07here; next: not promotable as it "
                        "is: it lost on greedy")
    assert lines[2] == "lane base: launch_failed (readiness_timeout): \\u202eboom"
    explained = [line.plain for line in outcome_lines(summary, tmp_path / "b", explain=True)]
    assert explained[2] == "  - lost \\x1b]8;;http://x\\x07here" and explained[:2] == lines[:2]  # --explain: in full
    assert lines[3] == "WARNING: AXIS MAY BE INERT\\r\\n"
    assert all("\x1b" not in line and "\u202e" not in line for line in lines)


def test_a_promotable_candidate_shows_each_required_gates_headline_under_it(tmp_path: Path) -> None:
    gates = {"greedy": {"verdict": "PASS", "reasons": ["self_identical 8/8 >= required 8/8"]},
             "speed": {"verdict": "PASS", "headline": "PASS C1 +44.7% [+31.4%, +59.5%], 2 pairs; bar +5%",
                       "reasons": ["C1 decode_tok_s: +44.70% [98.3% CI ...] " * 20]}}
    summary = {"status": "complete", "window": "w", "restore": {"incumbent": "http://x", "proved": True},
               "candidates": {"fast": {"control": "base", "promotion_gates": ["greedy", "speed"], "gates": gates}}}
    (tmp_path / "b").mkdir()
    lines = [line.plain for line in outcome_lines(summary, tmp_path / "b")]
    assert lines[1] == ("fast: PROMOTABLE: every required gate passed (greedy, speed); next: campaign promote BUNDLE "
                        "--candidate fast (it verifies the bundle first)")
    assert lines[2:4] == ["  greedy: PASS self_identical 8/8 >= required 8/8",
                          "  speed: PASS C1 +44.7% [+31.4%, +59.5%], 2 pairs; bar +5%"]


@pytest.mark.parametrize("record, words", [
    (RESTORE, "daily restored and proved in 1.1 s"),
    ({**RESTORE, "action": "already serving"}, "daily serving (already back when the runner came to restore it) "
                                                "and proved in 1.1 s"),
    ({"event": "done", "action": "never stopped"}, "daily never stopped: the window ended at its screens"),
    ({**RESTORE, "event": "failed", "error": "RunError: HTTP 401", "proof": None},
     "daily NOT proved back (RunError: HTTP 401): check it now (campaign daily show)"),
    (None, None),
])
def test_the_daily_is_said_from_its_restore_record(record: dict | None, words: str | None) -> None:
    assert daily_words(record) == words


def test_a_daily_not_proved_back_is_said_first_and_loudly(tmp_path: Path) -> None:
    summary = {"status": "complete", "restore": {"incumbent": "http://x", "proved": False, "error": "HTTP 401"},
               "candidates": {}}
    (first, last) = outcome_lines(summary, tmp_path)
    assert first.plain == "daily NOT proved back (HTTP 401): check it now (campaign daily show)"
    assert any("red" in str(span.style) for span in first.spans)
    assert last.plain == f"bundle: {tmp_path}"
