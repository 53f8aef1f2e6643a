"""Secret references, the literal-secret refusal and the redactor's rules (pure logic, hand-written inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.contracts.secretrefs import is_secret_name, looks_like_token, substitute
from campaign.errors import ContractError, PreflightError
from campaign.lanes.redact import MARK, RedactingLog, Redactor, lane_secrets
from campaign.lanes.session import resolve_refs
from tests.support.contracts import demo_like, free_port, write_contract

HF = "hf_" + "Q" * 30
SK = "sk-" + "Z9" * 12


@pytest.mark.parametrize("name,secret", [("--api-key", True), ("--hf-token", True), ("HF_TOKEN", True),
                                         ("OPENAI_API_KEY", True), ("--ssl-keyfile", False),
                                         ("--tokenizer", False), ("TOKENIZERS_PARALLELISM", False),
                                         ("--auth", True), ("DB_PASSWORD", True), ("--metrics", False)])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_token_shapes() -> None:
    assert looks_like_token(HF) and looks_like_token(SK) and looks_like_token("Bearer abcdefghijklmnop12")
    assert not looks_like_token("sk-short") and not looks_like_token("hf_model_path")


def test_substitute_reads_runner_environment() -> None:
    assert substitute("Bearer ${env:K}", {"K": "v1"}) == "Bearer v1"
    with pytest.raises(KeyError):
        substitute("${env:MISSING}", {})


def _contract(tmp_path: Path, defaults_extra: str, candidate_set: str = "", axis: str = "") -> Path:
    body = demo_like(free_port()).replace("          readiness:", f"{defaults_extra}\n          readiness:")
    if candidate_set:
        body = body.replace('args: {--spec-type: ngram-simple, --spec-draft-n-max: "4"}',
                            'args: {--spec-type: ngram-simple, --spec-draft-n-max: "4"' + candidate_set + "}")
    if axis:
        body = body.replace("args.spec-draft-n-max]", f"args.spec-draft-n-max, {axis}]")
    return write_contract(tmp_path, body)


def test_literal_credential_in_contract_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _contract(tmp_path, f"          env: {{HF_TOKEN: {HF}}}")
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert "lane_defaults.env.HF_TOKEN" in str(info.value) and "${env:NAME}" in str(info.value)
    assert f"{path}:" in str(info.value)
    path = _contract(tmp_path, "", candidate_set=", --api-key: plainpassword")
    with pytest.raises(ContractError, match=r"--api-key takes a credential"):
        load_contract(path)
    path = _contract(tmp_path, f"          env: {{NOTE: {SK}}}")
    with pytest.raises(ContractError, match="looks like a token"):
        load_contract(path)
    # a credential-named switch or a key file's path is not a credential
    load_contract(_contract(tmp_path, "          env: {HF_HUB_DISABLE_IMPLICIT_TOKEN: '1'}",
                            candidate_set=", --api-key-file: /run/secrets/key", axis="args.api-key-file"))


def test_references_load_and_resolve_only_at_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _contract(tmp_path, '          env: {HF_TOKEN: "${env:T_HF}"}',
                     candidate_set=', --api-key: "${env:T_KEY}"', axis="args.api-key")
    loaded = load_contract(path)
    assert HF not in path.read_text()
    lane = loaded.lanes["spec"]
    monkeypatch.delenv("T_HF", raising=False)
    monkeypatch.setenv("T_KEY", "k3y-value-long")
    with pytest.raises(PreflightError, match=r"\$\{env:T_HF\}.*not set"):
        resolve_refs(lane)
    monkeypatch.setenv("T_HF", HF)
    resolved = resolve_refs(lane)
    assert resolved.env["HF_TOKEN"] == HF and "k3y-value-long" in resolved.args
    assert lane.env["HF_TOKEN"] == "${env:T_HF}"  # the lane as written keeps the reference
    assert sorted(lane_secrets(lane)) == sorted([HF, "k3y-value-long"])


def test_snapshot_redaction_rules() -> None:
    redactor = Redactor(["k3y-value-long", HF], declared_env={"LLAMA_ARG_X": "1", "HF_TOKEN": "${env:T}"})
    snap = {"argv": ["srv", "--api-key", "k3y-value-long", f"--hf-token={HF}", "--note", f"x={SK};", "-m", "m"],
            "env": {"LLAMA_ARG_X": "1", "PATH": "/bin", "HF_TOKEN": HF, "RUNNER_THING": "abc", "LANG": SK},
            "launched_env": {"HF_TOKEN": HF}, "other": {"deep": [f"token {HF} here"]}, "n": 3}
    out = redactor.snapshot(snap)
    text = repr(out)
    assert HF not in text and SK not in text and "k3y-value-long" not in text
    assert out["argv"][:2] == ["srv", "--api-key"] and out["argv"][2].startswith("<redacted hmac:")
    assert out["argv"][3].startswith("--hf-token=<redacted hmac:")
    assert out["argv"][5] == f"x={MARK};" and out["argv"][6:] == ["-m", "m"]
    assert out["env"]["LLAMA_ARG_X"] == "1" and out["env"]["PATH"] == "/bin"  # declared literal, allow-list
    assert out["env"]["RUNNER_THING"].startswith("<redacted hmac:")  # undeclared: digest
    assert out["env"]["LANG"] == MARK  # allowed name, token-shaped value: still cut
    assert out["other"] == {"deep": [f"token {MARK} here"]} and out["n"] == 3
    # same value, same digest: lanes stay comparable; different value, different digest
    assert redactor.env({"A": "same"}) == redactor.env({"A": "same"})
    assert redactor.env({"A": "one"}) != redactor.env({"A": "two"})
    assert redactor.snapshot(out) == out  # redacting twice changes nothing


def test_log_redaction_holds_partial_lines(tmp_path: Path) -> None:
    log = RedactingLog(tmp_path / "boot.log", Redactor(["k3y-value-long"]))
    secret_line = f"args: --api-key k3y-value-long token={HF}\n".encode()
    for i in range(0, len(secret_line), 5):  # split mid-secret, as a pipe or a docker stream may
        log.write(secret_line[i:i + 5])
    log.write(b"tail without newline k3y-val")
    log.write(b"ue-long")
    log.close()
    text = (tmp_path / "boot.log").read_text()
    assert "k3y-value-long" not in text and HF not in text
    assert text == f"args: --api-key {MARK} token={MARK}\ntail without newline {MARK}"


def test_digest_key_survives_a_restart_and_stays_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed runner (a new process) must digest the same value the same way, or the runtime axis
    check would see differences that are not there; another machine's key digests differently."""
    import campaign.lanes.redact as redact

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a"))
    first = Redactor().digest("value")
    monkeypatch.setattr(redact, "_KEYS", {})  # as if a new process
    assert Redactor().digest("value") == first
    key = tmp_path / "a" / "campaign" / "redact.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "b"))
    assert Redactor().digest("value") != first
