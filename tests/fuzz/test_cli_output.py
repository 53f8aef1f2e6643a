"""Fuzzing what the command line prints: random texts put into a contract's key names and field values, into
the contract's path, into a bundle's folder and file names, and random shapes of a signed bundle's
SUMMARY.json for `publish`. The command runs as a user runs it (``campaign.cli.main`` with ``sys.argv``),
inside CliRunner's isolation (its stdout and stderr captured as bytes), in a forked child bounded in time and
memory.

Property: the exit code is 0, 1 or 2; no traceback; a failure prints exactly one line on stderr; no control
character (C0 but a line's end, DEL, C1), bidi control, line separator or lone surrogate reaches the output;
no emoji or other character is made up from the input (``a:b:`` stays ``a:b:``); and a text with no such
character that the message quotes appears literally, markup included (``[/x]`` prints as ``[/x]``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.fuzz.harness import bad_terminal_chars, finding, run_bounded, scratch, where_raised
from tests.fuzz.samples import MINIMAL, make_bundle
from tests.fuzz.strategies import file_names, hostile_texts, json_values, to_yaml, yaml_quoted
from tests.support.contracts import EXAMPLES

# Characters the tool itself may print beyond ASCII: table borders, arrows, dashes, ellipses, signs.
OWN = set("—–→←↔…×≥≤±·•✓✗✔✘≈µ°") | {chr(c) for c in range(0x2500, 0x2580)}


def run_cli(*args: str, state: str) -> dict[str, Any]:
    """In the child: ``campaign ARGS`` through cli.main, as `python -m campaign.cli` runs it; ``state``: an
    empty folder for XDG_STATE_HOME, so the orphan check main() starts with never meets a real window."""
    os.environ.update({"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "240", "XDG_STATE_HOME": state})
    from campaign import cli

    for value in vars(cli).values():  # consoles made at import, before NO_COLOR: no colour codes either
        if type(value).__module__.startswith(("rich.", "campaign.")) and hasattr(value, "_color_system"):
            value._color_system = None
    runner = CliRunner(mix_stderr=False)
    with runner.isolation() as (stdout, stderr):
        saved, sys.argv = sys.argv, ["campaign", *args]
        code: Any = 0
        raised = ""
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
        except BaseException as exc:  # a traceback the user would have seen
            import traceback

            raised = "".join(traceback.format_exception(exc)[-4:])
            code = "exception"
        finally:
            sys.argv = saved
            sys.stdout.flush()
            sys.stderr.flush()
        return {"code": code, "stdout": stdout.getvalue().decode("utf-8", "surrogateescape"),
                "stderr": stderr.getvalue().decode("utf-8", "surrogateescape"), "raised": raised}


def _plain(text: str) -> bool:
    """A text the output must hold as written: printable (repr() and the terminal escape leave it alone), no
    quote or backslash that repr() would double, short enough not to be cut."""
    return bool(text.strip()) and text.isprintable() and not any(c in text for c in "'\"\\") \
        and len(text) <= 60 and text == text.strip()


def check_cli(args: list[str], *, inputs: list[str], quoted: list[str] = (), codes: tuple[int, ...] = (0, 1, 2),
              evidence: str = "") -> None:
    """Run ``campaign ARGS`` and check the property; ``inputs``: every text the run was given;
    ``quoted``: texts the output must hold literally (when plain)."""
    from campaign.signing import init_keys

    init_keys()  # freeze and publish need the test's own key (kept once made)
    state = str(scratch("state-"))
    outcome = run_bounded(lambda: run_cli(*args, state=state))
    shown = f"campaign {' '.join(map(repr, args))[:300]}"
    evidence = f"{shown}; {evidence}"
    if outcome.kind != "ok":
        finding(outcome.kind if outcome.kind != "raised" else f"{outcome.exc_type} at {where_raised(outcome.tail)}",
                f"{shown}: {outcome.describe()}", evidence)
        return
    done = outcome.value
    output = done["stdout"] + done["stderr"]
    error_lines = [line for line in done["stderr"].splitlines() if line.strip()]
    bad = bad_terminal_chars(output)
    allowed = set("".join(inputs)) | OWN | {chr(c) for c in range(0x20, 0x7f)} | {"\n"}
    made_up = sorted({c for c in output if c not in allowed})
    missing = [text for text in quoted if _plain(text) and text not in output]
    if done["code"] == "exception":
        finding(f"traceback: {done['raised'].strip().splitlines()[-1][:80]} at {where_raised(done['raised'])}",
                f"{shown}: raised out of main:\n{done['raised']}", evidence)
    elif "Traceback" in output:
        finding("a traceback printed", f"{shown}: a traceback:\n{output[-1500:]}", evidence)
    elif done["code"] not in codes:
        finding(f"exit code {done['code']!r}", f"{shown}: exit code {done['code']!r} (expected one of {codes}); "
                                                f"stdout {done['stdout'][-400:]!r}; stderr {done['stderr'][-800:]!r}",
                evidence)
    elif done["code"] != 0 and len(error_lines) != 1:
        finding("error not one line", f"{shown}: the error is {len(error_lines)} lines: {done['stderr'][:800]!r}",
                evidence)
    elif bad:
        finding(f"control characters reach the terminal ({done['code']})",
                f"{shown}: {bad} reached the terminal: {output[:800]!r}", evidence)
    elif made_up:
        finding("characters made up", f"{shown}: characters in the output that no input holds (emoji?): "
                                      f"{made_up}: {output[:800]!r}", evidence)
    elif missing:
        finding("text not shown as written", f"{shown}: {missing[0]!r} is not in the output as written: "
                                             f"{output[:800]!r}", evidence)


def _contract_folder() -> Path:
    folder = scratch("cli-")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "greedy8.jsonl").write_bytes((EXAMPLES / "prompts" / "greedy8.jsonl").read_bytes())
    return folder


def _write(folder: Path, document: Any, name: str = "c.yaml") -> Path:
    path = folder / name
    path.write_bytes(to_yaml(document).encode("utf-8", "surrogatepass"))
    return path


# ---------------------------------------------------------------- contracts

PLACES = ["top-key", "lane-key", "gate-key", "input-name", "lane-name", "description", "contract-name",
          "input-file", "args-value", "env-name", "duplicate-key", "gate-id"]


def place_text(document: dict[str, Any], place: str, text: str) -> None:
    if place == "top-key":
        document[text] = 1
    elif place == "lane-key":
        document["lanes"][0][text] = 1
    elif place == "gate-key":
        document["gates"][0][text] = 1
    elif place == "input-name":
        document["inputs"][text] = {"file": "prompts/greedy8.jsonl"}
    elif place == "lane-name":
        document["lanes"][1]["name"] = text
    elif place == "description":
        document["description"] = text
    elif place == "contract-name":
        document["contract"] = text
    elif place == "input-file":
        document["inputs"]["p"]["file"] = text
    elif place == "args-value":
        document["lanes"][1]["set"]["args"]["--threads"] = text
    elif place == "env-name":
        document["lane_defaults"]["env"] = {text: "x"}
    elif place == "gate-id":
        document["gates"][0]["id"] = text


@given(text=hostile_texts, place=st.sampled_from(PLACES), command=st.sampled_from(["validate", "freeze", "diff"]))
@example(text="[/x]", place="top-key", command="validate")
@example(text="a:b:", place="description", command="diff")
@example(text="x\x1b[2J\x1b[31mOK verified", place="lane-key", command="validate")
def test_texts_in_a_contract(text: str, place: str, command: str) -> None:
    import copy

    folder = _contract_folder()
    document = copy.deepcopy(MINIMAL)
    if place == "duplicate-key":
        path = folder / "c.yaml"
        key = yaml_quoted(text)
        path.write_text(to_yaml(document) + f"{key}: 1\n{key}: 2\n", encoding="utf-8", errors="surrogatepass")
    else:
        place_text(document, place, text)
        path = _write(folder, document)
    args = {"validate": ["validate", str(path)], "freeze": ["freeze", str(path), "--record", str(folder / "r.json")],
            "diff": ["diff", str(_write(folder, MINIMAL, "base.yaml")), str(path)]}[command]
    echoed = place in ("top-key", "lane-key", "gate-key", "duplicate-key") and command != "diff"
    check_cli(args, inputs=[text, str(path), str(folder)], quoted=[text] if echoed else [],
              evidence=f"{text!r} as {place}")


@given(name=file_names, broken=st.booleans(), command=st.sampled_from(["validate", "freeze"]))
@example(name="x[/b].yaml", broken=False, command="validate")
@example(name="a:b:.yaml", broken=True, command="validate")
def test_a_contract_path(name: str, broken: bool, command: str) -> None:
    """The contract's own file name, valid or not: the path is printed either way."""
    folder = _contract_folder()
    document = dict(MINIMAL, **({"unknown_field": 1} if broken else {}))
    (folder / name).parent.mkdir(parents=True, exist_ok=True)  # an explicit example may hold a "/"
    path = _write(folder, document, name)
    args = ["validate", str(path)] if command == "validate" else ["freeze", str(path), "--record",
                                                                   str(folder / "r.json")]
    # validate names the contract either way; freeze names it in an error (on success, the record it wrote)
    quoted = [name] if command == "validate" or broken else []
    check_cli(args, inputs=[name, str(folder)], quoted=quoted, evidence=f"contract file name {name!r}")


