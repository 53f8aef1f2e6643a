"""The credential rule (campaign.contracts.secretrefs), class by class, on generated values: (a) a name that
says credential takes only a reference; (b) a credential shape is refused anywhere; (c) a long random-looking
value is refused anywhere; and ``${env:NAME}`` always passes. Each refusal names file, line and field.

Values and names are generated (hypothesis, derandomized, a fixed budget), never fixed strings: the rule is
judged by classes, not by the examples that were reported.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaign.contracts.load import load_contract
from campaign.contracts.secretrefs import is_secret_name, looks_like_token, opaque
from campaign.errors import ContractError
from campaign.lanes.redact import MARK, RedactingLog, Redactor
from tests.support.secretshapes import (
    ABOUT,
    NEUTRAL,
    SECRET,
    SHAPES,
    camel,
    env_name,
    free_literal,
    literal,
    option,
    secret_words,
    words,
)

SETTINGS = settings(max_examples=30, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

TEMPLATE = """\
contract: h
version: 1
description: {description}
lane_defaults:
  runtime: process
  engine: llamacpp
  executable: llama-server
  port: 18999
  model: {{path: {model}}}
  env: {env}
  args: {args}
request_defaults: {request_defaults}
lanes:
  - {{name: base, role: control}}
"""
LINE = {"description": 3, "lane_defaults.model.path": 9, "lane_defaults.env": 10, "lane_defaults.args": 11,
        "request_defaults": 12}


def contract(tmp_path: Path, *, description: str = "plain", model: str = "/m.gguf", env: dict | None = None,
             args: list | None = None, request_defaults: dict | None = None, comment: str = "") -> Path:
    path = tmp_path / "c.yaml"
    text = TEMPLATE.format(description=json.dumps(description), model=json.dumps(model), env=json.dumps(env or {}),
                           args=json.dumps(args or []), request_defaults=json.dumps(request_defaults or {}))
    path.write_text(text + comment)
    return path


def refused(path: Path, field: str, line: int) -> ContractError:
    with pytest.raises(ContractError) as info:
        load_contract(path)
    error = info.value
    assert (error.file, error.line) == (str(path), line), str(error)
    assert error.field is not None and error.field.startswith(field), str(error)
    assert "${env:NAME}" in str(error)
    return error


# --- (a) names ------------------------------------------------------------------------------------------------

@SETTINGS
@given(parts=secret_words(), value=literal)
def test_a_credential_named_variable_takes_only_a_reference(tmp_path: Path, parts: list[str], value: str) -> None:
    name = env_name(parts)
    refused(contract(tmp_path, env={name: value}), f"lane_defaults.env.{name}", LINE["lane_defaults.env"])
    load_contract(contract(tmp_path, env={name: "${env:RUNNER_" + name + "}"}))


@SETTINGS
@given(parts=secret_words(), value=literal, form=st.sampled_from(["pair", "equals", "one word"]))
def test_a_credential_option_takes_only_a_reference(tmp_path: Path, parts: list[str], value: str, form: str) -> None:
    flag = option(parts)
    args = {"pair": [flag, value], "equals": [f"{flag}={value}"], "one word": [f"{flag} {value}"]}[form]
    refused(contract(tmp_path, args=args), "lane_defaults.args", LINE["lane_defaults.args"])
    load_contract(contract(tmp_path, args=[flag, "${env:SERVE_KEY}"]))


@SETTINGS
@given(parts=secret_words(), value=st.one_of(literal, st.integers(0, 10 ** 9)),
       style=st.sampled_from(["snake", "camel", "header"]), nested=st.booleans())
def test_a_credential_named_key_anywhere_takes_only_a_reference(tmp_path: Path, parts: list[str], value: object,
                                                                style: str, nested: bool) -> None:
    key = {"snake": "_".join(parts), "camel": camel(parts), "header": "-".join(p.capitalize() for p in parts)}[style]
    defaults = {"headers": {key: value}} if nested else {key: value}
    refused(contract(tmp_path, request_defaults=defaults), "request_defaults", LINE["request_defaults"])
    reference = {"headers": {key: "Bearer ${env:UPSTREAM}"}} if nested else {key: "${env:UPSTREAM}"}
    load_contract(contract(tmp_path, request_defaults=reference))


@SETTINGS
@given(before=words, secret=st.sampled_from(SECRET), about=st.sampled_from(ABOUT),
       value=st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=12))
def test_a_name_about_a_credential_is_not_one(tmp_path: Path, before: list[str], secret: str, about: str,
                                              value: str) -> None:
    """``--api-key-file``, ``API_KEY_ENV``, ``--session-len``, ``TOKEN_TTL``: the last word says what the value is."""
    parts = [*before, secret, about]
    assert not is_secret_name(option(parts)) and not is_secret_name(env_name(parts))
    load_contract(contract(tmp_path, env={env_name(parts): value}, args=[option(parts), value]))


@SETTINGS
@given(before=words, word=st.sampled_from(["tokens", "tokenizer", "tokenizers", "keep", "keyfile", "passes",
                                           "author", "sessions"]),
       after=st.lists(st.sampled_from(["parallelism", "mode", "revision", "count", "alive"]), max_size=1))
def test_words_that_only_contain_a_secret_word_are_not_credential_names(before: list[str], word: str,
                                                                        after: list[str]) -> None:
    parts = [*before, word, *after]
    assert not is_secret_name(option(parts)) and not is_secret_name(env_name(parts))
    assert not is_secret_name("_".join(parts)) and not is_secret_name(camel(parts))


# --- (b) and (c) shapes anywhere ------------------------------------------------------------------------------

@SETTINGS
@given(value=SHAPES, place=st.sampled_from(["description", "env", "args", "request_defaults", "model"]))
def test_a_credential_shape_is_refused_wherever_it_is(tmp_path: Path, value: str, place: str) -> None:
    neutral = env_name(["model", "note"])
    path = {"description": lambda: contract(tmp_path, description=f"see {value} for details"),
            "env": lambda: contract(tmp_path, env={neutral: value}),
            "args": lambda: contract(tmp_path, args=["--alias", value]),
            "request_defaults": lambda: contract(tmp_path, request_defaults={"extra_body": {"note": value}}),
            "model": lambda: contract(tmp_path, model=f"/models/{value}/m.gguf")}[place]()
    field = {"description": "description", "env": f"lane_defaults.env.{neutral}", "args": "lane_defaults.args",
             "request_defaults": "request_defaults.extra_body.note", "model": "lane_defaults.model.path"}[place]
    line = LINE.get(field, LINE.get(field.rsplit(".", 1)[0], LINE["request_defaults"]))
    refused(path, field, line)


def test_the_opaque_test_catches_random_keys_and_spares_names_paths_and_digests() -> None:
    """Class (c) by rate, on values drawn with a fixed seed: random 40-character base64 (an AWS secret access
    key) and 32-character letters-and-digits keys are caught; generated model ids, paths and hex digests are
    not."""
    rng = random.Random(30)
    aws = [base64.b64encode(rng.randbytes(30)).decode() for _ in range(500)]
    alnum = ["".join(rng.choice(string.ascii_letters + string.digits) for _ in range(32)) for _ in range(500)]
    assert sum(map(looks_like_token, aws)) >= 0.97 * len(aws)
    assert sum(map(looks_like_token, alnum)) >= 0.99 * len(alnum)
    orgs = ["meta-llama", "Qwen", "mistralai", "HuggingFaceTB", "deepseek-ai", "unsloth", "bartowski", "nvidia"]
    names = ["Llama", "Qwen", "Mistral", "SmolLM", "DeepSeek", "Phi", "Gemma", "Mixtral", "CodeLlama", "Hermes"]
    tails = ["Instruct", "Chat", "Base", "Coder", "Distill", "GGUF", "AWQ", "GPTQ", "FP8", "Q4_K_M", "Q8_0", "IQ4_XS"]
    for _ in range(500):
        model_id = (f"{rng.choice(orgs)}/{rng.choice(names)}{rng.randint(1, 4)}.{rng.randint(0, 9)}-"
                    f"{rng.choice([1, 3, 7, 8, 14, 32, 70, 135])}{rng.choice('BM')}-"
                    + "-".join(rng.sample(tails, rng.randint(1, 3))))
        digest = "".join(rng.choice("0123456789abcdef") for _ in range(64))
        path = f"/models/{model_id}/snapshots/{digest[:40]}/model-0000{rng.randint(1, 9)}-of-00009.safetensors"
        for value in (model_id, path, f"sha256:{digest}", f"{rng.choice(orgs)}/x@sha256:{digest}"):
            assert not looks_like_token(value), value


@SETTINGS
@given(value=st.one_of(SHAPES, st.builds(lambda n, v: f"{n}: {v}", st.builds(env_name, secret_words()), free_literal)),
       blank=st.integers(0, 3))
def test_a_credential_in_a_comment_is_refused_with_its_line(tmp_path: Path, value: str, blank: int) -> None:
    """The contract file's bytes are copied into every bundle: a comment is scanned like a value."""
    comment = "\n" * blank + "# " + value.replace("\n", "\n# ") + "\n"
    path = contract(tmp_path, comment=comment)
    with pytest.raises(ContractError) as info:
        load_contract(path)
    first_line = TEMPLATE.count("\n") + blank + 1
    assert info.value.field == "comment" and info.value.file == str(path), str(info.value)
    assert first_line <= (info.value.line or 0) <= first_line + value.count("\n"), str(info.value)


