"""The ruler on what SGLang 0.5.23 shows it. The thinking switch, over records shaped as its live half writes
them: a switch proven only by the text the model generated, never by how the engine's reasoning parser split
the same text. And SGLang's boot log, whose stamps, timings, memory and client addresses change every boot.

SGLang 0.5.23 with ``--reasoning-parser qwen3`` on SmolLM2's template (which has no thinking branch) is the case
recorded in tests/data/sglang/: the parser thinks unless ``enable_thinking`` is false, so the same answer comes
back as ``reasoning_content`` with the switch on and as ``content`` with it off. The template ignored the switch;
only the labels moved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from campaign.fsutil import JsonlAppender
from campaign.gates.ruler import generated_text, normalize_boot_log
from tests.support.speedrecords import load_gates, speed_contract

DATA = Path(__file__).parents[2] / "data" / "sglang"


def recorded_message(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())["response"]["choices"][0]["message"]


def ruler_over(tmp_path: Path, thinking: dict[str, dict[str, dict[str, Any]]]):
    """A ruler with a thinking switch judged over hand-written records; ``thinking``: lane -> switch -> message."""
    body = speed_contract("""\
        - {name: base, role: control}
        - name: thinks
          role: candidate
          axis: [args.chat-template]
          set: {args: {--chat-template: thinking.jinja}}
        """, "- {kind: ruler, input: p, probes: 1, exercise: [], thinking: {max_tokens: 16}}", name="t-ruler-thinking")
    loaded, (ruler,) = load_gates(tmp_path, body)
    for lane, switches in thinking.items():
        with JsonlAppender(ruler.ctx.raw_path(ruler.gate_id, lane)) as sink:
            for phase in ("before", "after"):
                sink.append({"derived": "metrics", "tags": {"purpose": "metrics", "phase": phase}, "text": "",
                             "error": None})
            sink.append({"tags": {"purpose": "probe", "item": "p1"}, "elapsed_s": 1.0,
                         "response": {"choices": [{"message": {"content": f"{lane} reply"}}],
                                      "usage": {"completion_tokens": 8}}})
            for switch, message in switches.items():
                sink.append({"tags": {"purpose": "thinking", "item": "p1", "switch": switch},
                             "response": {"choices": [{"message": message}]}})
    return ruler.judge(loaded.lanes["thinks"], loaded.lanes["base"])


def test_an_answer_the_parser_only_relabels_is_an_inert_switch(tmp_path: Path) -> None:
    on, off = recorded_message("parsers_chat"), recorded_message("parsers_chat_nothink")
    assert on != off and on["reasoning_content"] == off["content"]  # the recorded relabelling
    thinks = {"on": {"content": "", "reasoning_content": "Let me think. 2 and 2 make 4."},
              "off": {"content": "The answer is 4.", "reasoning_content": None}}
    result = ruler_over(tmp_path, {"base": {"on": on, "off": off}, "thinks": thinks})
    # the control's own switch is inert: the window's finding, never this candidate's FAIL
    assert result.verdict.value == "INCONCLUSIVE"
    thinking = result.details["thinking"]
    assert thinking["control"]["changed"] == [] and thinking["control"]["relabelled"] == ["p1"]
    assert thinking["control"]["reasoning_changed"] == ["p1"]  # the labels moved; the text did not
    assert thinking["candidate"]["changed"] == ["p1"] and thinking["candidate"]["relabelled"] == []
    assert result.window_finding.startswith(
        "the thinking switch is inert on the control base (1/1 probes identical on and off; 1 only relabelled: the "
        "same text moved between reasoning and reply, the reasoning parser read the switch and the template "
        "ignored it)")
    assert "inert on the control thinks" not in result.window_finding


def test_a_switch_that_acts_on_the_control_and_not_on_the_candidate_fails_the_candidate(tmp_path: Path) -> None:
    acts = {"on": {"content": "", "reasoning_content": "Let me think. It is 4."},
            "off": {"content": "It is 4.", "reasoning_content": None}}
    ignored = {"on": {"content": "It is 4.", "reasoning_content": None},
               "off": {"content": "It is 4.", "reasoning_content": None}}
    result = ruler_over(tmp_path, {"base": acts, "thinks": ignored})
    assert result.verdict.value == "FAIL" and result.window_finding is None
    assert result.reasons[0].startswith("thinking switch inert on thinks (1/1 probes identical on and off), where "
                                        "the control's switch acts")


def test_generated_text_joins_reasoning_and_reply_whatever_the_parser_stripped() -> None:
    assert generated_text({"reasoning": "Let me see.\n", "reply": "It is 4."}) == generated_text(
        {"reasoning": "", "reply": "Let me see. It is 4."})
    assert generated_text({"reasoning": "", "reply": "It is 4."}) != generated_text({"reasoning": "", "reply": "It is 5."})


# The same lines from two boots of one lane (the control and its rerun in tests/integration/engines/
# test_sglang_window.py): nothing here tells the boots apart
BOOT_A = """\
[2026-12-03 13:37:03] Init parallel ends. elapsed=0.02 s
[2026-12-03 13:37:06] Load weight end. elapsed=0.28 s, type=LlamaForCausalLM, avail mem=20.26 GB, mem usage=0.48 GB.
[2026-12-03 13:37:09] KV Cache is allocated. dtype: torch.float32, #tokens: 16384, K size: 0.35 GB, V size: 0.35 GB
[2026-12-03 13:37:09] Memory pool end. avail mem=19.43 GB
[2026-12-03 13:37:09] Engine startup timings (s): load_weight=0.28, kv_cache_allocation=0.80, scheduler_e2e=5.63
[2026-12-03 13:37:09] INFO:     Started server process [27603]
[2026-12-03 13:37:11] The server is fired up and ready to roll!
[2026-12-03 13:37:12] INFO:     127.0.0.1:34780 - "GET /health HTTP/1.1" 200 OK
[2026-12-03 13:37:15] Decode batch, #running-req: 1, #token: 0, token usage: 0.00, cpu graph: False, gen throughput (token/s): 6.17, #queue-req: 0
Multi-thread loading shards: 100% Completed | 1/1 [00:01<00:00,  1.59s/it]
"""
BOOT_B = """\
[2026-12-03 13:40:03] Init parallel ends. elapsed=0.03 s
[2026-12-03 13:40:07] Load weight end. elapsed=0.29 s, type=LlamaForCausalLM, avail mem=20.28 GB, mem usage=0.47 GB.
[2026-12-03 13:40:09] KV Cache is allocated. dtype: torch.float32, #tokens: 16384, K size: 0.35 GB, V size: 0.35 GB
[2026-12-03 13:40:09] Memory pool end. avail mem=19.46 GB
[2026-12-03 13:40:09] Engine startup timings (s): load_weight=0.29, kv_cache_allocation=0.73, scheduler_e2e=6.71
[2026-12-03 13:40:09] INFO:     Started server process [28309]
[2026-12-03 13:40:11] The server is fired up and ready to roll!
[2026-12-03 13:40:13] INFO:     127.0.0.1:34072 - "GET /health HTTP/1.1" 200 OK
[2026-12-03 13:40:21] Decode batch, #running-req: 1, #token: 43, token usage: 0.00, cpu graph: False, gen throughput (token/s): 9.55, #queue-req: 0
"""


def test_two_boots_of_one_sglang_lane_have_the_same_normalized_boot_log() -> None:
    assert normalize_boot_log(BOOT_A) == normalize_boot_log(BOOT_B) == [
        "KV Cache is allocated. dtype: torch.float32, #tokens: 16384, K size: 0.35 GB, V size: 0.35 GB",
        "The server is fired up and ready to roll!"]
    # a line that says what the engine runs with still differs when the configuration does
    other = BOOT_B.replace("#tokens: 16384", "#tokens: 8192")
    assert normalize_boot_log(other) != normalize_boot_log(BOOT_A)


def test_a_reply_that_differs_by_a_newline_is_another_generation(tmp_path: Path) -> None:
    """llama-server, measured: the template's open think block made the model start with a newline. Nothing
    moved between reasoning and reply, so the difference is the model's own."""
    same = {"on": {"content": "Paris.", "reasoning_content": None}, "off": {"content": "Paris.", "reasoning_content": None}}
    newline = {"on": {"content": "\nThe capital of France is Paris."}, "off": {"content": "The capital of France is Paris."}}
    result = ruler_over(tmp_path, {"base": same, "thinks": newline})
    thinking = result.details["thinking"]
    assert thinking["candidate"]["changed"] == ["p1"] and thinking["candidate"]["relabelled"] == []
    assert thinking["control"]["changed"] == thinking["control"]["relabelled"] == []
    assert result.window_finding.startswith("the thinking switch is inert on the control base (1/1 probes identical "
                                            "on and off):")
