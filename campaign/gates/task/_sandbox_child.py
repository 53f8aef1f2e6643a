"""The inside of the sandbox. ``sandbox.py`` runs this file's text with ``python -I -S -B -c`` in a fresh
session; it reads its configuration from stdin, fences itself in, then runs the model's program and the
task's tests. It imports nothing from campaign: it must work with the standard library alone.

Layers, strongest first (each one reported, so a weaker machine says what it could not do):
- Landlock (kernel): writes allowed only beneath the task's directory; no TCP bind/connect; no
  signals to processes outside the sandbox.
- a network namespace of its own (no interfaces but a down loopback).
- root drops every capability (or, without Landlock, becomes nobody: uid/gid 65534).
- rlimits: address space, CPU seconds, file size, open files, no core dumps.
- an audit hook that refuses (and reports) writes outside the directory, process creation, sockets,
  signals and ctypes; it is what turns an attempt into a readable reason.
"""

import ctypes
import json
import os
import resource
import sys

_VIOLATIONS: list[str] = []


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _limits(cfg):
    memory, cpu, fsize = cfg["memory_bytes"], cfg["cpu_seconds"], cfg["file_bytes"]
    for name, value in (("RLIMIT_AS", memory), ("RLIMIT_CPU", cpu), ("RLIMIT_FSIZE", fsize),
                        ("RLIMIT_NOFILE", 64), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    return f"as={memory} cpu={cpu}s fsize={fsize} nofile=64"


def _network(libc):
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    if libc.unshare(clone_newnet) == 0:
        return "netns"
    if libc.unshare(clone_newuser | clone_newnet) == 0:
        return "userns+netns"
    return "none: " + os.strerror(ctypes.get_errno())


def _landlock(libc, workdir):
    sys_create, sys_add, sys_restrict = 444, 445, 446  # the same on every architecture
    abi = libc.syscall(sys_create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return "none: " + os.strerror(ctypes.get_errno())
    write_file, remove_dir, remove_file = 1 << 1, 1 << 4, 1 << 5
    make = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
    fs = write_file | remove_dir | remove_file | make
    if abi >= 2:
        fs |= 1 << 13  # refer (rename/link across directories)
    if abi >= 3:
        fs |= 1 << 14  # truncate

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    net = 3 if abi >= 4 else 0  # bind_tcp | connect_tcp
    scoped = 3 if abi >= 6 else 0  # abstract unix sockets | signals
    attr = Ruleset(fs, net, scoped)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(sys_create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return "none: create_ruleset: " + os.strerror(ctypes.get_errno())
    fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    rule = PathBeneath(fs, fd)
    if libc.syscall(sys_add, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
        return "none: add_rule: " + os.strerror(ctypes.get_errno())
    os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return "none: no_new_privs: " + os.strerror(ctypes.get_errno())
    if libc.syscall(sys_restrict, ruleset, ctypes.c_uint32(0)) != 0:
        return "none: restrict_self: " + os.strerror(ctypes.get_errno())
    os.close(ruleset)
    parts = ["fs-write"] + (["tcp"] if net else []) + (["signals"] if scoped else [])
    return f"landlock abi {abi}: " + ",".join(parts)


def _drop_privileges(libc, workdir, landlocked):
    """With Landlock fencing writes, root keeps its uid (the interpreter's stdlib may live in a
    root-only directory) but loses every capability; without Landlock, root becomes nobody."""
    if os.getuid() != 0:
        return f"uid {os.getuid()} (not root)"
    if not landlocked:
        for name in _PRELOAD:  # nobody may not be able to read them later
            try:
                __import__(name)
            except ImportError:
                pass
        for name in [workdir] + [os.path.join(workdir, f) for f in os.listdir(workdir)]:
            os.chown(name, 65534, 65534)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        return "uid 65534"
    for cap in range(64):  # the bounding set, so nothing regains them
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; EINVAL past the last cap is fine
    libc.prctl(28, 0x2F, 0, 0, 0)  # PR_SET_SECUREBITS: noroot, no_setuid_fixup, keep_caps_locked... locked

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        return "uid 0, capabilities kept: " + os.strerror(ctypes.get_errno())
    return "uid 0, no capabilities"


_PRELOAD = ("math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect",
            "typing", "random", "statistics", "fractions", "decimal", "hashlib", "operator", "copy", "json",
            "datetime", "textwrap", "unicodedata", "array", "numbers", "enum", "dataclasses")


def _inside(workdir, path):
    try:
        if isinstance(path, int):
            return True  # an fd that is already open
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == workdir or real.startswith(workdir + os.sep)


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "os.chmod",
                "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "os.chdir"}
_BLOCKED = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
            "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "socket.connect", "socket.bind",
            "socket.sendto", "socket.getaddrinfo", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
            "os.putenv", "os.unsetenv",
            "resource.setrlimit", "resource.prlimit")


def _install_hook(workdir):
    def hook(event, args):
        reason = None
        if event == "open" and args:
            path, mode, flags = (list(args) + [None, None])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and not _inside(workdir, path):
                reason = f"write outside its directory: {path}"
        elif event in _PATH_EVENTS and args:
            targets = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
            outside = [t for t in targets if not _inside(workdir, t)]
            if outside:
                reason = f"{event} outside its directory: {outside[0]!s}"  # a bytes path shows as b'...'
        elif event.startswith(_BLOCKED):
            reason = f"{event} is not allowed"
        if reason:
            if len(_VIOLATIONS) < 20:
                _VIOLATIONS.append(reason)
            raise PermissionError("sandbox: " + reason)

    sys.addaudithook(hook)


def _status(nonce, passed, reason, containment):
    sys.stdout.flush()
    line = json.dumps({"passed": passed, "reason": reason, "violations": _VIOLATIONS, "containment": containment})
    os.write(1, f"\n{nonce} {line}\n".encode())


def _describe(exc):
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return text[:300]


def main():
    cfg = json.loads(sys.stdin.readline())
    nonce, workdir = cfg["nonce"], os.path.realpath(cfg["workdir"])
    with open(os.path.join(workdir, "program.py"), encoding="utf-8") as handle:
        program = handle.read()
    with open(os.path.join(workdir, "tests.py"), encoding="utf-8") as handle:
        tests = handle.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    libc = _libc()
    containment = {"limits": _limits(cfg), "network": _network(libc), "filesystem": _landlock(libc, workdir)}
    containment["user"] = _drop_privileges(libc, workdir, containment["filesystem"].startswith("landlock"))
    os.chdir(workdir)
    sys.path[:] = [p for p in sys.path if p]  # never import from the task's directory
    for name in list(os.environ):
        if name not in ("PATH", "LANG", "HOME", "TMPDIR"):
            del os.environ[name]
    for name in cfg.get("preload") or ():  # a screen's numpy sets variables as it loads: before the hook
        try:
            __import__(name)
        except ImportError:
            pass
    if cfg.get("audit_hook", True):
        _install_hook(workdir)
    # like the HumanEval harness: a reply's `if __name__ == "__main__":` demo block does not run
    namespace = {"__name__": "__main__" if cfg.get("as_main") else "__sandbox__", "__builtins__": __builtins__}
    sys.argv[:] = cfg.get("argv") or ["program.py"]
    stage = "program"
    try:
        exec(compile(program, "program.py", "exec"), namespace)
        stage = "tests"
        exec(compile(tests, "tests.py", "exec"), namespace)
    except SystemExit as exc:
        if not (cfg.get("as_main") and exc.code in (0, None)):  # a script's sys.exit(0) is its normal end
            _status(nonce, False, f"{stage}: exited ({exc.code!r}) before the tests finished", containment)
            os._exit(1)
    except MemoryError:
        _status(nonce, False, f"{stage}: memory limit reached ({cfg['memory_bytes'] >> 20} MiB)", containment)
        os._exit(1)
    except RecursionError:
        _status(nonce, False, f"{stage}: RecursionError", containment)
        os._exit(1)
    except BaseException as exc:  # the model's exception, whatever it is, is the reason
        kind = "wrong answer" if stage == "tests" and isinstance(exc, AssertionError) else stage
        _status(nonce, False, f"{kind}: {_describe(exc)}", containment)
        os._exit(1)
    if _VIOLATIONS:
        _status(nonce, False, "sandbox violation: " + _VIOLATIONS[0], containment)
        os._exit(1)
    _status(nonce, True, "passed", containment)
    os._exit(0)


if __name__ == "__main__":
    main()