@SETTINGS
@given(name=st.builds(env_name, secret_words()), value=st.text(string.ascii_lowercase, min_size=1, max_size=12))
def test_a_hash_inside_a_string_is_not_a_comment(tmp_path: Path, name: str, value: str) -> None:
    """Prose may say "# KEY: x" inside a quoted description or a block scalar: that is a value (checked as
    one: no shape), not a comment; the same words after the value, outside the quotes, are a comment."""
    load_contract(contract(tmp_path, description=f"see # {name}: {value} here"))
    text = contract(tmp_path).read_text()
    (tmp_path / "c.yaml").write_text(text.replace('description: "plain"', f"description: |\n  # {name}: {value}"))
    load_contract(tmp_path / "c.yaml")
    text = text.replace('description: "plain"', f'description: "a # b" # {name}: {value}')
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "c.yaml")
    assert (info.value.line, info.value.field) == (3, "comment")


def test_references_and_harmless_values_load(tmp_path: Path) -> None:
    """The one way to pass a secret, in every place: references, a scheme word before one, a login name on
    ssh, a path where a key file goes, a flag word on a credential-named switch."""
    load_contract(contract(tmp_path, env={"HF_TOKEN": "${env:HF_TOKEN}", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
                                          "DB_PASS": "${env:DB_PASS}", "TOKENIZERS_PARALLELISM": "false"},
                           args=["--api-key", "${env:K}", "--api-key-file", "/run/secrets/k", "--ssl-key-file",
                                 "certs/key.pem", "--session-len", "4096", "--tokenizer", "org/tok"],
                           request_defaults={"authorization": "Bearer ${env:UPSTREAM}", "max_tokens": 16,
                                             "eos_token_id": 2, "stop": ["</s>"]},
                           description="ssh://ubuntu@gpu-box holds the daily; a basic test; see the key file."))


