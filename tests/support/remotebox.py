"""A second box for the tests: a Docker engine in its own network namespace, reached only over its veth
address, over TCP with TLS (a CA, a server and a client certificate made here with ``cryptography``) and
over SSH (Debian's openssh-server in the same namespace, with a key made here). It shares this machine's
files (so the test image's bind mounts of the host python, llama-server and the model work there) but not
its network: a lane on it listens on the box's address, and nothing reaches it through 127.0.0.1.

Everything it starts is tracked by pid and stopped at the end; traffic stays on the veth pair. Needs root,
iproute2, dockerd and sshd (.ci/run installs openssh-server)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.docker import CACHE, TEST_IMAGE

NETNS = "campaign-box"
HOST_IF, BOX_IF = "cbox0", "cbox1"
RUNNER_ADDRESS, BOX_ADDRESS = "10.231.77.1", "10.231.77.2"
TLS_PORT, SSH_PORT = 2376, 22


@dataclass
class Box:
    address: str
    folder: Path
    socket: str  # the engine's socket on the box
    dockerd_pid: int
    sshd_pid: int

    @property
    def tls_url(self) -> str:
        return f"tcp://{self.address}:{TLS_PORT}"

    @property
    def ssh_url(self) -> str:
        return f"ssh://root@{self.address}:{SSH_PORT}"

    def tls_host(self, *, ca: str = "ca.pem", client: str = "client") -> dict:
        return {"url": self.tls_url, "socket": self.socket,
                "tls": {"ca_cert": str(self.folder / ca), "client_cert": str(self.folder / f"{client}-cert.pem"),
                        "client_key": str(self.folder / f"{client}-key.pem")}}

    def ssh_host(self, *, key: str = "id_ed25519") -> dict:
        return {"url": self.ssh_url, "socket": self.socket,
                "ssh": {"identity_file": str(self.folder / key), "known_hosts": str(self.folder / "known_hosts")}}

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The docker CLI on the box's own engine (its local socket), as a person on that box would use it."""
        return subprocess.run(["docker", "-H", f"unix://{self.socket}", *args], capture_output=True, text=True,
                              timeout=timeout)


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done


def _stop_pid(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child: reaped, not a zombie that still "exists"
                return
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


# --- certificates and keys ------------------------------------------------------------------------------

def _pem_key(key) -> bytes:  # noqa: ANN001
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _certificate(subject: str, issuer_key, issuer_name, *, ca: bool = False, server_ip: str | None = None,  # noqa: ANN001
                 client: bool = False):  # noqa: ANN202
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name or name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server_ip:
        builder = (builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(server_ip))]),
                                         critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
    if client:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


