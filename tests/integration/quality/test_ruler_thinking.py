"""The ruler's thinking switch against real llama-server lanes and the real model.

SmolLM2's own chat template has no thinking branch: ``chat_template_kwargs.enable_thinking`` is accepted
by the server and ignored by the template, a real ignored switch. The candidate serves a template that
does honour it (the generation prompt opens a ``<think>`` block when it is on), so the same probes come
back different. One window shows both: the switch proven on one lane, flagged inert on the other.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.contracts import (
    THINKING_TEMPLATE,
    candidate,
    contract_yaml,
    control,
    free_port,
    process_defaults,
    write_contract,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from campaign.contracts.freeze import freeze
    from campaign.contracts.load import load_contract
    from campaign.signing import init_keys, load_signing_key, load_trusted
    from campaign.window.run import run_window

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("thinking")
    template = root / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    body = contract_yaml(
        "t-thinking",
        defaults=process_defaults(free_port(), args=["--ctx-size", "2048", "--threads", "1", "--jinja", "--metrics",
                                                     "--seed", "0", "--no-webui"]),
        lanes=[control("plain"), candidate("thinks", ["args.chat-template-file"],
                                           args={"--chat-template-file": template})],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "ruler", "input": "p", "probes": 2, "max_tokens": 8, "thinking": {"max_tokens": 24}}],
        requires=["ruler"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        contract = write_contract(root, body)
        init_keys()
        freeze(load_contract(contract), load_signing_key())
        outcome = run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=root / "runs")
    return outcome.bundle


def test_an_ignored_thinking_switch_is_flagged_and_a_real_one_is_proven(window: Path) -> None:
    result = load_json_strict(window / "gates" / "ruler" / "thinks.json")
    # the control's template ignores the switch: the window's instrument, not the candidate's loss
    assert result["verdict"] == "INCONCLUSIVE", result["reasons"]
    assert result["window_finding"].startswith("the thinking switch is inert on the control plain (2/2 probes "
                                               "identical on and off)")
    summary = load_json_strict(window / "SUMMARY.json")
    assert [f["candidates"] for f in summary["findings"] if f["gate"] == "ruler"] == [["thinks"]]
    thinking = result["details"]["thinking"]
    # SmolLM2's own template: every probe identical with the switch on and off
    assert thinking["control"]["changed"] == [] and thinking["control"]["probes"] == 2
    # the template with a thinking branch: every probe changed, and the lane is not named inert
    assert len(thinking["candidate"]["changed"]) == 2
    assert not any("inert on thinks" in r for r in result["reasons"])
    # the evidence is the engine's own replies, kept raw in the bundle
    raw = [r for r in read_jsonl(window / "raw" / "ruler" / "thinks.jsonl") if r["tags"].get("purpose") == "thinking"]
    assert sorted(r["tags"]["switch"] for r in raw) == ["off", "off", "on", "on"]
    assert all(r["request"]["chat_template_kwargs"]["enable_thinking"] == (r["tags"]["switch"] == "on") for r in raw)
    on = {r["tags"]["item"]: r["response"]["choices"][0]["message"] for r in raw if r["tags"]["switch"] == "on"}
    off = {r["tags"]["item"]: r["response"]["choices"][0]["message"] for r in raw if r["tags"]["switch"] == "off"}
    assert all(on[item] != off[item] for item in on)
