"""Fuzzing the bundle verifier (receipts.bundle.verify_bundle) on a real bundle, signed with this test's key:
random changes to its tree (files, odd names, deep folders, links, FIFOs), random envelopes (random JSON,
many signatures, huge numbers, deep nesting, huge files), mutated envelopes, and manifests changed and
signed again with the trusted key.

Property: verify passes only where nothing it vouches for changed (the untouched bundle; an envelope that
still carries a valid signature over the same statement; a manifest re-signed with the same name -> digest
map), and otherwise raises a CampaignError with a one-line message, within 5 s and 200 MB."""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import unicodedata
from pathlib import Path
from typing import Any, Callable

from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.harness import check_outcome, make_chain, run_bounded, scratch
from tests.fuzz.samples import make_bundle
from tests.fuzz.strategies import file_names, hostile_texts, json_values, walk_paths


def verify(bundle: Path) -> Callable[[], Any]:
    def call() -> dict[str, Any]:
        from campaign.receipts.bundle import verify_bundle
        from campaign.signing import load_trusted

        verified = verify_bundle(bundle, load_trusted())
        return {"files": verified.files, "keyid": verified.keyid}
    return call


def fresh_bundle() -> Path:
    """A signed bundle in a folder of its own (removed at the end of the session)."""
    return make_bundle(scratch("bundle-"))


def test_the_untouched_bundle_verifies() -> None:
    bundle = fresh_bundle()
    outcome = run_bounded(verify(bundle))
    assert outcome.kind == "ok", outcome.describe()


# ---------------------------------------------------------------- the tree

TREE_CHANGES = ["add-file", "add-empty-dir", "deep-chain", "symlink", "fifo", "socket", "hardlink", "flip-byte",
                "truncate", "append", "delete", "file-to-dir", "rename-case", "rename-nfd", "envelope-link",
                "add-file-deep"]


def _regular_files(bundle: Path) -> list[str]:
    from campaign.receipts.bundle import ENVELOPE

    found = []
    for root, _dirs, files in os.walk(bundle):
        found += [(Path(root) / f).relative_to(bundle).as_posix() for f in files
                  if (Path(root) / f).is_file() and not (Path(root) / f).is_symlink()]
    return sorted(f for f in found if f != ENVELOPE)


def change_tree(bundle: Path, change: str, draw: st.DrawFn) -> str:
    """One change to the bundle's files, each of which verify must see."""
    files = _regular_files(bundle)
    if not files and change in ("hardlink", "flip-byte", "truncate", "append", "delete", "file-to-dir",
                                "rename-case", "rename-nfd"):
        change = "add-file"
    pick = draw(st.sampled_from(files)) if files else "SUMMARY.json"
    if change in ("flip-byte", "truncate") and not (bundle / pick).stat().st_size:
        change = "append"
    folder = bundle / draw(st.sampled_from(["", "gates", "raw/greedy", "lanes/spec"]))
    folder.mkdir(parents=True, exist_ok=True)
    name = draw(file_names)
    while os.path.lexists(folder / name):
        name += "_"
    if change == "add-file":
        (folder / name).write_bytes(draw(st.binary(max_size=64)))
    elif change == "add-empty-dir":
        (folder / name).mkdir()
    elif change in ("deep-chain", "add-file-deep"):
        depth = draw(st.sampled_from([2, 33, 40, 300]))
        chain = make_chain(folder, depth)
        if change == "add-file-deep":
            (chain / name).write_bytes(b"{}")
    elif change == "symlink":
        target = draw(st.sampled_from(["/etc/passwd", "SUMMARY.json", "nowhere", name, ".", ".."]))
        os.symlink(target, folder / name)
    elif change == "fifo":
        os.mkfifo(folder / name)
    elif change == "socket":
        if len(str(folder / name).encode()) < 100:  # a socket's path must fit in sun_path
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(str(folder / name))
        else:
            os.mkfifo(folder / name)
    elif change == "hardlink":
        os.link(bundle / pick, bundle.parent / f"outside-{len(os.listdir(bundle.parent))}")
    elif change == "flip-byte":
        data = bytearray((bundle / pick).read_bytes())
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        (bundle / pick).write_bytes(bytes(data))
    elif change == "truncate":
        data = (bundle / pick).read_bytes()
        (bundle / pick).write_bytes(data[:draw(st.integers(0, len(data) - 1))])
    elif change == "append":
        with open(bundle / pick, "ab") as handle:
            handle.write(draw(st.binary(min_size=1, max_size=64)))
    elif change == "delete":
        (bundle / pick).unlink()
    elif change == "file-to-dir":
        (bundle / pick).unlink()
        (bundle / pick).mkdir()
        (bundle / pick / "x").write_bytes(b"{}")
    elif change == "rename-case":
        upper = (bundle / pick).name.upper()
        target = (bundle / pick).with_name(upper if upper != (bundle / pick).name else upper + "_")
        os.rename(bundle / pick, target)
    elif change == "rename-nfd":
        source = bundle / pick  # the same-looking name, decomposed: "é" as "e" + U+0301
        os.rename(source, source.with_name(unicodedata.normalize("NFD", "é") + source.name))
    elif change == "envelope-link":
        from campaign.receipts.bundle import ENVELOPE

        os.rename(bundle / ENVELOPE, bundle.parent / ENVELOPE)
        os.symlink(bundle.parent / ENVELOPE, bundle / ENVELOPE)
    return f"{change} (file {pick!r}, name {name!r}, in {folder.relative_to(bundle).as_posix()!r})"