@given(args=st.lists(st.one_of(hostile_texts, st.sampled_from(["--allow-path", "--record", "--help", "--", "-x",
                                                                "--trust", "validate", "verify"])), max_size=4),
       command=st.sampled_from(["validate", "verify", "diff", "freeze", "status", "publish", "nosuchcommand"]))
@example(args=["a\x00b.yaml"], command="validate")
@example(args=["a", "\x1b[2J[/x]\n verified: a:b:"], command="verify")
def test_random_arguments(args: list[str], command: str) -> None:
    """Whatever is typed: a usage error is one line too."""
    if any("\ud800" <= c <= "\udfff" for a in args for c in a):
        return
    check_cli([command, *args], inputs=[*args, command])


# ---------------------------------------------------------------- bundles

@given(name=file_names, where=st.sampled_from(["extra-file", "bundle-folder", "extra-folder"]))
@example(name="\x1b[2J\x1b[31mOK verified\x1b[0m", where="extra-file")
@example(name="x\nverified: ok", where="extra-file")
@example(name="x[/b]", where="bundle-folder")
def test_names_in_a_bundle(name: str, where: str) -> None:
    folder = scratch("cli-bundle-")
    bundle = make_bundle(folder)
    if where == "bundle-folder":
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # an explicit example may hold a "/"
        os.rename(bundle, folder / name)
        bundle = folder / name
    elif where == "extra-file":
        (bundle / "gates" / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / "gates" / name).write_bytes(b"{}\n")
    else:
        (bundle / "gates" / name).mkdir()
        (bundle / "gates" / name / "x.json").write_bytes(b"{}\n")
    check_cli(["verify", str(bundle)], inputs=[name, str(folder)], quoted=[name],
              codes=(0,) if where == "bundle-folder" else (1,), evidence=f"{name!r} as {where}")


@given(summary=json_values, gate=json_values, keep_shape=st.booleans())
def test_publish_of_any_signed_summary(summary: Any, gate: Any, keep_shape: bool) -> None:
    """Item 9: a validly signed bundle whose SUMMARY.json (or a gate result) has an unexpected shape."""
    from campaign.receipts.bundle import sign_bundle
    from campaign.signing import load_signing_key

    folder = scratch("cli-publish-")
    bundle = make_bundle(folder)
    if keep_shape and isinstance(summary, dict):
        summary = {"schema": "campaign.summary/v1", "status": "complete", "candidates": {"spec": summary}}
    (bundle / "SUMMARY.json").write_text(json.dumps(summary))
    (bundle / "gates" / "greedy" / "spec.json").write_text(json.dumps(gate))
    sign_bundle(bundle, load_signing_key(), {"window": bundle.name})
    texts = [json.dumps(summary, ensure_ascii=False), json.dumps(gate, ensure_ascii=False), str(folder)]
    check_cli(["publish", str(bundle), "--out", str(folder / "out")], inputs=texts,
              evidence=f"SUMMARY.json {texts[0][:600]}; gates/greedy/spec.json {texts[1][:600]}")
