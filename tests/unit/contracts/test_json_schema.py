"""`campaign schema` (the JSON Schema an editor validates with) agrees with the loader: every contract the tool
takes, the schema takes; every contract the tool refuses for a reason a JSON Schema can state (an unknown
field, a wrong type, a value out of an enum, a pattern or a numeric bound, a missing field), the schema
refuses. Checked with a standard validator (jsonschema's Draft 2020-12) on the examples, the old bundles'
contracts, the shared builders' contracts and every contract the contract tests load.

What a JSON Schema cannot state, and so only the loader refuses (the schema takes them): cross-field rules
(a candidate's control must exist, its axis must be what differs, gate ids unique, an input a gate names
must be declared, promotion.requires names gates), the bounds of a duration or size written as text ("0s",
"200h", "99t"), a count rule's k <= n, a regex that does not compile, referenced files (present, pinned
digest), literal secrets, and replaced or removed fields' own messages (the schema refuses them as unknown)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from campaign.contracts.schema import Contract
from tests.support.contracts import (
    EXAMPLES,
    MODEL,
    MODEL_SHA256,
    REPO,
    candidate,
    contract_yaml,
    control,
    demo_like,
    process_defaults,
)
from tests.support.schemacorpus import RECORD_DIR, session_corpus

# pydantic error types a JSON Schema states as well; any other (value_error: a validator's own rule) it cannot
STRUCTURAL = {"extra_forbidden", "missing", "literal_error", "string_pattern_mismatch", "string_type", "int_type",
              "float_type", "bool_type", "dict_type", "list_type", "model_type", "model_attributes_type",
              "union_tag_invalid", "union_tag_not_found", "greater_than", "greater_than_equal", "less_than",
              "less_than_equal", "too_short", "too_long", "int_parsing", "float_parsing", "boolean_number",
              "int_from_float", "string_too_short", "string_too_long"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "schema"], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def tool_errors(document: Any) -> list[dict[str, Any]]:
    """The loader's schema step (Contract.model_validate, as for a contract to run): its errors, [] if taken."""
    try:
        Contract.model_validate(document)
    except ValidationError as exc:
        return list(exc.errors())
    return []


def disagreement(validator: jsonschema.Draft202012Validator, document: Any) -> str | None:
    errors = tool_errors(document)
    schema_errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if not errors and schema_errors:
        first = schema_errors[0]
        return f"the tool takes it, the schema refuses {list(first.absolute_path)}: {first.message[:200]}"
    if errors and not schema_errors and all(error["type"] in STRUCTURAL for error in errors):
        return f"the tool refuses it ({errors[0]['type']} at {errors[0]['loc']}), the schema takes it"
    return None


def _examples() -> dict[str, Any]:
    found = {}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        text = path.read_text()
        # the GPU examples are templates scripts/gpu/on-device.sh fills in (sed) before they are run
        text = text.replace("@SERVER@", "llama-server").replace("@MODEL@", str(MODEL))
        found[str(path.relative_to(REPO))] = yaml.safe_load(text.replace("@MODEL_SHA256@", MODEL_SHA256))
    for path in sorted((REPO / "tests" / "fixtures").rglob("*.yaml")):
        found[str(path.relative_to(REPO))] = yaml.safe_load(path.read_text())
    return found


def test_every_example_contract_is_valid_for_the_schema_and_the_tool(validator) -> None:  # noqa: ANN001
    examples = _examples()
    assert len([name for name in examples if name.startswith("examples/")]) >= 5
    for name, document in examples.items():
        assert disagreement(validator, document) is None, name
        if name.startswith("examples/"):  # a shipped example is a contract to run: both take it
            assert not tool_errors(document) and validator.is_valid(document), name


