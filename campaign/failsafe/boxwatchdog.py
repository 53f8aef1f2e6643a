"""The watchdog that runs on the daily's own box, in a container on its engine (the ``engine`` failsafe).

This file is copied into the container as it is and run by that image's python: standard library only,
never an import from campaign. The runner's machine may die, lose its network or be switched off; the
box keeps the deadline. The container has the folder of the box engine's socket mounted read-only (the
socket's path in ``CAMPAIGN_ENGINE_SOCKET``), restart policy ``always`` (a box that reboots starts it
again), host networking (to see the daily answer at its own address), and its
settings in ``CAMPAIGN_FAILSAFE`` (JSON): window, daily (container id), restart_policy, deadline (the box's
epoch seconds), grace (seconds), endpoint.

It restores the daily when the box's clock passes the deadline, or when the runner's heartbeat (a file
the runner rewrites through the engine's archive API every few seconds) has not changed for ``grace``
seconds of the box's own clock: first it stops and removes this window's lane containers (they hold the
daily's port and GPUs), then starts the daily container with its own restart policy back, then waits for
it to answer. It says each step on stdout (``docker logs``), retries a failed restore with backoff for as
long as it runs, and once the daily answers it marks itself done and idles until the runner or
``campaign cleanup`` removes it.

``--dry-run`` is the pre-flight check: reach the engine through the socket, see the daily, print "fired".
"""

import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
import urllib.request

SOCKET = os.environ.get("CAMPAIGN_ENGINE_SOCKET", "/campaign/engine/docker.sock")
HEARTBEAT = "/campaign/heartbeat"
DONE = "/campaign/restored"
POLL = 0.5
RETRY_CAP = 30.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(SOCKET)
        self.sock = sock


def api(method, path, body=None, timeout=60.0):
    connection = _UnixConnection(timeout)
    try:
        connection.request(method, "/v1.41" + path, body=None if body is None else json.dumps(body),
                           headers={"Content-Type": "application/json"} if body is not None else {})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        return response.status, (json.loads(data) if data else None)
    except ValueError:
        return response.status, data.decode(errors="replace")


def say(message):
    print(time.strftime("%Y-%m-%dT%H:%M:%SZ ", time.gmtime()) + message, flush=True)


def read_heartbeat():
    try:
        with open(HEARTBEAT, "rb") as handle:
            return handle.read(4096)  # one number; bounded all the same
    except OSError:
        return None


def stop_lanes(window):
    query = urllib.parse.quote(json.dumps({"label": [f"campaign.window={window}", "campaign.lane"]}))
    status, items = api("GET", f"/containers/json?all=1&filters={query}")
    if status != 200:
        raise RuntimeError(f"listing this window's lanes: HTTP {status} {items}")
    for item in items or []:
        if (item.get("Labels") or {}).get("campaign.failsafe"):
            continue  # this watchdog itself
        name = (item.get("Names") or ["?"])[0].lstrip("/")
        api("POST", f"/containers/{item['Id']}/stop?t=10", timeout=40)
        status, said = api("DELETE", f"/containers/{item['Id']}?force=1")
        say(f"lane container {name} removed" if status in (204, 404) else f"lane container {name}: HTTP {status} {said}")


def answers(endpoint):
    try:
        with urllib.request.urlopen(endpoint.rstrip("/") + "/v1/models", timeout=5) as response:
            return response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500  # 401: it serves and wants its key, which this watchdog never holds
    except (OSError, http.client.HTTPException, ValueError):  # refused, reset, timed out, a garbled reply
        return False


def restore_once(config):
    daily = config["daily"]
    stop_lanes(config["window"])
    status, attrs = api("GET", f"/containers/{daily}/json")
    if status == 404:
        raise RuntimeError(f"the daily container {daily[:12]} is gone from this engine; start it by hand")
    if status != 200:
        raise RuntimeError(f"inspecting the daily: HTTP {status} {attrs}")
    policy = config.get("restart_policy") or {"Name": "no"}
    if (policy.get("Name") or "no") != "no":
        api("POST", f"/containers/{daily}/update", {"RestartPolicy": policy})
    if not (attrs.get("State") or {}).get("Running"):
        status, said = api("POST", f"/containers/{daily}/start", timeout=120)
        if status not in (204, 304):
            raise RuntimeError(f"starting the daily: HTTP {status} {said}")
        say(f"daily container {attrs.get('Name', daily).lstrip('/')} started")
    deadline = time.monotonic() + float(config.get("budget") or 600)
    while time.monotonic() < deadline:
        status, attrs = api("GET", f"/containers/{daily}/json")
        if status != 200 or not (attrs.get("State") or {}).get("Running"):
            raise RuntimeError(f"the daily stopped again (exit code {(attrs or {}).get('State', {}).get('ExitCode')})")
        if answers(config["endpoint"]):
            return
        time.sleep(1.0)
    raise RuntimeError(f"the daily did not answer at {config['endpoint']} within {config.get('budget')}s")


def main():
    config = json.loads(os.environ["CAMPAIGN_FAILSAFE"])
    if "--dry-run" in sys.argv:
        status, _ = api("GET", "/_ping")
        found, _ = api("GET", f"/containers/{config['daily']}/json")
        if status != 200 or found != 200:
            say(f"dry run: engine ping HTTP {status}, daily container HTTP {found}")
            return 1
        say("fired")
        return 0
    if os.path.exists(DONE):
        say("the daily was restored already; idle until removed")
        while True:
            time.sleep(3600)
    grace, deadline = float(config["grace"]), float(config["deadline"])
    last, changed = read_heartbeat(), time.monotonic()
    say(f"armed: window {config['window']}, deadline in {deadline - time.time():.0f}s (box clock), "
        f"heartbeat grace {grace:g}s")
    while True:
        beat = read_heartbeat()
        if beat != last:
            last, changed = beat, time.monotonic()
        if time.time() >= deadline:
            reason = "the deadline passed"
            break
        if time.monotonic() - changed > grace:
            reason = f"the runner's heartbeat stopped {time.monotonic() - changed:.0f}s ago"
            break
        time.sleep(POLL)
    say(f"restoring the daily: {reason}")
    wait = 2.0
    while True:
        try:
            restore_once(config)
        except Exception as exc:  # top level of the box's watchdog: the daily is down, so whatever broke is
            # said on stdout (docker logs) and the restore tried again
            say(f"restore failed: {type(exc).__name__}: {exc}; retrying in {wait:g}s")
            time.sleep(wait)
            wait = min(wait * 2, RETRY_CAP)
            continue
        break
    with open(DONE, "w") as handle:
        handle.write(reason + "\n")
    say(f"restored: the daily answers at {config['endpoint']}")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