# --- the redactor cuts the same shapes ------------------------------------------------------------------------

@SETTINGS
@given(value=SHAPES, before=st.sampled_from(["", "loaded ", "url=", "Authorization: ", "x "]))
def test_the_redactor_cuts_every_shape_from_a_log(tmp_path: Path, value: str, before: str) -> None:
    redactor = Redactor(key=b"k" * 32)
    log_path = tmp_path / "boot.log"
    log_path.unlink(missing_ok=True)
    log = RedactingLog(log_path, redactor)
    for line in f"start\n{before}{value} end\nafter\n".encode().splitlines(keepends=True):
        log.write(line)
    log.close()
    written = log_path.read_text()
    assert MARK in written and written.startswith("start\n") and written.endswith("after\n"), written
    assert not looks_like_token(written.replace(MARK, "\n")), written  # nothing left but the marks
    if "://" in value:
        userinfo = value.split("://", 1)[1].rsplit("@", 1)[0]
        assert f"://{userinfo}@" not in written, written  # the user info is cut (with all the rest, after a name)
    else:
        secret = value.split(" ", 1)[-1]
        assert len(secret) < 4 or secret not in written, written
    assert log_path.stat().st_mode & 0o777 == 0o600


@SETTINGS
@given(parts=secret_words(), value=free_literal,
       form=st.sampled_from(["{n}={v}", '"{n}": "{v}"', "'{n}': '{v}'", "{n}: {v}", "--{n} {v}"]))
