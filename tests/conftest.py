"""Shared fixtures. Integration tests use the real llama-server (built by `make engine`, put on PATH by
`make test`) and the real SmolLM2 model; nothing here stands in for an engine. Helpers the tests import
live in ``tests/support``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import campaign.gates.registry  # noqa: F401 (every gate kind registered: the contract schema knows them all)
from tests.support.contracts import MODEL

# fixtures more than one test module uses
pytest_plugins = ["tests.support.bundles", "tests.support.state", "tests.support.schemacorpus"]


@pytest.fixture(scope="session", autouse=True)
def isolated_state(tmp_path_factory: pytest.TempPathFactory):
    """Window state (claims, journals, armed failsafes) in this session's own folder, never the user's: a
    window a test runs never meets one the user (or another session) has armed on this machine. Session
    scope, so the module-scoped windows run with it too; a test that needs its own sets it again."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(autouse=True)
def isolated_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own key directory, so no test signs with (or trusts) the user's key."""
    config = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return config


@pytest.fixture
def llama_server() -> str:
    path = shutil.which("llama-server")
    if not path:
        pytest.fail("llama-server is not on PATH: run the tests with `make test` (it builds and finds the engine)")
    if not MODEL.exists():
        pytest.fail(f"{MODEL} missing: run `make model`")
    return path