@given(changes=st.lists(st.sampled_from(TREE_CHANGES), min_size=1, max_size=3), data=st.data())
@example(changes=["deep-chain"], data=None).via("a 1,200-level folder chain (issue #30 item 7)")
@example(changes=["add-file"], data=None).via("a file name holding a carriage return and a line separator")
def test_tree_changes_are_refused(changes: list[str], data: st.DataObject | None) -> None:
    bundle = fresh_bundle()
    done = []
    for change in changes:
        if data is None and change == "deep-chain":  # explicit examples: the deepest chain, with a file at its end
            (make_chain(bundle, 1200) / "x.json").write_bytes(b"{}")
            done.append("a 1,200-level chain with x.json at its end")
        elif data is None:  # ... and a name that would make an error two lines
            (bundle / "gates" / "x\ry\u2029z").write_bytes(b"{}")
            done.append("a file gates/'x\\ry\\u2029z'")
        else:
            done.append(change_tree(bundle, change, data.draw))
    check_outcome(run_bounded(verify(bundle)), may_pass=False, what=f"verify after {done}",
                  evidence="; ".join(done))


# ---------------------------------------------------------------- envelopes

def _envelope(bundle: Path) -> dict[str, Any]:
    from campaign.receipts.bundle import ENVELOPE

    return json.loads((bundle / ENVELOPE).read_text())


def _write_envelope(bundle: Path, data: bytes | str) -> None:
    from campaign.receipts.bundle import ENVELOPE

    (bundle / ENVELOPE).write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)


