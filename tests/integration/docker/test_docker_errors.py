"""The Docker error boundary against a real engine: a container removed under us is DockerNotFound (and a
restore takes it for gone), a name already taken is DockerRefused (409), and a restore whose lanes sit on
two engines, one answering and one not, stops the first and lists the second as not stopped, never as
gone. The engine that does not answer is a closed port on this machine (connection refused)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from campaign.daily import dailycontainer
from campaign.daily.restore import stop_window_lanes
from campaign.daily.state import LaneProcess, WindowState
from campaign.errors import DockerNotFound, DockerRefused, DockerUnreachable
from campaign.lanes.runtimes.docker import LABEL_LANE, LABEL_WINDOW, remove_container
from campaign.lanes.runtimes.dockererrors import docker_errors
from campaign.lanes.runtimes.dockerhost import client_for
from tests.support.docker import need_docker

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("state_home")]

WINDOW = f"w-errors-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def made() -> Iterator[list[str]]:
    """Containers a test made, removed at its end whatever happened."""
    ids: list[str] = []
    yield ids
    client = client_for(None)
    for container in ids:
        try:
            remove_container(client, container)
        except DockerNotFound:
            pass


def _sleeper(image: str, made: list[str], *, labels: dict[str, str] | None = None, name: str | None = None) -> str:
    client = client_for(None)
    container = client.api.create_container(image, entrypoint=["sleep", "600"], labels=labels or {}, name=name,
                                            network_disabled=True)
    made.append(container["Id"])
    client.api.start(container["Id"])
    return str(container["Id"])


def _closed_engine() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def test_a_container_removed_under_us_is_not_found(made: list[str]) -> None:
    image = need_docker()
    container = _sleeper(image, made)
    client = client_for(None)
    client.api.remove_container(container, force=True)  # someone else's `docker rm -f`
    with pytest.raises(DockerNotFound, match=r"^docker engine .*: inspecting x: 404 No such container"), \
            docker_errors("inspecting x"):
        client.api.inspect_container(container)
    assert dailycontainer._inspect(client, container) is None  # the container daily's "not there"
    remove_container(client, container)  # removing what is gone already is done, not an error


def test_a_name_already_taken_is_refused_with_the_engines_status(made: list[str]) -> None:
    image = need_docker()
    name = f"campaign-errors-{uuid.uuid4().hex[:8]}"
    _sleeper(image, made, name=name)
    with pytest.raises(DockerRefused) as caught, docker_errors(f"creating {name}"):
        made.append(client_for(None).api.create_container(image, entrypoint=["true"], name=name)["Id"])
    assert caught.value.status == 409 and "already in use" in str(caught.value)


def test_restore_stops_what_it_reaches_and_lists_what_it_cannot_never_as_gone(made: list[str]) -> None:
    image = need_docker()
    ours = _sleeper(image, made, labels={LABEL_WINDOW: WINDOW, LABEL_LANE: "cand"})
    removed = _sleeper(image, made, labels={LABEL_WINDOW: WINDOW, LABEL_LANE: "base"})
    client_for(None).api.remove_container(removed, force=True)
    unreachable = _closed_engine()
    state = WindowState(window=WINDOW, bundle="/nonexistent", contract="/c.yaml", record="/c.freeze.json",
                        runner_pid=os.getpid(), boot_id="b", lanes=[
                            LaneProcess(visit="cand@1", container=ours),
                            LaneProcess(visit="base@1", container=removed),  # gone: the engine said so
                            LaneProcess(visit="far@1", container="f" * 64, docker_host={"url": unreachable})])
    stopped, not_stopped = stop_window_lanes(state, grace=1.0)
    assert stopped == ["cand@1"]
    assert [line.split(":")[0] for line in not_stopped] == ["far@1"]
    assert f"DockerUnreachable: docker engine {unreachable}:" in not_stopped[0]
    with pytest.raises(DockerNotFound):
        with docker_errors("inspecting the stopped lane"):
            client_for(None).api.inspect_container(ours)


def test_a_daily_whose_engine_does_not_answer_is_an_error_not_a_stopped_daily() -> None:
    need_docker()
    snap = {"container": "daily", "docker_host": {"url": _closed_engine()}, "restart_policy": {"Name": "no"}}
    with pytest.raises(DockerUnreachable, match="inspecting container 'daily': connection refused"):
        dailycontainer.is_running(snap)
    with pytest.raises(DockerUnreachable):
        dailycontainer.stop(snap)
