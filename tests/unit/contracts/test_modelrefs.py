"""${model:ROLE} substitution: a whole value, the value after '--opt=', or a whole string at a key of a JSON
object argument, whose other bytes are kept; fuzzed over JSON documents and paths (quotes, backslashes,
non-ASCII), the substituted argument parses to the document with the path at that key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaign.contracts.modelrefs import model_refs, substitute_arg, substitute_value

FEW = settings(max_examples=200, derandomize=True, database=None, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])

_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
_paths = st.text(min_size=1, max_size=40).filter(lambda p: "${model:" not in p)
_keys = st.text(min_size=1, max_size=8).filter(lambda k: "${model:" not in k)


def test_a_whole_value_and_an_option_value_become_the_path() -> None:
    paths = {"draft": "/campaign/models/draft"}
    assert substitute_arg("${model:draft}", paths) == "/campaign/models/draft"
    assert substitute_arg("--model-draft=${model:draft}", paths) == "--model-draft=/campaign/models/draft"
    assert substitute_arg("--ctx-size", paths) == "--ctx-size"
    assert model_refs("${model:draft}") == [("draft", None)]


def test_the_json_text_is_kept_byte_for_byte_but_the_reference() -> None:
    value = '{ "method" : "eagle3",\n "model":"${model:draft}", "num_speculative_tokens": 3 }'
    assert model_refs(value) == [("draft", "model")]
    assert substitute_value(value, {"draft": '/m/"x"\\y'}) == \
        '{ "method" : "eagle3",\n "model":"/m/\\"x\\"\\\\y", "num_speculative_tokens": 3 }'


@pytest.mark.parametrize("value", ["x${model:draft}", '{"a": "p/${model:draft}"}', '["${model:draft}"]',
                                   '{"a": ["${model:draft}"]}', '{"${model:draft}": 1}', '{"a": 1} ${model:draft}',
                                   '{"a": "\\u0024{model:draft}", "b": "${model:draft}"}'])
def test_a_reference_anywhere_else_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"\$\{model:ROLE\}"):
        model_refs(value)


def _place(document: Any, key_path: list[str], value: Any) -> dict[str, Any]:
    """``document`` as an object with ``value`` at ``key_path`` (objects made on the way)."""
    root: dict[str, Any] = dict(document) if isinstance(document, dict) else {}
    node = root
    for key in key_path[:-1]:
        child = node.get(key)
        node[key] = dict(child) if isinstance(child, dict) else {}
        node = node[key]
    node[key_path[-1]] = value
    return root


@FEW
@given(document=_json, key_path=st.lists(_keys, min_size=1, max_size=3), path=_paths, indent=st.sampled_from([None, 1]),
       ascii_only=st.booleans())
def test_substitution_at_a_json_key_parses_to_the_document_with_the_path(document: Any, key_path: list[str], path: str,
                                                                          indent: int | None, ascii_only: bool) -> None:
    written = _place(document, key_path, "${model:draft}")
    text = json.dumps(written, indent=indent, ensure_ascii=ascii_only)
    assert model_refs(text) == [("draft", ".".join(key_path))]
    assert json.loads(substitute_value(text, {"draft": path})) == _place(document, key_path, path)


@FEW
@given(document=_json)
def test_json_without_a_reference_is_never_touched(document: Any) -> None:
    text = json.dumps(document)
    assert model_refs(text) == [] and substitute_value(text, {"draft": "/x"}) == text
