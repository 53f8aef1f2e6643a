"""The supervisor outside the runner's process tree: what keeps a window's deadline when the runner and its
watchdog pair are all killed together.

The watchdog pair (``watchdog``) is two processes the runner started: one ``kill -9`` of the whole window
takes them along, and then nothing brings the daily back until a person types a ``campaign`` command
(its orphan sweep). Three supervisors live outside that tree:

- ``engine``: the watchdog container on the daily's own Docker engine (``enginefailsafe``), restart
  policy ``always``: the engine restarts it, the runner's death is its trigger;
- ``systemd``: the transient timer of the system manager (``failsafe.arm``);
- the periodic check: ``campaign failsafe check`` (the orphan sweep) run every minute by cron, installed by
  ``campaign failsafe install`` as one crontab line. It needs a cron daemon running (cron, cronie or
  busybox crond) and nothing else; where systemd runs, the timer already guards each window.

This module writes and reads the periodic check's records (where it was installed, when it last ran),
installs its crontab line, and names, for a window being armed, which supervisor guards it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from campaign.daily.state import state_root
from campaign.errors import PreflightError
from campaign.fsutil import UnreadableFile, atomic_write_bytes, atomic_write_json, load_json_strict, read_text_bounded
from campaign.lanes.runtimes.base import read_proc

__all__ = ["CHECK_EVERY", "MARK", "Installed", "check_line", "cron_daemon_running", "guard", "install",
           "last_check_age", "mark_check_ran", "uninstall"]

MARK = "# campaign failsafe check"  # ends our crontab line: found again, replaced, removed by it
CHECK_EVERY = 60.0  # cron's resolution: every minute
FRESH = 3 * CHECK_EVERY  # a check that ran within this is taken as running
RECORD_BYTES = 64 << 10
CRON_DAEMONS = frozenset({"cron", "crond", "busybox"})


def _record_path() -> Path:
    return state_root() / "failsafe-check.json"


def _last_path() -> Path:
    return state_root() / "failsafe-check.last"


def log_path() -> Path:
    return state_root() / "failsafe-check.log"


def check_command(python: str | None = None) -> str:
    """What cron runs: this python and this campaign, with this state folder (cron's environment is bare)."""
    package_parent = str(Path(__file__).resolve().parents[2])
    env = [f"XDG_STATE_HOME={shlex.quote(str(state_root().parent))}"]
    if package_parent not in _site_paths():  # a checkout run from its folder, not an installed package
        env.append(f"PYTHONPATH={shlex.quote(package_parent)}")
    command = [*env, shlex.quote(python or sys.executable), "-m", "campaign.cli", "failsafe", "check"]
    return " ".join(command) + f" >>{shlex.quote(str(log_path()))} 2>&1"


def _site_paths() -> list[str]:
    import site

    return [*site.getsitepackages(), site.getusersitepackages()]


def check_line(python: str | None = None) -> str:
    """The crontab line: every minute; ``%`` is a newline to cron, so it is escaped."""
    return f"* * * * * {check_command(python).replace('%', chr(92) + '%')} {MARK}"


class Installed:
    """What ``install`` did, in words the command prints."""

    def __init__(self, line: str, warnings: list[str]) -> None:
        self.line, self.warnings = line, warnings


def _crontab(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    program = shutil.which("crontab")
    if program is None:
        raise PreflightError("no `crontab` on this machine: install cron (Debian/Ubuntu: apt-get install cron; "
                             "Alpine: busybox crond; RHEL: cronie) and start its daemon, or have your own scheduler "
                             f"run every minute: {check_command()}")
    try:
        return subprocess.run([program, *args], input=stdin, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreflightError(f"crontab {' '.join(args)} failed: {exc}") from exc


def _current_crontab() -> list[str]:
    listed = _crontab("-l")
    if listed.returncode != 0:  # "no crontab for USER" is an empty crontab; anything else is said
        if "no crontab" in listed.stderr.lower():
            return []
        raise PreflightError(f"crontab -l failed: {' '.join(listed.stderr.split())[:200]}")
    return listed.stdout.splitlines()


def _write_crontab(lines: list[str]) -> None:
    written = _crontab("-", stdin="".join(f"{line}\n" for line in lines))
    if written.returncode != 0:
        raise PreflightError(f"crontab - failed: {' '.join(written.stderr.split())[:200]}")


def install() -> Installed:
    """Put the check's line in this user's crontab (an older one of ours is replaced) and record it."""
    line = check_line()
    kept = [existing for existing in _current_crontab() if not existing.rstrip().endswith(MARK)]
    _write_crontab([*kept, line])
    state_root().mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_json(_record_path(), {"kind": "cron", "line": line, "installed_at": time.time()})
    warnings = [] if cron_daemon_running() else [
        "no cron daemon runs on this machine now: the line is installed but nothing runs it until one does "
        "(Debian/Ubuntu: service cron start; busybox: crond)"]
    return Installed(line, warnings)


def uninstall() -> bool:
    """Our line out of the crontab and the record gone; False if there was none."""
    lines = _current_crontab()
    kept = [existing for existing in lines if not existing.rstrip().endswith(MARK)]
    if len(kept) != len(lines):
        _write_crontab(kept)
    had = _record_path().exists()
    _record_path().unlink(missing_ok=True)
    return had or len(kept) != len(lines)


def installed() -> dict[str, Any] | None:
    try:
        found = load_json_strict(_record_path(), limit=RECORD_BYTES)
    except (UnreadableFile, OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def mark_check_ran() -> None:
    state_root().mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_bytes(_last_path(), f"{time.time():.3f}\n".encode())


def last_check_age() -> float | None:
    """Seconds since the periodic check last ran (any way it was run), or None if it never did."""
    try:
        return max(0.0, time.time() - float(read_text_bounded(_last_path(), 64, what="failsafe check mark")))
    except (UnreadableFile, ValueError):
        return None


def cron_daemon_running() -> bool:
    """A cron daemon among this machine's processes (cron, crond, busybox crond), read from /proc."""
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            name = read_proc(f"/proc/{entry.name}/comm", 64).decode(errors="replace").strip()
            if name in CRON_DAEMONS and (name != "busybox" or b"crond" in read_proc(f"/proc/{entry.name}/cmdline",
                                                                                     4096)):
                return True
        except OSError:
            continue
    return False


def guard(backend: str, state: Any) -> tuple[str, str | None]:
    """Which supervisor outside the runner's process tree keeps this window's deadline, in words, and a
    warning when none does (the daily then waits for the next `campaign` command once the runner and its
    watchdogs are all gone)."""
    if backend == "engine":
        return (f"the watchdog container {str(state.failsafe_container or '')[:12]} on the daily's Docker engine "
                "(restart policy always)"), None
    if backend == "systemd":
        return f"the systemd timer {state.failsafe_unit}.timer", None
    record, age = installed(), last_check_age()
    if age is not None and age <= FRESH:  # installed here, or run by a scheduler of the user's own: it runs
        how = f"{record.get('kind', 'cron')}, every minute; " if record is not None else ""
        return f"the periodic check `campaign failsafe check` ({how}last ran {age:.0f}s ago)", None
    if record is not None:
        said = "has never run" if age is None else f"last ran {age:.0f}s ago"
        return "none", (f"the periodic check installed ({record.get('kind', 'cron')}) {said}: is a cron daemon "
                        "running? Until it runs, a window whose runner and watchdogs are all killed leaves the daily "
                        "down until the next `campaign` command")
    return "none", ("no supervisor outside the runner's process tree (no systemd here, no periodic check): if the "
                    "runner and both watchdogs are killed together, the daily stays down until the next `campaign` "
                    "command; install one with `campaign failsafe install`")


def environment_note() -> str:
    """For `campaign failsafe install`: what the line runs under."""
    return f"state folder {state_root()}, python {sys.executable}, log {log_path()} (user {os.getuid()})"
