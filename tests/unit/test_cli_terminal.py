"""What the command line prints is ours to style and the input's only as data: markup, emoji codes, control
characters and bidi overrides in a contract, a path, a bundle's file name or an argument are shown as they
are written (escaped), one error stays one line, and nothing ends in a traceback (Ctrl-C while starting
included)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from campaign import cli
from campaign.cli import _app as cli_app
from campaign.cli import status as cli_status
from campaign.terminal import UNSAFE, shown

REPO = Path(__file__).resolve().parents[2]
BASE = """\
contract: h
version: 1
lane_defaults: {runtime: process, engine: llamacpp, executable: llama-server, port: 18999, model: {path: /m.gguf}}
lanes:
  - {name: base, role: control}
"""
# pieces with a meaning to a terminal, to rich (markup, emoji codes) or to a reader of one line
PIECES = ["[/x]", "[/]", "[bold red]OK verified[/]", "[link=file:///etc/passwd]x[/link]", "a:b:", ":smile:",
          "\x1b[2J", "\x1b[31m", "\x1b]8;;http://x\x07", "\x1b", "\r", "\n", "\n verified: ", "\t", "\x00", "\x08",
          "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\u061c", "\ud800", "\udcff",
          "\\", "\\x1b", "é", "\U0001F600", "%s", "{0}", "error:"]
hostile = st.one_of(st.text(max_size=30),
                    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), min_size=1, max_size=6)
                    .map("".join))
FEW = settings(max_examples=30, derandomize=True, database=None, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # our own styling, should a forced colour system add it


def bad_chars(text: str) -> list[str]:
    """What must never reach a terminal from data (a line's own end aside)."""
    return sorted({f"U+{ord(c):04X}" for c in _SGR.sub("", text) if c != "\n" and UNSAFE.match(c)})


def one_plain_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, repr(text)
    assert bad_chars(text) == [], repr(text)
    return _SGR.sub("", text).rstrip("\n")


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=60))
@FEW
def test_shown_leaves_no_unsafe_character_and_is_idempotent(text: str) -> None:
    safe = shown(text)
    assert not UNSAFE.search(safe) and "\n" not in safe
    assert shown(safe) == safe
    if not UNSAFE.search(text):
        assert safe == text


def test_shown_names_each_escape() -> None:
    assert shown("a\x1b[2J\n verified:\u202e\ud800\udcff\x9b\t") == "a\\x1b[2J\\n verified:\\u202e\\ud800\\xff\\x9b\\t"


@given(hostile)
@FEW
def test_any_error_text_prints_as_itself_on_one_line(text: str) -> None:
    import io

    captured = io.StringIO()
    saved, sys.stderr = sys.stderr, captured
    try:
        cli_app._error(text)
    finally:
        sys.stderr = saved
    # exactly the escaped text: no markup read, no emoji made, nothing highlighted, nothing cut
    assert one_plain_line(captured.getvalue()) == f"error: {shown(text)}"


@given(st.lists(hostile, min_size=9, max_size=9))
@FEW
def test_a_table_of_any_values_shows_each_as_written(values: list[str]) -> None:
    import io

    row = {"window": values[0], "boxes": [values[1]], "phase": values[2], "lane": values[3], "gate": values[4],
           "gates_done": 0, "gates_planned": 1, "runner_pid": 1, "runner_alive": False, "armed": True,
           "deadline": values[5], "deadline_wall": None, "failsafe_failed": {"error": values[6]},
           "daily": values[7], "failsafe_backend": values[8]}
    captured = io.StringIO()
    saved, sys.stdout = sys.stdout, captured
    width, cli_app.out.width = cli_app.out.width, 20_000  # no cell folded, so each can be found whole
    try:
        cli_app.out.print(cli_status._status_table([row]))
    finally:
        sys.stdout, cli_app.out.width = saved, width
    printed = captured.getvalue()
    assert bad_chars(printed) == []
    assert len(printed.splitlines()) == 5  # top rule, header, rule, the one row, bottom rule
    for value in values[:5]:
        assert shown(value) in printed