def test_the_redactor_cuts_the_value_of_a_credential_name_in_free_text(parts: list[str], value: str, form: str) -> None:
    name = env_name(parts) if "=" in form else "-".join(parts) if form.startswith("--") else "_".join(parts)
    line = "launch " + form.format(n=name, v=value) + " done"
    cut = Redactor(key=b"k" * 32).text(line)
    assert MARK in cut and cut.startswith("launch ") and cut.endswith(" done"), (line, cut)
    assert f"{name}" in cut


def test_an_opaque_word_is_judged_whole() -> None:
    assert opaque("wJ4lrXUtnFEMI7K7MDENGbPxRfiCYzz9kQ2r8sLm")
    assert not opaque("speculativeDecodingEnabledForTheDailyLane")


# --- by place, whatever the alphabet (issue #50) ---------------------------------------------------------------

GLUED = ["API", "HF", "DB", "MYSQL", "PG", "REDIS", "SMTP", "ADMIN", "OAUTH", "SERVICE"]
GLUED_ENDS = ["TOKEN", "PASSWORD", "PASSWD", "PWD", "SECRET", "APIKEY", "ACCESSKEY", "CREDENTIALS"]
ALPHABETS = {"hex": "0123456789abcdef", "HEX": "0123456789ABCDEF", "base64": string.ascii_letters + string.digits + "+/",
             "digits and letters": string.ascii_lowercase + string.digits}


@st.composite
def credential_names(draw: st.DrawFn) -> str:
    """Credential names as people write them: words joined by _ or glued (APITOKEN), abbreviated (PWD, PAT,
    DSN) or spelt out, after a provider's word."""
    glued = draw(st.booleans())
    if glued:
        return draw(st.sampled_from(GLUED)) + draw(st.sampled_from(GLUED_ENDS))
    return "_".join([*draw(st.lists(st.sampled_from([w.upper() for w in NEUTRAL]), min_size=1, max_size=2)),
                     draw(st.sampled_from(["TOKEN", "PAT", "DSN", "PASSWORD", "KEY", "SECRET", "PWD"]))])


@st.composite
def credential_values(draw: st.DrawFn) -> str:
    """A credential in any alphabet, hex included, sometimes starting as a path would ('/', '~', './')."""
    alphabet = ALPHABETS[draw(st.sampled_from(sorted(ALPHABETS)))]
    body = "".join(draw(st.lists(st.sampled_from(alphabet), min_size=32, max_size=48)))
    if not any(c.isdigit() for c in body) or not any(c.isalpha() for c in body):
        body = "7f" + body
    return draw(st.sampled_from(["", "/", "~", "./"])) + body