def test_the_shared_builders_contracts_agree(validator) -> None:  # noqa: ANN001
    built = [demo_like(8080), demo_like(8080, budget="2m", rule='">= 2/3"', extra_candidate=", --threads: 2")]
    built.append(contract_yaml(
        "b", defaults=process_defaults(8080, args=["--threads", "2"], env={"HOOK": "1"}, shm_size="1g"),
        lanes=[control(), candidate("c", ["args.threads"], args={"--threads": 4})],
        inputs={"p": {"file": "p.jsonl"}},
        gates=[{"kind": "greedy", "input": "p", "max_tokens": 8, "rule": {"self_identical": "2/2"}}],
        requires=["greedy"], failsafe={"deadline": "10m", "heartbeat_grace": 30},
        incumbent={"runtime": "docker", "endpoint": "http://127.0.0.1:8080", "container": "daily",
                   "docker_host": "unix:///x.sock"}))
    for text in built:
        document = yaml.safe_load(text)
        assert not tool_errors(document), tool_errors(document)
        assert disagreement(validator, document) is None


@pytest.mark.after_unit  # `make test` runs it after the workers, on what they recorded
def test_every_contract_the_contract_tests_load_agrees(validator, tmp_path: Path) -> None:  # noqa: ANN001
    """Each document the contract tests load, valid or not, is judged by the tool and the schema, and they must
    agree wherever the schema can state the rule: the documents this session's run of them kept, or those the
    workers of `make test`'s first run recorded, or, when neither ran them all, those of a run in a subprocess
    with the recorder (tests/support/schemacorpus)."""
    documents = session_corpus()
    if documents is None:
        corpus = tmp_path / "corpus.jsonl"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__).parent),
                        f"--ignore={__file__}"],
                       capture_output=True, text=True, timeout=600, cwd=REPO,
                       env={**{k: v for k, v in os.environ.items() if k != RECORD_DIR},
                            "CAMPAIGN_SCHEMA_CORPUS": str(corpus), "PYTHONPATH": str(REPO)})
        documents = [json.loads(line) for line in corpus.read_text().splitlines()]
    taken = [d for d in documents if not tool_errors(d)]
    refused = [d for d in documents if tool_errors(d)]
    assert len(taken) > 50 and len(refused) > 30, (len(taken), len(refused))
    found = [(index, problem) for index, document in enumerate(documents)
             if (problem := disagreement(validator, document)) is not None]
    assert not found, found[:5]


@pytest.mark.parametrize("change,where", [
    ({"lane_defaults": {"runtime": "podman"}}, ["lane_defaults", "runtime"]),  # an enum
    ({"lane_defaults": {"readiness": {"budget": "30 minutes"}}}, ["lane_defaults", "readiness", "budget"]),
    ({"lane_defaults": {"readiness": {"budget": 0}}}, ["lane_defaults", "readiness", "budget"]),
    ({"lane_defaults": {"readiness": {"budget": True}}}, ["lane_defaults", "readiness", "budget"]),
    ({"lane_defaults": {"shm_size": "64q"}}, ["lane_defaults", "shm_size"]),
    ({"lane_defaults": {"port": 70000}}, ["lane_defaults", "port"]),
    ({"lane_defaults": {"max_tokenz": 3}}, ["lane_defaults"]),  # an unknown field
    ({"lane_defaults": {"docker_host": "http://box"}}, ["lane_defaults", "docker_host"]),
    ({"failsafe": {"deadline": "10m", "heartbeat_grace": "1y"}}, ["failsafe", "heartbeat_grace"]),
])
def test_what_both_refuse(validator, change: dict[str, Any], where: list[str]) -> None:  # noqa: ANN001
    document = yaml.safe_load(demo_like(8080))
    for key, value in change.items():
        document[key] = {**document.get(key, {}), **value}
    assert tool_errors(document), change
    errors = list(validator.iter_errors(document))
    assert errors and any(list(e.absolute_path)[:len(where)] == where or list(e.absolute_path) == where[:-1]
                          for e in errors), [(list(e.absolute_path), e.message[:80]) for e in errors]


def test_what_only_the_tool_refuses_is_what_the_module_says() -> None:
    """A text duration past its bound: the schema's pattern takes it (a JSON Schema cannot bound a number in text)."""
    document = yaml.safe_load(demo_like(8080, budget="200h"))
    assert tool_errors(document) and tool_errors(document)[0]["type"] == "value_error"