def _write_pki(folder: Path) -> None:
    """ca.pem signs the engine's server certificate and client-*.pem; other-ca.pem signs nothing the engine
    trusts (a client that trusts it refuses the engine; ``stranger`` is a client the engine refuses)."""
    from cryptography.hazmat.primitives import serialization

    def save(name: str, key, cert) -> None:  # noqa: ANN001
        (folder / f"{name}-key.pem").write_bytes(_pem_key(key))
        (folder / f"{name}-cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key, ca = _certificate("campaign test CA", None, None, ca=True)
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    save("server", *_certificate("campaign-box", ca_key, ca.subject, server_ip=BOX_ADDRESS))
    save("client", *_certificate("campaign runner", ca_key, ca.subject, client=True))
    other_key, other = _certificate("another CA", None, None, ca=True)
    (folder / "other-ca.pem").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    save("stranger", *_certificate("a stranger", other_key, other.subject, client=True))


def _ssh_key(path: Path) -> str:
    """An ed25519 key pair in OpenSSH format; returns the public line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    (path.parent / f"{path.name}.pub").write_text(public + "\n")
    return public


# --- the box --------------------------------------------------------------------------------------------

def _network() -> None:
    if NETNS in _run("ip", "netns", "list").stdout.split():
        _run("ip", "netns", "del", NETNS, check=False)
    _run("ip", "link", "del", HOST_IF, check=False)
    _run("ip", "netns", "add", NETNS)
    _run("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", BOX_IF)
    _run("ip", "link", "set", BOX_IF, "netns", NETNS)
    _run("ip", "addr", "add", f"{RUNNER_ADDRESS}/24", "dev", HOST_IF)
    _run("ip", "link", "set", HOST_IF, "up")
    inside = ["nsenter", f"--net=/run/netns/{NETNS}"]
    _run(*inside, "ip", "addr", "add", f"{BOX_ADDRESS}/24", "dev", BOX_IF)
    _run(*inside, "ip", "link", "set", BOX_IF, "up")
    _run(*inside, "ip", "link", "set", "lo", "up")


def _wait_port(port: int, pid: int, log: Path, what: str, wait: float = 60) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-600:]}") from None
        try:
            with socket.create_connection((BOX_ADDRESS, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} not listening on {BOX_ADDRESS}:{port} after {wait:g}s")


def _start(cmd: list[str], log: Path, pidfile: Path) -> int:
    # nsenter, not `ip netns exec`: that remounts /sys, which hides the cgroup tree dockerd needs
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{NETNS}", *cmd], stdin=subprocess.DEVNULL,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def _start_dockerd() -> int:
    folder, run_dir = CACHE / "box", Path("/run/campaign-box")
    pki = folder / "pki"
    dockerd = _start(["dockerd", "-H", f"unix://{run_dir / 'docker.sock'}", "-H", f"tcp://{BOX_ADDRESS}:{TLS_PORT}",
                      "--tlsverify", f"--tlscacert={pki / 'ca.pem'}", f"--tlscert={pki / 'server-cert.pem'}",
                      f"--tlskey={pki / 'server-key.pem'}", "--data-root", str(folder / "data"),
                      "--exec-root", str(run_dir / "exec"), "--pidfile", str(run_dir / "docker.pid"),
                      "--storage-driver=vfs", "--iptables=false", "--ip6tables=false", "--bridge=none"],
                     folder / "dockerd.log", folder / "dockerd.pid")
    _wait_port(TLS_PORT, dockerd, folder / "dockerd.log", "the box's dockerd")
    return dockerd


def engine_gone(box: Box) -> None:
    """The box's engine dies (SIGKILL): its API stops answering; what its containers do is up to their shims.
    Its containerd goes with it, as systemd's stop of a crashed unit takes its processes: a containerd left
    running makes the next dockerd wait on it and give up ("containerd is still running", then "timeout
    waiting for containerd to start"), which once failed every later test of the box."""
    containerd = _pid_in(Path("/run/campaign-box/exec/containerd/containerd.pid"))
    os.kill(box.dockerd_pid, signal.SIGKILL)
    try:
        os.waitpid(box.dockerd_pid, 0)
    except ChildProcessError:
        pass
    Path("/run/campaign-box/docker.pid").unlink(missing_ok=True)
    if containerd is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(containerd, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(containerd) and time.monotonic() < deadline:
            time.sleep(0.1)
    # this machine's init reaps no orphan: the dead containerd stays a zombie, which a signal 0 (dockerd's
    # "is it still running") takes for alive; without its pidfile the next dockerd starts its own
    Path("/run/campaign-box/exec/containerd/containerd.pid").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Running, not a zombie (a zombie's /proc stat says Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def _pid_in(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def engine_back(box: Box) -> None:
    """The engine started again, as systemd would after a crash (without live-restore its containers were
    stopped; those with restart policy always come back)."""
    box.dockerd_pid = _start_dockerd()


def box_up() -> Box:
    """Start the box (tearing down a leftover one first) and load the test image into its engine."""
    if os.geteuid() != 0 or not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        pytest.fail("the second box needs root and openssh-server (.ci/run installs it)")
    folder = CACHE / "box"
    box_down()
    if folder.exists():
        shutil.rmtree(folder / "pki", ignore_errors=True)
    pki = folder / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    run_dir = Path("/run/campaign-box")
    run_dir.mkdir(mode=0o700, exist_ok=True)
    _network()
    _write_pki(pki)
    sock = str(run_dir / "docker.sock")
    dockerd = _start_dockerd()
    # sshd: root logs in with the test's key only; the box's host key is pinned in known_hosts
    authorized = _ssh_key(pki / "id_ed25519")
    _ssh_key(pki / "stranger_ed25519")
    host_public = _ssh_key(pki / "ssh_host_ed25519_key")
    (pki / "authorized_keys").write_text(authorized + "\n")
    (pki / "known_hosts").write_text(f"{BOX_ADDRESS} {host_public}\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    (pki / "sshd_config").write_text(
        f"ListenAddress {BOX_ADDRESS}\nPort {SSH_PORT}\nHostKey {pki / 'ssh_host_ed25519_key'}\n"
        f"AuthorizedKeysFile {pki / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {run_dir / 'sshd.pid'}\nAllowStreamLocalForwarding yes\nLogLevel VERBOSE\n")
    sshd = _start(["/usr/sbin/sshd", "-D", "-e", "-f", str(pki / "sshd_config")], folder / "sshd.log",
                  folder / "sshd.pid")
    _wait_port(SSH_PORT, sshd, folder / "sshd.log", "the box's sshd")
    box = Box(address=BOX_ADDRESS, folder=pki, socket=sock, dockerd_pid=dockerd, sshd_pid=sshd)
    _load_test_image(box)
    return box


def _load_test_image(box: Box) -> None:
    """The same image (same id) on the box: a lane pinned by digest must find it there, as after a pull."""
    wanted = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", TEST_IMAGE], capture_output=True,
                            text=True).stdout.strip()
    have = box.docker("image", "inspect", "-f", "{{.Id}}", TEST_IMAGE).stdout.strip()
    if wanted and have == wanted:
        return
    save = subprocess.Popen(["docker", "save", TEST_IMAGE], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", f"unix://{box.socket}", "load"], stdin=save.stdout, capture_output=True,
                          text=True, timeout=300)
    save.wait(timeout=60)
    if load.returncode != 0:
        raise RuntimeError(f"loading {TEST_IMAGE} into the box: {load.stderr.strip()}")


def box_emptied(sock: str = "/run/campaign-box/docker.sock") -> None:
    """Every container on the box removed (a test that failed may have left its daily, lanes or watchdog)."""
    if not os.path.exists(sock):
        return
    ids = subprocess.run(["docker", "-H", f"unix://{sock}", "ps", "-aq"], capture_output=True, text=True,
                         timeout=60).stdout.split()
    if ids:
        subprocess.run(["docker", "-H", f"unix://{sock}", "rm", "-f", *ids], capture_output=True, timeout=120)


def box_story(box: Box) -> str:
    """What the box says happened, for a failed test's message: its engine's last log lines and every
    watchdog container's logs (the watchdog says each step it takes on stdout)."""
    lines = ["--- dockerd.log (last 40 lines) ---",
             *(CACHE / "box" / "dockerd.log").read_text(errors="replace").splitlines()[-40:]]
    for row in box_containers(box):
        if "campaign.failsafe" in row.get("Labels", ""):
            said = box.docker("logs", row["ID"])
            lines += [f"--- {row['Names']} ({row['Status']}) ---", said.stdout[-3000:], said.stderr[-1000:]]
        else:
            lines.append(f"--- {row['Names']}: {row['Status']}")
    return "\n".join(lines)


def box_down() -> None:
    """Stop what box_up started, by pid, and remove the namespace; safe when nothing runs."""
    folder = CACHE / "box"
    box_emptied()  # containers first, so none outlives its engine holding a port
    for name in ("sshd.pid", "dockerd.pid"):
        _stop_pid(folder / name)
    if NETNS in _run("ip", "netns", "list", check=False).stdout.split():
        _run("ip", "netns", "del", NETNS, check=False)
    _run("ip", "link", "del", HOST_IF, check=False)


def box_containers(box: Box) -> list[dict]:
    listed = box.docker("ps", "-a", "--format", "{{json .}}")
    return [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