RAW_ENVELOPES = {
    "empty": lambda e: b"",
    "spaces-1MiB": lambda e: b" " * (1 << 20),
    "open-brackets-1MiB": lambda e: b"[" * (1 << 20),
    "nested-brackets-100k": lambda e: b"[" * 100_000 + b"]" * 100_000,
    "nested-objects-50k": lambda e: b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "huge-int": lambda e: b'{"payloadType": ' + b"9" * 100_000 + b"}",
    "huge-float": lambda e: b'{"payloadType": 1e999999}',
    "nan": lambda e: b'{"payloadType": NaN, "payload": Infinity, "signatures": -Infinity}',
    "bad-utf8": lambda e: b'{"payloadType": "\xff\xfe"}',
    "bom": lambda e: b"\xef\xbb\xbf" + json.dumps(e).encode(),
    "utf16": lambda e: json.dumps(e).encode("utf-16"),
    "lone-surrogate": lambda e: json.dumps({**e, "payloadType": "\\ud800"}).encode().replace(b"\\\\ud800", b"\\ud800"),
    "duplicate-key": lambda e: json.dumps(e).replace('"payload"', '"payload": "x", "payload"', 1).encode(),
    "not-object": lambda e: b"[1, 2, 3]",
    "payload-not-base64": lambda e: json.dumps({**e, "payload": "%%%not base64%%%"}).encode(),
    "payload-huge-base64": lambda e: json.dumps({**e, "payload": base64.b64encode(b"[" * 3_000_000).decode()}).encode(),
    "payload-deep-json": lambda e: json.dumps({**e, "payload": base64.b64encode(b"[" * 200_000).decode()}).encode(),
    "signatures-20k-trusted-id": lambda e: json.dumps(
        {**e, "signatures": [{"keyid": e["signatures"][0]["keyid"], "sig": base64.b64encode(bytes(64)).decode()}]
         * 20_000}).encode(),
    "signatures-200k-trusted-id": lambda e: json.dumps(
        {**e, "signatures": [{"keyid": e["signatures"][0]["keyid"], "sig": base64.b64encode(bytes(64)).decode()}]
         * 200_000}).encode(),
    "signatures-20k-then-valid": lambda e: json.dumps(
        {**e, "signatures": [{"keyid": e["signatures"][0]["keyid"], "sig": "AAAA"}] * 20_000
         + e["signatures"]}).encode(),
    "signature-huge-keyid": lambda e: json.dumps(
        {**e, "signatures": [{"keyid": "k" * 10_000_000, "sig": "x"}]}).encode(),
}
# what may still verify: the signed statement is untouched and a valid signature is still there
MAY_PASS = {"signatures-20k-then-valid", "bom", "utf16"}  # the same JSON text, in an encoding json reads


@given(kind=st.sampled_from(sorted(RAW_ENVELOPES)))
def test_hostile_envelope_files(kind: str) -> None:
    bundle = fresh_bundle()
    _write_envelope(bundle, RAW_ENVELOPES[kind](_envelope(bundle)))
    check_outcome(run_bounded(verify(bundle)), may_pass=kind in MAY_PASS, what=f"verify of envelope {kind}",
                  evidence=kind)


def test_a_4_gib_sparse_envelope() -> None:
    """Item 5: an envelope is read with a cap, not whole (a sparse file costs no disk)."""
    from campaign.receipts.bundle import ENVELOPE

    bundle = fresh_bundle()
    with open(bundle / ENVELOPE, "r+b") as handle:
        handle.truncate(4 << 30)
    check_outcome(run_bounded(verify(bundle)), may_pass=False, what="verify of a 4 GiB sparse envelope")


@given(value=json_values)
def test_random_json_envelopes(value: Any) -> None:
    bundle = fresh_bundle()
    _write_envelope(bundle, json.dumps(value))
    check_outcome(run_bounded(verify(bundle)), may_pass=False, what="verify of a random JSON envelope",
                  evidence=json.dumps(value)[:1500])


def _set(document: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        document = document[part]
    document[path[-1]] = value


@given(data=st.data(), op=st.sampled_from(["replace", "insert", "delete", "more-signatures"]))
def test_mutated_envelopes(data: st.DataObject, op: str) -> None:
    """Random edits of the real envelope: may still verify (DSSE allows unknown fields and extra
    signatures), else one line."""
    bundle = fresh_bundle()
    envelope = _envelope(bundle)
    path = data.draw(st.sampled_from(walk_paths(envelope)[1:]), label="path")
    if op == "replace":
        _set(envelope, path, data.draw(json_values, label="value"))
    elif op == "insert":
        target = envelope
        for part in path[:-1]:
            target = target[part]
        if isinstance(target, dict):
            target[data.draw(hostile_texts, label="key")] = data.draw(json_values, label="value")
        else:
            target.append(data.draw(json_values, label="value"))
    elif op == "delete":
        target = envelope
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]
    else:
        extra = data.draw(st.lists(st.fixed_dictionaries({"keyid": st.one_of(hostile_texts, st.just(
            envelope["signatures"][0]["keyid"])), "sig": st.one_of(hostile_texts, st.just("A" * 88))}),
            max_size=20), label="signatures")
        envelope["signatures"] = extra + envelope["signatures"]
    _write_envelope(bundle, json.dumps(envelope))
    check_outcome(run_bounded(verify(bundle)), may_pass=True, what=f"verify of a mutated envelope ({op})",
                  evidence=json.dumps(envelope)[:1500])


