"""The daily's credentials leave a window's private state as references to the variables holding them, and
come back from an environment; a scrubbed argv still matches the running daily's."""

from __future__ import annotations

import pytest

from campaign.daily.secretstate import KEY, forget, refuse_unresolved, resolve, same_words
from campaign.errors import RunError

KEY_VALUE = "sk-daily-" + "Q7c2Lx9PaaVt3Kd8"
TOKEN = "hf_" + "TokenOfTheDailyNeverShown42"
ODD = "ghp_" + "NoVariableHoldsThis0123456789"


def snapshot() -> dict:
    return {"runtime": "docker", "argv": ["llama-server", "--api-key", KEY_VALUE, f"--hf-token={ODD}"],
            "env": {"HF_TOKEN": TOKEN, "PATH": "/usr/bin"},
            "config": {"Env": [f"HF_TOKEN={TOKEN}", "PATH=/usr/bin"],
                       "Cmd": ["--api-key", KEY_VALUE, f"--hf-token={ODD}"]},
            "env_sha256": "ab" * 32, "api_key_env": "DAILY_KEY"}


def test_every_value_becomes_a_reference_wherever_it_stands() -> None:
    snap = snapshot()
    scrubbed = forget(snap, [KEY_VALUE, TOKEN, ODD], api_key_env="DAILY_KEY", api_key=KEY_VALUE,
                      environ={"DAILY_KEY": KEY_VALUE})
    text = repr(scrubbed)
    assert KEY_VALUE not in text and TOKEN not in text and ODD not in text
    assert scrubbed["argv"] == ["llama-server", "--api-key", "${env:DAILY_KEY}", "--hf-token=${removed:1}"]
    assert scrubbed["env"]["HF_TOKEN"] == "${env:HF_TOKEN}" and "HF_TOKEN=${env:HF_TOKEN}" in scrubbed["config"]["Env"]
    assert scrubbed[KEY] == {"${env:DAILY_KEY}": "DAILY_KEY", "${env:HF_TOKEN}": "HF_TOKEN", "${removed:1}": None}
    assert scrubbed["env_sha256"] == snap["env_sha256"] and snap["argv"][2] == KEY_VALUE  # the original untouched
    # forgotten twice (a resumed window that never stopped the daily again): the references stay as they are
    again = forget(scrubbed, ["${env:DAILY_KEY}", "${removed:1}"], api_key_env="DAILY_KEY", api_key=None, environ={})
    assert again == scrubbed


def test_resolve_puts_the_values_back_and_names_what_it_cannot() -> None:
    scrubbed = forget(snapshot(), [KEY_VALUE, TOKEN], api_key_env="DAILY_KEY", api_key=KEY_VALUE, environ={})
    back, missing = resolve(scrubbed, {"DAILY_KEY": KEY_VALUE, "HF_TOKEN": TOKEN})
    assert missing == [] and KEY not in back
    assert back == snapshot()
    partly, missing = resolve(scrubbed, {"DAILY_KEY": KEY_VALUE, "HF_TOKEN": ""})  # set but empty: not held
    assert missing == ["HF_TOKEN"] and partly[KEY] == {"${env:HF_TOKEN}": "HF_TOKEN"}
    with pytest.raises(RunError, match=r"cannot be started again: .*\(HF_TOKEN\)"):
        refuse_unresolved(partly, "started again")
    refuse_unresolved(back, "started again")  # nothing left to put back: no refusal
    assert resolve(snapshot(), {}) == (snapshot(), [])  # never scrubbed: as it is


def test_a_scrubbed_argv_matches_the_running_one_by_its_references_only() -> None:
    scrubbed = forget(snapshot(), [KEY_VALUE, ODD], api_key_env="DAILY_KEY", api_key=KEY_VALUE, environ={})
    running = snapshot()["argv"]
    assert same_words(scrubbed["argv"], running, scrubbed)
    assert not same_words(scrubbed["argv"], [*running[:3], "--hf-token="], scrubbed)  # a reference is never empty
    assert not same_words(scrubbed["argv"], ["llama-server", "--api-key", KEY_VALUE], scrubbed)
    assert not same_words(scrubbed["argv"], ["other", *running[1:]], scrubbed)
    assert not same_words(["--api-key", "${env:X}"], ["--api-key", "v"], {})  # only a scrubbed snapshot's


def test_only_what_the_daily_carries_is_referred_to_and_only_where_credentials_stand() -> None:
    """The key of ``api_key_env`` that this daily does not carry (it reads a key file) is no reference to put
    back later; and a short credential's text inside a path (the pidfile's) is left as it is."""
    snap = {"runtime": "process", "argv": ["llama-server", "--api-key-file", "/srv/keys/k", "--hf-token", "test"],
            "env": {"PATH": "/usr/bin"}, "pidfile": "/srv/test/daily.pid", "api_key_env": "DAILY_KEY"}
    scrubbed = forget(snap, [KEY_VALUE, "test"], api_key_env="DAILY_KEY", api_key=KEY_VALUE,
                      environ={"DAILY_KEY": KEY_VALUE})
    assert scrubbed[KEY] == {"${removed:1}": None}  # the token only: no ${env:DAILY_KEY} to resolve later
    assert scrubbed["argv"][-1] == "${removed:1}" and scrubbed["pidfile"] == "/srv/test/daily.pid"
