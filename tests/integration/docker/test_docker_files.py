"""Lane files on docker lanes, for real: a chat template pinned by sha256 is the candidate's one axis,
mounted read-only where ``${file:chat_template}`` says, its digest read back inside each running
container; a per-layer slot map as another candidate's one axis the same way; and a cache-replay screen
that passes lets the live window go on."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.cli import frozen_window
from tests.support.contracts import candidate, contract_yaml, control, free_port, write_contract
from tests.support.docker import docker_defaults, need_docker, need_engine_files

pytestmark = pytest.mark.integration

TEMPLATE = """{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
# the same ChatML, with a system line first: a change a user might try, and one the model reads
BRIEF = "<|im_start|>system\nAnswer in as few words as you can.<|im_end|>\n" + TEMPLATE



def files_contract(image: str, port: int, digests: dict[str, str]) -> str:
    def file(name: str, path: str, digest: str, **more: str) -> dict[str, str]:
        return {"name": name, "path": path, "sha256": digests[digest], **more}

    return contract_yaml(
        "t-docker-files",
        defaults=docker_defaults(image, port, args=["--ctx-size", "1024", "--threads", "2", "--parallel", "1", "--seed",
                                                    "0", "--no-webui", "--jinja", "--chat-template-file",
                                                    "${file:chat_template}"],
                                 files=[file("chat_template", "templates/chatml.jinja", "plain"),
                                        file("slotmap", "slots.json", "slots", mount="/etc/campaign/slots.json")]),
        lanes=[control(),
               candidate("brief", ["files.chat_template"], files=[file("chat_template", "templates/brief.jinja", "brief")]),
               candidate("more-slots", ["files.slotmap"], files=[file("slotmap", "slots-more.json", "more")])],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "screen", "id": "cache", "files": [file("trace", "trace.jsonl", "trace")],
                "cache_replay": {"trace": "trace", "slot_map": "slotmap"}, "rule": {"require": ["hit_rate >= 0.5"]}},
               {"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "2/2"}}],
        requires=["cache", "greedy"])


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> dict:
    image = need_docker()
    need_engine_files()
    root = tmp_path_factory.mktemp("docker-files")
    # one layer, 4 experts, top-1, cycling 0,1,0,1...: 2 slots hold both after the first pass
    trace = json.dumps({"n_experts": 4}) + "\n" + "".join(json.dumps({"layers": [[step % 2]]}) + "\n"
                                                          for step in range(100))
    digests = {"plain": _write(root / "templates" / "chatml.jinja", TEMPLATE),
               "brief": _write(root / "templates" / "brief.jinja", BRIEF),
               "slots": _write(root / "slots.json", "[2]\n"), "more": _write(root / "slots-more.json", "[3]\n"),
               "trace": _write(root / "trace.jsonl", trace)}
    body = files_contract(image, free_port(), digests)
    contract = write_contract(root, body, prompts=[("capital", "What is the capital of France?"),
                                                   ("count", "Count from one to five.")])
    bundle, verified = frozen_window(contract, root / "runs", env={"XDG_CONFIG_HOME": str(root / "xdg")})
    return {"bundle": bundle, "verified": verified, "digests": digests}


def test_the_template_is_the_one_axis_and_is_read_back_inside_each_container(window: dict) -> None:
    bundle, digests = window["bundle"], window["digests"]
    assert window["verified"].returncode == 0, window["verified"].stderr
    summary = load_json_strict(bundle / "SUMMARY.json")
    greedy = summary["candidates"]["brief"]["gates"]["greedy"]
    assert greedy["verdict"] in ("PASS", "FAIL"), greedy  # judged: the runtime one-axis check held
    for lane, template in (("base", "plain"), ("brief", "brief")):
        inspect = load_json_strict(bundle / "lanes" / lane / "inspect.json")
        seen = inspect["files"]["chat_template"]
        assert seen == {"path": "/campaign/files/chat_template", "pinned_sha256": digests[template],
                        "sha256": digests[template]}
        assert inspect["files"]["slotmap"]["path"] == "/etc/campaign/slots.json"
        mounts = {m["destination"]: m["read_only"] for m in inspect["mounts"]}
        assert mounts["/campaign/files/chat_template"] is True and mounts["/etc/campaign/slots.json"] is True
        argv = inspect["argv"]
        assert argv[argv.index("--chat-template-file") + 1] == "/campaign/files/chat_template"


def test_a_slot_map_as_the_one_axis_differs_only_in_its_digest_inside_the_container(window: dict) -> None:
    bundle, digests = window["bundle"], window["digests"]
    summary = load_json_strict(bundle / "SUMMARY.json")
    greedy = summary["candidates"]["more-slots"]["gates"]["greedy"]
    assert greedy["verdict"] in ("PASS", "FAIL"), greedy  # the runtime one-axis check held: files.slotmap only
    inspect = load_json_strict(bundle / "lanes" / "more-slots" / "inspect.json")
    assert inspect["files"]["slotmap"] == {"path": "/etc/campaign/slots.json", "pinned_sha256": digests["more"],
                                           "sha256": digests["more"]}
    screen = load_json_strict(bundle / "gates" / "cache" / "more-slots.json")
    assert screen["metrics"]["hit_rate_gain"]["value"] == pytest.approx(0)  # 2 slots already hold the cycle


def test_the_files_are_in_the_bundle_by_digest(window: dict) -> None:
    bundle, digests = window["bundle"], window["digests"]
    listed = load_json_strict(bundle / "contract" / "files.json")
    assert listed["brief"]["chat_template"]["sha256"] == digests["brief"]
    assert listed["base"]["chat_template"]["sha256"] == digests["plain"]
    for digest in digests.values():
        assert hashlib.sha256((bundle / "contract" / "files" / digest).read_bytes()).hexdigest() == digest


def test_a_passing_screen_ran_before_any_lane_booted(window: dict) -> None:
    bundle = window["bundle"]
    screen = load_json_strict(bundle / "gates" / "cache" / "brief.json")
    assert screen["verdict"] == "PASS" and screen["metrics"]["hit_rate"]["value"] == pytest.approx(0.98)
    steps = [(r.get("step"), r.get("lane")) for r in read_jsonl(bundle / "journal.jsonl") if r.get("event") == "done"]
    assert steps.index(("gate", "brief")) < steps.index(("boot", "base"))
