"""Bundle signing and verification on real files: any one change is caught, with its reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from campaign.errors import VerifyError
from campaign.receipts.bundle import ENVELOPE, sign_bundle, verify_bundle
from campaign.signing import init_keys, load_signing_key, load_trusted


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    init_keys()
    root = tmp_path / "bundle"
    (root / "raw" / "greedy").mkdir(parents=True)
    (root / "raw" / "greedy" / "a.jsonl").write_text('{"x": 1}\n')
    (root / "SUMMARY.json").write_text('{"status": "complete"}\n')
    sign_bundle(root, load_signing_key(), {"window": "w1"})
    return root


def test_signed_bundle_verifies(bundle: Path) -> None:
    verified = verify_bundle(bundle, load_trusted())
    assert verified.files == 2 and verified.predicate == {"window": "w1"}


@pytest.mark.parametrize("name", ["SUMMARY.json", "raw/greedy/a.jsonl"])
def test_one_byte_change_is_caught(bundle: Path, name: str) -> None:
    path = bundle / name
    data = bytearray(path.read_bytes())
    data[2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(VerifyError, match=f"{name}: sha256 does not match"):
        verify_bundle(bundle, load_trusted())


def test_added_file_is_caught(bundle: Path) -> None:
    (bundle / "raw" / "extra.jsonl").write_text("{}\n")
    with pytest.raises(VerifyError, match="raw/extra.jsonl: file is not in the signed manifest"):
        verify_bundle(bundle, load_trusted())


def test_removed_file_is_caught(bundle: Path) -> None:
    (bundle / "SUMMARY.json").unlink()
    with pytest.raises(VerifyError, match="SUMMARY.json: file listed in the signed manifest is missing"):
        verify_bundle(bundle, load_trusted())


def test_symlink_is_refused(bundle: Path) -> None:
    os.symlink("/etc/passwd", bundle / "raw" / "link")
    with pytest.raises(VerifyError, match="raw/link: symbolic links are not allowed"):
        verify_bundle(bundle, load_trusted())


def test_untrusted_signer_is_refused(bundle: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_keys(other)
    from campaign.signing import load_signing_key as load

    sign_bundle(bundle, load(other), {"window": "w1"})
    with pytest.raises(VerifyError, match="no valid signature by a trusted key"):
        verify_bundle(bundle, load_trusted())
    verified = verify_bundle(bundle, load_trusted([other / "signing.pub"]))
    assert verified.keyid == load(other).keyid


def test_missing_envelope_means_incomplete(bundle: Path) -> None:
    (bundle / ENVELOPE).unlink()
    with pytest.raises(VerifyError, match="the run did not complete"):
        verify_bundle(bundle, load_trusted())


def test_duplicate_json_keys_in_envelope_are_refused(bundle: Path) -> None:
    text = (bundle / ENVELOPE).read_text()
    (bundle / ENVELOPE).write_text(text.replace('"payloadType"', '"payloadType": "x", "payloadType"', 1))
    with pytest.raises(VerifyError, match="duplicate JSON key 'payloadType'"):
        verify_bundle(bundle, load_trusted())


def test_dotdot_subject_name_is_refused(bundle: Path) -> None:
    import base64

    from campaign.contracts.hashing import canonical_json
    from campaign.receipts.bundle import PAYLOAD_TYPE, pae

    envelope = json.loads((bundle / ENVELOPE).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"].append({"name": "../outside", "digest": {"sha256": "0" * 64}})
    payload = canonical_json(statement)
    key = load_signing_key()
    envelope.update(payload=base64.b64encode(payload).decode(),
                    signatures=[{"keyid": key.keyid, "sig": key.sign(pae(PAYLOAD_TYPE, payload))}])
    (bundle / ENVELOPE).write_text(json.dumps(envelope))
    with pytest.raises(VerifyError, match="subject name '../outside' is not allowed"):
        verify_bundle(bundle, load_trusted())


def test_group_readable_key_is_refused_for_signing(tmp_path: Path) -> None:
    from campaign.errors import KeyMaterialError
    from campaign.signing import config_dir

    init_keys()
    os.chmod(config_dir() / "signing.key", 0o640)
    with pytest.raises(KeyMaterialError, match="readable by group or others"):
        load_signing_key()


def test_signing_refuses_a_bundle_holding_a_known_secret(tmp_path: Path) -> None:
    from campaign.errors import RunError

    init_keys()
    root = tmp_path / "leaky"
    (root / "incumbent").mkdir(parents=True)
    secret = "correct-horse-battery-staple"  # no credential shape: only the exact value finds it
    (root / "incumbent" / "snapshot.json").write_text(json.dumps({"argv": ["llama-server", "--api-key", secret]}))
    (root / "SUMMARY.json").write_text('{"status": "complete"}\n')
    with pytest.raises(RunError, match="incumbent/snapshot.json") as info:
        sign_bundle(root, load_signing_key(), {"window": "w1"}, secrets=[secret, "short"])
    assert secret not in str(info.value)
    assert not (root / ENVELOPE).exists()
    # a secret nobody wrote into the bundle does not stop the signature
    sign_bundle(root, load_signing_key(), {"window": "w1"}, secrets=["hf_SomethingElseEntirely123"])
    assert (root / ENVELOPE).exists()


def test_a_hard_link_to_a_file_outside_is_refused(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    victim = bundle / "raw" / "greedy" / "a.jsonl"
    os.link(victim, outside)  # same bytes, so every digest still matches
    with pytest.raises(VerifyError, match="hard link"):
        verify_bundle(bundle, load_trusted())


def test_an_added_empty_directory_is_refused(bundle: Path) -> None:
    (bundle / "extra").mkdir()
    with pytest.raises(VerifyError, match="empty directory"):
        verify_bundle(bundle, load_trusted())


def test_signing_prunes_a_step_s_empty_folder(tmp_path: Path) -> None:
    init_keys()
    root = tmp_path / "b"
    (root / "raw" / "empty").mkdir(parents=True)
    (root / "SUMMARY.json").write_text("{}\n")
    sign_bundle(root, load_signing_key(), {"window": "w"})
    assert not (root / "raw").exists()
    assert verify_bundle(root, load_trusted()).files == 1


def _envelope_with(bundle: Path, **changes: object) -> None:
    import base64

    path = bundle / ENVELOPE
    envelope = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "statement":
            envelope["payload"] = base64.b64encode(json.dumps(value).encode()).decode()
        else:
            envelope[key] = value
    path.write_text(json.dumps(envelope))


@pytest.mark.parametrize("changes", [{"signatures": 7}, {"statement": [1, 2]}, {"signatures": [{"keyid": 1}]},
                                     {"statement": {"_type": "x", "subject": "all", "predicateType": "p"}},
                                     {"payload": None}])
def test_malformed_envelope_shapes_are_one_line_refusals(bundle: Path, changes: dict) -> None:
    import subprocess
    import sys

    _envelope_with(bundle, **changes)
    with pytest.raises(VerifyError, match="malformed envelope"):
        verify_bundle(bundle, load_trusted())
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "verify", str(bundle)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