def test_diff_titles_its_columns_with_the_two_contracts_as_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich takes a column title as a str or a Column: a Text passed as one made every diff an internal error."""
    monkeypatch.chdir(tmp_path)
    Path("a.yaml").write_text(BASE)
    Path("[b].yaml").write_text(BASE.replace("port: 18999", "port: 18998"))
    done = CliRunner(mix_stderr=False).invoke(cli.app, ["diff", "a.yaml", "[b].yaml"])
    assert done.exit_code == 0, done.stderr
    assert "a.yaml" in done.stdout and "[b].yaml" in done.stdout
    assert "18999" in done.stdout and "18998" in done.stdout


def validate(*args: str) -> tuple[int, str, str]:
    done = CliRunner(mix_stderr=False).invoke(cli.app, ["validate", *args])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize("extra,literal", [
    ('"[/x]": 1\n"[/x]": 2\n', "duplicate key '[/x]'"),
    ('"[/bold]": 1\n', "[/bold]"),
    ('"a:b: \\e[2J\\n verified: OK \\u202e": 1\n', "a:b: \\x1b[2J\\n verified: OK \\u202e"),
    ('description: "\\e[2J"\n"[bold red]x:smile:": 1\n', "[bold red]x:smile:"),
])
def test_a_contract_error_quoting_markup_or_controls_is_one_literal_line(tmp_path: Path, extra: str,
                                                                         literal: str) -> None:
    (tmp_path / "c.yaml").write_text(BASE + extra)
    code, stdout, stderr = validate(str(tmp_path / "c.yaml"))
    assert code == 2 and stdout == ""
    assert literal in one_plain_line(stderr)
    assert "😄" not in stderr and "🅱" not in stderr


@pytest.mark.parametrize("name", ["x[/b].yaml", "a:b:.yaml", "\x1b[2J\x1b[31mOK verified.yaml",
                                  "x\n verified: ok.yaml", "\u202eyaml.exe"])
def test_a_contract_path_holding_markup_or_controls_is_shown_as_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BASE + '"[/bold]": 1\n')
    code, _, stderr = validate(str(path))
    line = one_plain_line(stderr)
    assert code == 2 and shown(path) in line and "[/bold]" in line
    code, _, stderr = validate(str(tmp_path / ("missing-" + name.replace("/", "_"))))
    assert code == 2 and "missing-" in one_plain_line(stderr)


@given(hostile)
@FEW
def test_any_unknown_field_is_refused_in_one_plain_line(tmp_path_factory: pytest.TempPathFactory, key: str) -> None:
    folder = tmp_path_factory.mktemp("c")
    (folder / "c.yaml").write_text(BASE + f"{json.dumps(key)}: 1\n")
    code, stdout, stderr = validate(str(folder / "c.yaml"))
    assert code == 2 and stdout == ""
    one_plain_line(stderr)


@pytest.mark.parametrize("name", ["\x1b[2J\x1b[31mOK verified\x1b[0m", "x\nverified: ok", "x[/b]", "a:b:",
                                  "\u202etxt.exe"])
def test_verify_shows_a_hostile_file_name_in_a_bundle_as_written(bundle: Path, name: str) -> None:
    (bundle / name).parent.mkdir(exist_ok=True)
    (bundle / name).write_text("{}\n")
    done = CliRunner(mix_stderr=False).invoke(cli.app, ["verify", str(bundle)])
    assert done.exit_code == 1 and done.stdout == "", done.stdout
    assert shown(name) in one_plain_line(done.stderr)


def test_a_path_argument_in_a_symlink_loop_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, _, stderr = validate(str(tmp_path / "loop"))
    assert code == 2 and f"{tmp_path / 'loop'}: Too many levels of symbolic links" in one_plain_line(stderr)


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(cli, "_restore_orphans", lambda: None)
    monkeypatch.setattr(sys, "argv", ["campaign", *argv])
    # a host with its own Ctrl-C (set here: a suite started in a script's background inherits SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as exited:
            cli.main()
        # a host that calls main() in its own process keeps its Ctrl-C (only the program ignores one at its exit)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    return exited.value.code, capsys.readouterr().err


def test_an_argument_holding_a_nul_byte_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, stderr = run_main(monkeypatch, capsys, "validate", "a\x00b.yaml")  # click stats it while parsing
    assert code == 2 and one_plain_line(stderr) == "error: a\\x00b.yaml: an argument cannot hold a NUL byte"


@pytest.mark.parametrize("argv", [["a.yaml", "--detach"], ["a.yaml", "b.yaml"]])
def test_explain_with_no_window_end_to_print_under_is_refused_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, stderr = run_main(monkeypatch, capsys, "run", *argv, "--explain")  # a.yaml need not exist: nothing read
    assert code == 2 and "--explain takes one window in the foreground" in one_plain_line(stderr)


def test_a_usage_error_quoting_what_was_typed_is_one_plain_line(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, stderr = run_main(monkeypatch, capsys, "verify", "a", "\x1b[2J[/x]\n verified: a:b:")
    assert code == 2
    assert "unexpected extra argument (\\x1b[2J[/x]\\n verified: a:b:)" in one_plain_line(stderr)


def test_an_unexpected_exception_is_one_line_unless_debugging(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    import campaign.contracts.load

    def broken(*_: object, **__: object) -> None:
        raise KeyError("boom \x1b[2J [/x]")

    monkeypatch.setattr(campaign.contracts.load, "load_contract", broken)
    code, stderr = run_main(monkeypatch, capsys, "validate", str(tmp_path / "c.yaml"))
    assert code == 1
    assert one_plain_line(stderr) == ("internal error: KeyError: 'boom \\x1b[2J [/x]' "
                                      "(run with CAMPAIGN_DEBUG=1 for the traceback)")
    monkeypatch.setenv("CAMPAIGN_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main()


def test_a_full_disk_is_a_failed_run_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import errno

    import campaign.contracts.load

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "c.yaml"))

    monkeypatch.setattr(campaign.contracts.load, "load_contract", full)
    code, stderr = run_main(monkeypatch, capsys, "validate", str(tmp_path / "c.yaml"))
    assert code == 1 and "No space left on device" in one_plain_line(stderr) and "internal" not in stderr


def test_ctrl_c_while_importing_is_one_line_and_130() -> None:
    """The deterministic case: the interrupt arrives inside the imports at the top of campaign/cli/__init__.py."""
    script = ("import builtins, runpy, sys\n"
              "real = builtins.__import__\n"
              "def interrupted(name, *args, **kwargs):\n"
              "    if name == 'typer':\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *args, **kwargs)\n"
              "builtins.__import__ = interrupted\n"
              "sys.argv = ['campaign', '--help']\n"
              "runpy.run_module('campaign.cli', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")


def _sigint_as_a_terminal_leaves_it() -> None:
    """The child's SIGINT at its default, as a command started at a terminal has it: a suite started in the
    background of a script (no job control) runs with SIGINT ignored, and its children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_at_any_moment_of_the_start_is_never_a_traceback() -> None:
    """The real thing: SIGINT at several moments after the interpreter has reached the campaign package."""
    outcomes = []
    for delay in (0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4):
        child = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "campaign.cli", "--help"], cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "COLUMNS": "120"}, preexec_fn=_sigint_as_a_terminal_leaves_it)
        assert child.stderr is not None
        # -X importtime writes a line as each module's import ends: the first after the package's is one of
        # campaign/cli/__init__.py's own imports (Python's own start, and runpy finding the module, are not ours)
        reached = False
        for line in child.stderr:
            if reached:
                break
            reached = line.rstrip().endswith("| campaign")
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        rest = child.stderr.read()
        code = child.wait(timeout=60)
        said = [line for line in rest.splitlines() if not line.startswith("import time:")]
        # 130, or death by the SIGINT itself (Python re-raises it at exit for an interrupt it did not finish
        # handling): a shell shows both as exit status 130; what must never appear is a traceback
        assert "Traceback" not in rest and code in (0, 130, -signal.SIGINT), (delay, code, rest[-2000:])
        assert code == 0 or said[-1:] in ([], ["interrupted"]), (delay, said)  # 130 says so at most once, last
        outcomes.append(code)
    assert 130 in outcomes



@pytest.mark.parametrize("closed", [">&-", "2>&-", "<&- >&- 2>&-"])
def test_any_standard_stream_closed_keeps_the_commands_exit_code(closed: str) -> None:
    """`campaign validate X >&-` ran into a traceback at import (sys.stdout is None) and a refusal with stderr
    closed exited 1: a closed stream now goes to the null device, and the codes are the commands' own."""
    for target, codes in (("/nonexistent/contract.yaml", {2}), (str(REPO / "examples" / "demo.yaml"), {0, 2})):
        read, write = os.pipe()  # the exit code comes back on a pipe of its own: the streams may all be closed
        try:
            done = subprocess.run(["bash", "-c", f'"$0" -m campaign.cli validate "$1" {closed}; echo "$?" >&{write}',
                                   sys.executable, target], pass_fds=(write,), capture_output=True, text=True,
                                  cwd=REPO, check=False)
        finally:
            os.close(write)
        with os.fdopen(read) as result:
            code = int(result.read().strip())
        assert "Traceback" not in done.stdout + done.stderr
        # 0 or 2 for the demo (its model may be absent here), never 1 or a crash
        assert code in codes, (closed, target, code, done.stdout, done.stderr)