# ---------------------------------------------------------------- manifests, signed again

def _resign(bundle: Path, statement: Any) -> None:
    from campaign.contracts.hashing import canonical_json
    from campaign.receipts.bundle import PAYLOAD_TYPE, pae
    from campaign.signing import load_signing_key

    key = load_signing_key()
    payload = canonical_json(statement)
    envelope = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
                "signatures": [{"keyid": key.keyid, "sig": key.sign(pae(PAYLOAD_TYPE, payload))}]}
    _write_envelope(bundle, json.dumps(envelope))


def _subject_map(statement: Any) -> Any:
    try:
        return {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} if len(
            {s["name"] for s in statement["subject"]}) == len(statement["subject"]) else None
    except (TypeError, KeyError):
        return None


NAME_EDITS = ["../outside", "/etc/passwd", "a\\b", "", "receipt.dsse.json", "./SUMMARY.json", "SUMMARY.json/",
              "gates//greedy/spec.json", "summary.json", unicodedata.normalize("NFD", "é.json"), "x" * 5000]


@given(data=st.data(), op=st.sampled_from(["rename", "digest", "drop", "duplicate", "add", "replace-subject",
                                           "predicate", "type", "subjects-not-list", "many-subjects"]))
def test_resigned_manifests(data: st.DataObject, op: str) -> None:
    bundle = fresh_bundle()
    statement = json.loads(base64.b64decode(_envelope(bundle)["payload"]))
    original = _subject_map(statement)
    mutated = copy.deepcopy(statement)
    subjects = mutated["subject"]
    index = data.draw(st.integers(0, len(subjects) - 1), label="subject")
    if op == "rename":
        subjects[index]["name"] = data.draw(st.one_of(st.sampled_from(NAME_EDITS), hostile_texts), label="name")
    elif op == "digest":
        subjects[index]["digest"]["sha256"] = data.draw(st.one_of(
            st.text(alphabet="0123456789abcdef", min_size=64, max_size=64), hostile_texts,
            st.just("0" * 10_000_000)), label="digest")
    elif op == "drop":
        del subjects[index]
    elif op == "duplicate":
        subjects.append(copy.deepcopy(subjects[index]))
    elif op == "add":
        subjects.append({"name": data.draw(hostile_texts, label="name"), "digest": {"sha256": "0" * 64}})
    elif op == "replace-subject":
        subjects[index] = data.draw(json_values, label="subject")
    elif op == "predicate":
        mutated["predicate"] = data.draw(json_values, label="predicate")
    elif op == "type":
        mutated["_type"] = data.draw(json_values, label="type")
    elif op == "subjects-not-list":
        mutated["subject"] = data.draw(json_values.filter(lambda v: not isinstance(v, list)), label="subject")
    else:
        subjects.extend({"name": f"n{i}", "digest": {"sha256": "0" * 64}} for i in range(60_000))
    _resign(bundle, mutated)
    may_pass = _subject_map(mutated) == original and mutated.get("_type") == statement["_type"] and isinstance(
        mutated.get("predicate", {}), dict)
    check_outcome(run_bounded(verify(bundle)), may_pass=may_pass, what=f"verify of a re-signed manifest ({op})",
                  evidence=json.dumps(mutated)[:1500])
