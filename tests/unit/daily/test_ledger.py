"""The ledger: signed, chained, append-only; the previous daily's launch kept privately for rollback,
its command line shown with credentials redacted."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.hashing import canonical_json
from campaign.daily.ledger import Ledger, shown_argv
from campaign.errors import InputError, RunError, VerifyError
from campaign.signing import SigningKey, TrustedKeys, init_keys, load_signing_key, load_trusted

DIGEST = re.compile(r"^<redacted hmac:[0-9a-f]{16}>$")
SECRET = "sk-live-0123456789abcdefXYZ"
ENV_SECRET = "s3cret-env-value-77"
LAUNCH: dict[str, Any] = {
    "argv": ["llama-server", "-m", "/models/x.gguf", "--api-key", SECRET, "--port", "8080",
             "--header", f"X-Upstream: {ENV_SECRET}"],
    "env": {"HF_TOKEN": ENV_SECRET, "PATH": "/usr/bin"},
    "cwd": "/srv",
    "exe_sha256": "ab" * 32,
}


@pytest.fixture
def key() -> SigningKey:
    init_keys()
    return load_signing_key()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    # the runner's environment holds the daily's credentials, as the shell the daily was started from did
    monkeypatch.setenv("DAILY_KEY", SECRET)
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    return Ledger(tmp_path / "state" / "ledger.jsonl")


def raw_lines(ledger: Ledger) -> list[bytes]:
    return ledger.path.read_bytes().splitlines()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# append and read back


def test_append_writes_signed_chained_entries(ledger: Ledger, key: SigningKey) -> None:
    first = ledger.append(key, "promote", {"lane": "ngram", "bundle": "b1"})
    second = ledger.append(key, "rollback", {"lane": "baseline"})
    assert (first["seq"], first["kind"], first["lane"], first["bundle"]) == (1, "promote", "ngram", "b1")
    assert (second["seq"], second["kind"]) == (2, "rollback")
    assert first["prev_sha256"] is None
    assert second["prev_sha256"] == hashlib.sha256(raw_lines(ledger)[0]).hexdigest()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["at"])
    assert "@" in first["who"]
    for entry in (first, second):
        assert entry["signature"]["keyid"] == key.keyid
        body = {k: v for k, v in entry.items() if k != "signature"}
        # an Ed25519 signature over the canonical entry, checkable with the public key alone
        trusted = TrustedKeys({key.keyid: key.public})
        assert trusted.verify(key.keyid, entry["signature"]["sig"], canonical_json(body))
        assert not trusted.verify(key.keyid, entry["signature"]["sig"], canonical_json({**body, "kind": "x"}))


def test_entries_read_back_as_written(ledger: Ledger, key: SigningKey) -> None:
    assert ledger.entries() == []
    written = [ledger.append(key, "promote", {"lane": f"l{i}", "n": i}) for i in range(3)]
    assert ledger.entries() == written
    assert [e["seq"] for e in ledger.entries()] == [1, 2, 3]
    assert len(raw_lines(ledger)) == 3


def test_verify_returns_the_entries(ledger: Ledger, key: SigningKey) -> None:
    written = [ledger.append(key, "promote", {"lane": "a"}), ledger.append(key, "promote", {"lane": "b"})]
    assert ledger.verify(load_trusted()) == written


def test_verify_of_no_ledger_is_empty(ledger: Ledger) -> None:
    assert not ledger.path.exists()
    assert ledger.verify(TrustedKeys({})) == []


def test_default_path_is_under_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    assert Ledger().path == tmp_path / "xdg-state" / "campaign" / "ledger.jsonl"


# tampering refused


def test_an_untrusted_signer_is_refused(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    with pytest.raises(VerifyError, match=r"ledger.jsonl:1: ledger entry signature invalid or by an untrusted key"):
        ledger.verify(TrustedKeys({}))


def test_an_edited_entry_is_refused(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    ledger.append(key, "promote", {"lane": "b"})
    lines = raw_lines(ledger)
    lines[1] = lines[1].replace(b'"b"', b'"evil"')  # the lane's name, whatever the spacing
    assert b"evil" in lines[1]
    ledger.path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(VerifyError, match=r"ledger.jsonl:2: ledger entry signature invalid"):
        ledger.verify(load_trusted())


def test_an_edit_to_an_earlier_entry_breaks_the_chain_even_if_its_signature_holds(
        ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    ledger.append(key, "promote", {"lane": "b"})
    lines = raw_lines(ledger)
    # the same JSON, spaced differently: the signature (over canonical JSON) still holds, the bytes do not
    lines[0] = json.dumps(json.loads(lines[0]), indent=1).replace("\n", "").encode()
    ledger.path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(VerifyError, match=r"ledger.jsonl:2: ledger chain broken"):
        ledger.verify(load_trusted())


def test_a_removed_entry_breaks_the_chain(ledger: Ledger, key: SigningKey) -> None:
    for lane in ("a", "b", "c"):
        ledger.append(key, "promote", {"lane": lane})
    lines = raw_lines(ledger)
    ledger.path.write_bytes(lines[0] + b"\n" + lines[2] + b"\n")
    with pytest.raises(VerifyError, match=r"ledger.jsonl:2: ledger chain broken"):
        ledger.verify(load_trusted())
    ledger.path.write_bytes(lines[1] + b"\n" + lines[2] + b"\n")  # the first one removed
    with pytest.raises(VerifyError, match=r"ledger.jsonl:1: ledger chain broken"):
        ledger.verify(load_trusted())


def test_a_forged_entry_signed_by_another_key_is_refused(ledger: Ledger, key: SigningKey, tmp_path: Path) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    init_keys(tmp_path / "other")
    other = load_signing_key(tmp_path / "other")
    ledger.append(other, "promote", {"lane": "forged"})  # chained correctly, but not by a trusted key
    with pytest.raises(VerifyError, match=r"ledger.jsonl:2: ledger entry signature invalid or by an untrusted"):
        ledger.verify(load_trusted())


def test_an_unreadable_line_is_refused(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    with open(ledger.path, "ab") as handle:
        handle.write(b"not json\n")
    with pytest.raises(VerifyError, match=r"ledger.jsonl:2: unreadable ledger entry"):
        ledger.verify(load_trusted())


def test_a_duplicated_key_is_refused(ledger: Ledger, key: SigningKey) -> None:
    entry = ledger.append(key, "promote", {"lane": "a"})
    line = raw_lines(ledger)[0]
    ledger.path.write_bytes(line[:-1] + b', "kind": "rollback"}\n')
    assert entry["kind"] == "promote"
    with pytest.raises(VerifyError, match=r"ledger.jsonl:1: unreadable ledger entry: duplicate JSON key 'kind'"):
        ledger.verify(load_trusted())


# rollback launch


def test_rollback_launch_is_kept_privately_and_returned(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    entry = ledger.append(key, "promote", {"lane": "b"}, rollback_launch=LAUNCH)
    private = ledger.path.parent / "rollback" / "2.json"
    assert private.exists()
    assert mode(private) == 0o600
    assert mode(private.parent) == 0o700
    kept = private.read_text()
    assert SECRET not in kept and ENV_SECRET not in kept  # references, never values
    assert "${env:DAILY_KEY}" in kept and "X-Upstream: ${env:HF_TOKEN}" in kept
    assert entry["rollback"]["launch_sha256"] == hashlib.sha256(private.read_bytes()).hexdigest()
    assert entry["rollback"]["exe_sha256"] == "ab" * 32
    assert ledger.rollback_launch(2) == LAUNCH  # resolved from the environment, for the restore


def test_a_credential_no_variable_holds_is_refused_and_an_unset_reference_is_named(
        ledger: Ledger, key: SigningKey, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(RunError, match="credential in env HF_TOKEN is in no variable of this environment") as refused:
        ledger.append(key, "promote", {"lane": "a"}, rollback_launch=LAUNCH)
    assert ENV_SECRET not in str(refused.value) and not ledger.path.exists()
    monkeypatch.setenv("HF_TOKEN", ENV_SECRET)
    ledger.append(key, "promote", {"lane": "a"}, rollback_launch=LAUNCH)
    monkeypatch.delenv("DAILY_KEY")
    with pytest.raises(RunError, match=r"refers to \$\{env:DAILY_KEY\}, which is not set"):
        ledger.rollback_launch(1)
    monkeypatch.setenv("DAILY_KEY", "")  # set but empty: never a daily started with --api-key ""
    with pytest.raises(RunError, match=r"refers to \$\{env:DAILY_KEY\}, which is not set"):
        ledger.rollback_launch(1)


def test_the_ledger_line_shows_a_redacted_launch(ledger: Ledger, key: SigningKey) -> None:
    entry = ledger.append(key, "promote", {"lane": "b"}, rollback_launch=LAUNCH)
    text = ledger.path.read_text()
    assert SECRET not in text and ENV_SECRET not in text
    argv = entry["rollback"]["argv"]
    # the kept launch's own references: what the rollback resolves, never a value
    assert argv == ["llama-server", "-m", "/models/x.gguf", "--api-key", "${env:DAILY_KEY}", "--port", "8080",
                    "--header", "X-Upstream: ${env:HF_TOKEN}"]
    assert "env" not in entry["rollback"]
    assert ledger.verify(load_trusted()) == [entry]  # the signature covers the rollback view


def test_rollback_launch_of_an_entry_without_one(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"})
    with pytest.raises(InputError, match="ledger entry 1 keeps no rollback launch"):
        ledger.rollback_launch(1)
    with pytest.raises(InputError, match="ledger entry 9 keeps no rollback launch"):
        ledger.rollback_launch(9)


def test_rollback_launch_whose_file_is_gone(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"}, rollback_launch=LAUNCH)
    (ledger.path.parent / "rollback" / "1.json").unlink()
    with pytest.raises(InputError, match="ledger entry 1 keeps no rollback launch"):
        ledger.rollback_launch(1)


def test_a_changed_rollback_launch_is_refused(ledger: Ledger, key: SigningKey) -> None:
    ledger.append(key, "promote", {"lane": "a"}, rollback_launch=LAUNCH)
    private = ledger.path.parent / "rollback" / "1.json"
    changed = {**LAUNCH, "argv": [*LAUNCH["argv"], "--evil"]}
    private.write_bytes(canonical_json(changed))
    with pytest.raises(VerifyError, match="the kept rollback launch changed since it was recorded"):
        ledger.rollback_launch(1)


def test_a_leftover_rollback_file_for_an_entry_without_one(ledger: Ledger, key: SigningKey) -> None:
    leftover = ledger.path.parent / "rollback" / "1.json"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(canonical_json(LAUNCH))
    ledger.append(key, "promote", {"lane": "a"})
    with pytest.raises(InputError, match="ledger entry 1 keeps no rollback launch"):
        ledger.rollback_launch(1)


# shown_argv


def test_shown_argv_redacts_a_credential_option_value() -> None:
    shown = shown_argv(["serve", "--api-key", SECRET, "--port", "8000"], {})
    assert shown[0:2] == ["serve", "--api-key"]
    assert DIGEST.match(shown[2])
    assert shown[3:] == ["--port", "8000"]


def test_shown_argv_redacts_the_equals_form() -> None:
    shown = shown_argv(["serve", "--hf-token=plainvalue123"], {})
    name, _, value = shown[1].partition("=")
    assert name == "--hf-token"
    assert DIGEST.match(value)


def test_shown_argv_digest_is_stable_for_one_value() -> None:
    a = shown_argv(["--api-key", SECRET], {})
    b = shown_argv(["--api-key=" + SECRET], {})
    c = shown_argv(["--api-key", SECRET + "x"], {})
    assert a[1] == b[0].split("=", 1)[1]  # same value, same digest: two dailies can be compared
    assert a[1] != c[1]


def test_shown_argv_cuts_env_secrets_and_token_shapes_out_of_any_token() -> None:
    shown = shown_argv(["serve", "--header", f"Authorization: {ENV_SECRET}", "--note",
                        "from hf_abcdefghijklmnopqrstuvwx"], {"SERVE_PASSWORD": ENV_SECRET})
    assert shown == ["serve", "--header", "Authorization: <redacted>", "--note", "from <redacted>"]


def test_shown_argv_keeps_what_is_not_a_credential() -> None:
    argv = ["vllm", "serve", "/models/m", "--tokenizer", "/models/tok", "--api-key-file", "/run/secrets/k",
            "--max-model-len", "4096", "--trust-remote-code"]
    env = {"PATH": "/usr/bin", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    assert shown_argv(argv, env) == argv


def test_shown_argv_does_not_change_its_input() -> None:
    argv = ["--api-key", SECRET]
    shown_argv(argv, {})
    assert argv == ["--api-key", SECRET]


def test_an_interrupted_promotion_is_found_until_its_entry_a_failure_or_a_rollback_ends_it() -> None:
    from campaign.promotion.promote import unfinished_promotion

    begun = {"seq": 1, "kind": "promote-begun", "at": "t", "candidate": "spec"}
    assert unfinished_promotion([begun]) == begun  # killed mid-swap: nothing else was written
    assert unfinished_promotion([begun, {"seq": 2, "kind": "promote", "begun": 1}]) is None
    assert unfinished_promotion([begun, {"seq": 2, "kind": "promote-failed", "begun": 1}]) is None
    assert unfinished_promotion([begun, {"seq": 2, "kind": "rollback", "undoes": 1}]) is None
    later = {"seq": 3, "kind": "promote-begun", "at": "t", "candidate": "other"}
    assert unfinished_promotion([begun, {"seq": 2, "kind": "promote", "begun": 1}, later]) == later