@SETTINGS
@given(name=credential_names(), value=credential_values())
def test_a_value_under_a_credential_name_is_a_secret_whatever_its_alphabet(tmp_path: Path, name: str,
                                                                           value: str) -> None:
    assert is_secret_name(name), name
    refused(contract(tmp_path, env={name: value}), f"lane_defaults.env.{name}", LINE["lane_defaults.env"])
    refused(contract(tmp_path, args=[f"--{name.lower().replace('_', '-')}", value]), "lane_defaults.args",
            LINE["lane_defaults.args"])


@SETTINGS
@given(value=credential_values().filter(lambda v: not v.startswith(("/", "~", "."))),
       param=st.sampled_from(["api_key", "token", "access_token", "apikey", "key", "sig", "password"]))
def test_a_hex_token_is_refused_where_no_digest_is_expected_and_a_digest_is_taken_where_one_is(
        tmp_path: Path, value: str, param: str) -> None:
    hexed = "".join(random.Random(value).choice("0123456789abcdef") for _ in range(40)) + "7f"
    refused(contract(tmp_path, description=f"served since {hexed}"), "description", LINE["description"])
    url = f"https://hub.example/v1?page=2&{param}={value}"
    if param != "sig":  # a signature parameter is not a credential name
        refused(contract(tmp_path, request_defaults={"base": url}), "request_defaults", LINE["request_defaults"])
    load_contract(contract(tmp_path, description=f"image sha256:{hexed}",
                           args=["--revision", hexed, "--model", f"/hf/snapshots/{hexed}/m.gguf"]))


@SETTINGS
@given(token=st.sampled_from(["sk_live_", "rk_live_", "dapi", "shpat_", "key-"]),
       body=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
       random_name=st.text(alphabet=string.ascii_letters + string.digits, min_size=32, max_size=40))
def test_a_name_like_place_refuses_a_token_and_takes_a_model_id(tmp_path: Path, token: str, body: str,
                                                                random_name: str) -> None:
    """served_name and a file name skip the opacity test of free text (a model id changes case as often as a
    key), not the token shapes, nor one long run with no separator that reads as a random key."""
    def served(name: str) -> Path:
        path = contract(tmp_path)
        path.write_text(path.read_text().replace("model: {path: \"/m.gguf\"}",
                                                 f"model: {{path: \"/m.gguf\", served_name: {json.dumps(name)}}}"))
        return path

    refused(served(token + body), "lane_defaults.model.served_name", LINE["lane_defaults.model.path"])
    if opaque(random_name):
        refused(served(random_name), "lane_defaults.model.served_name", LINE["lane_defaults.model.path"])
    for model_id in ("OpenGVLab/InternVL3-8B", "Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4", "SmolLM2-135M-Instruct"):
        load_contract(served(model_id))


@SETTINGS
@given(name=credential_names(), value=credential_values())
def test_a_freeze_record_never_holds_a_credential_of_any_shape(tmp_path: Path, name: str, value: str) -> None:
    """Grepped: a credential of every class reaches the record only as its ``${env:NAME}`` reference (the
    record is signed and travels in every bundle); written literally, it is refused and no record is written."""
    import os

    from campaign.contracts.freeze import freeze
    from campaign.signing import init_keys, load_signing_key

    init_keys()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    os.environ["CAMPAIGN_TEST_CREDENTIAL"] = value
    try:
        ref = "${env:CAMPAIGN_TEST_CREDENTIAL}"
        path = contract(tmp_path, model=str(model), env={name: ref}, args=["--api-key", ref],
                        request_defaults={"base": f"https://hub.example/v1?api_key={ref}"})
        record, _ = freeze(load_contract(path), load_signing_key(), tmp_path / f"{name}.freeze.json")
        text = record.read_text()
        assert value not in text and value.lstrip("/~.") not in text and ref in text
        literal = contract(tmp_path, model=str(model), env={name: value})
        with pytest.raises(ContractError):
            freeze(load_contract(literal), load_signing_key(), tmp_path / "literal.freeze.json")
        assert not (tmp_path / "literal.freeze.json").exists()
    finally:
        del os.environ["CAMPAIGN_TEST_CREDENTIAL"]
