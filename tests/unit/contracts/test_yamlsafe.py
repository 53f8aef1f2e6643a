"""Safe YAML loading: data only, every refusal names the file and line, and every value can be pointed
back at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.yamlsafe import MAX_CONTRACT_BYTES, MAX_DEPTH, LocatedDocument, load_located
from campaign.errors import ContractError, InputError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contract.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> LocatedDocument:
    return load_located(write(tmp_path, text))


def refused(tmp_path: Path, text: str) -> ContractError:
    path = write(tmp_path, text)
    with pytest.raises(ContractError) as info:
        load_located(path)
    assert info.value.file == str(path)
    return info.value


# what loads, and where it came from

CONTRACT = """\
# a comment line
contract: demo
window:
  deadline: 40m
lanes:
  - name: baseline
    args: [-m, x.gguf]
  - name: ngram
    args:
      - --spec-type
      - ngram
"""


def test_loads_plain_data(tmp_path: Path) -> None:
    document = load(tmp_path, CONTRACT)
    assert document.file == str(tmp_path / "contract.yaml")
    assert document.data == {
        "contract": "demo",
        "window": {"deadline": "40m"},
        "lanes": [{"name": "baseline", "args": ["-m", "x.gguf"]},
                  {"name": "ngram", "args": ["--spec-type", "ngram"]}],
    }


@pytest.mark.parametrize(("path", "line"), [
    (("contract",), 2),
    (("window",), 4),  # a block mapping value starts at its first key
    (("window", "deadline"), 4),
    (("lanes", 0, "name"), 6),
    (("lanes", 0, "args"), 7),
    (("lanes", 0, "args", 1), 7),
    (("lanes", 1), 8),
    (("lanes", 1, "args", 0), 10),
    (("lanes", 1, "args", 1), 11),
])
def test_line_for_points_at_each_value(tmp_path: Path, path: tuple[object, ...], line: int) -> None:
    assert load(tmp_path, CONTRACT).line_for(path) == line


def test_line_for_skips_unknown_parts_and_stops_at_the_deepest_known(tmp_path: Path) -> None:
    document = load(tmp_path, CONTRACT)
    # pydantic puts union tags into its locations: skipped, the path goes on below them
    assert document.line_for(("lanes", "function-after[check]", 1, "args", 1)) == 11
    # a field that does not exist (a missing required one) points at its parent
    assert document.line_for(("window", "heartbeat_grace")) == 4
    # an index past the end, or a name where an index belongs, stays on the list
    assert document.line_for(("lanes", 7)) == 6
    assert document.line_for(("lanes", "0", "name")) == 6


def test_line_for_the_root(tmp_path: Path) -> None:
    assert load(tmp_path, CONTRACT).line_for(()) == 2


def test_standard_scalar_types_are_allowed(tmp_path: Path) -> None:
    data = load(tmp_path, "i: 3\nf: 1.5\nn: null\nb: true\ns: '3'\nd: 2024-01-02\n").data
    assert data["i"] == 3 and data["f"] == 1.5 and data["n"] is None and data["b"] is True and data["s"] == "3"
    assert str(data["d"]) == "2024-01-02"


def test_non_string_keys_load_and_are_located(tmp_path: Path) -> None:
    document = load(tmp_path, "a: 0\n1: one\n2.5: x\nfalse: yes\n")
    assert document.data == {"a": 0, 1: "one", 2.5: "x", False: True}
    assert document.line_for((1,)) == 2  # a pydantic location holds the int key itself
    assert document.line_for((2.5,)) == 3


def test_explicit_standard_tags_are_allowed(tmp_path: Path) -> None:
    assert load(tmp_path, "a: !!str 12\nb: !!int '7'\n").data == {"a": "12", "b": 7}


# refused: not a mapping, empty, unreadable, too big


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    error = refused(tmp_path, text)
    assert error.message == "the top level must be a mapping"
    assert error.line == 1


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "\n\n"])
def test_empty_file_refused(tmp_path: Path, text: str) -> None:
    error = refused(tmp_path, text)
    assert error.message == "the file is empty"
    assert error.line == 1


def test_missing_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ContractError) as info:
        load_located(path)
    assert info.value.file == str(path)
    assert info.value.message == "cannot read: No such file or directory"
    assert info.value.line is None
    assert isinstance(info.value, InputError)  # exit code 2: the user fixes it


def test_non_utf8_refused(tmp_path: Path) -> None:
    path = tmp_path / "contract.yaml"
    path.write_bytes(b"contract: caf\xe9\n")
    with pytest.raises(ContractError, match="cannot read as UTF-8 text"):
        load_located(path)


def test_oversized_file_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "contract.yaml"
    # not even YAML: the cap is checked before the text is read
    path.write_bytes(b"\xff" * (MAX_CONTRACT_BYTES + 1))
    with pytest.raises(ContractError) as info:
        load_located(path)
    assert info.value.message == (f"file is {MAX_CONTRACT_BYTES + 1} bytes, over the "
                                  f"{MAX_CONTRACT_BYTES}-byte cap for a contract")
    assert info.value.line == 1


def test_a_second_document_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\n---\nb: 2\n")
    assert error.line == 2
    assert "another document" in error.message


# refused: duplicate keys


def test_duplicate_top_level_key_refused_at_the_second(tmp_path: Path) -> None:
    error = refused(tmp_path, "contract: a\nwindow: {}\ncontract: b\n")
    assert error.message == "duplicate key 'contract'"
    assert error.line == 3


def test_duplicate_nested_key_refused_at_its_line(tmp_path: Path) -> None:
    error = refused(tmp_path, "lanes:\n  - name: a\n    args: []\n    name: b\n")
    assert error.message == "duplicate key 'name'"
    assert error.line == 4


def test_quoted_and_plain_spellings_of_a_key_are_one_key(tmp_path: Path) -> None:
    error = refused(tmp_path, "deadline: 1\n'deadline': 2\n")
    assert error.message == "duplicate key 'deadline'"
    assert error.line == 2


def test_duplicate_key_in_a_flow_mapping(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nenv: {X: 1, X: 2}\n")
    assert error.message == "duplicate key 'X'"
    assert error.line == 2


def test_same_key_in_different_mappings_is_fine(tmp_path: Path) -> None:
    data = load(tmp_path, "a: {name: x}\nb: {name: y}\n").data
    assert data == {"a": {"name": "x"}, "b": {"name": "y"}}


@pytest.mark.parametrize("text", ["1: a\n01: b\n", "env:\n  true: a\n  yes: b\n", "1: a\ntrue: b\n"])
def test_keys_that_construct_equal_are_duplicates(tmp_path: Path, text: str) -> None:
    with pytest.raises(ContractError, match="duplicate key"):
        load(tmp_path, text)


def test_a_collection_as_key_is_refused_with_its_line(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\n? [x, y]\n: 2\n")
    assert error.line == 2
    assert "unhashable key" in error.message


# refused: anchors, aliases, tags


def test_anchor_refused_at_its_line(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nb: &anchor 2\n")
    assert error.message == "YAML anchors and aliases are not allowed in a contract"
    assert error.line == 2


def test_alias_bomb_refused_at_the_first_anchor(tmp_path: Path) -> None:
    lines = ["contract: x", 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    error = refused(tmp_path, "\n".join(lines) + "\n")
    assert error.message == "YAML anchors and aliases are not allowed in a contract"
    assert error.line == 2


def test_anchor_on_a_mapping_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nbase: &b\n  x: 1\n")
    assert error.message == "YAML anchors and aliases are not allowed in a contract"
    assert error.line == 2


def test_merge_key_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "a:\n  <<: {b: 1}\n")
    assert error.message == "YAML tag 'tag:yaml.org,2002:merge' is not allowed in a contract"
    assert error.line == 2


@pytest.mark.parametrize(("text", "tag", "line"), [
    ("a: 1\nb: !!python/object/apply:os.system [echo hi]\n", "tag:yaml.org,2002:python/object/apply:os.system", 2),
    ("a: !custom x\n", "!custom", 1),
    ("a: 1\nb: 2\nc: !!binary aGk=\n", "tag:yaml.org,2002:binary", 3),
    ("a: !!set {x}\n", "tag:yaml.org,2002:set", 1),
    ("a:\n  - 1\n  - !!python/name:os.system ''\n", "tag:yaml.org,2002:python/name:os.system", 3),
])
def test_non_standard_tags_refused(tmp_path: Path, text: str, tag: str, line: int) -> None:
    error = refused(tmp_path, text)
    assert error.message == f"YAML tag {tag!r} is not allowed in a contract"
    assert error.line == line


# refused: nesting past MAX_DEPTH


def test_depth_limit_is_32() -> None:
    assert MAX_DEPTH == 32


def test_nesting_exactly_max_depth_loads(tmp_path: Path) -> None:
    # the top mapping is level 1, then MAX_DEPTH - 1 lists
    depth = MAX_DEPTH - 1
    data = load(tmp_path, "a: " + "[" * depth + "1" + "]" * depth + "\n").data
    value = data["a"]
    for _ in range(depth - 1):
        value = value[0]
    assert value == [1]


def test_one_level_past_max_depth_refused(tmp_path: Path) -> None:
    depth = MAX_DEPTH
    error = refused(tmp_path, "a: 1\nb: " + "[" * depth + "1" + "]" * depth + "\n")
    assert error.message == f"nested more than {MAX_DEPTH} levels deep (a contract needs about 6)"
    assert error.line == 2


def test_hostile_flow_nesting_refused_not_crashed(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert error.message.startswith(f"nested more than {MAX_DEPTH} levels deep")
    assert error.line == 1


def test_block_nesting_refused_at_the_line_that_goes_too_deep(tmp_path: Path) -> None:
    # line n opens the mapping at level n
    text = "a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(40)) + "  " * 41 + "v: 1\n"
    error = refused(tmp_path, text)
    assert error.message.startswith(f"nested more than {MAX_DEPTH} levels deep")
    assert error.line == MAX_DEPTH + 1


def test_unclosed_nesting_reports_depth_before_syntax(tmp_path: Path) -> None:
    # never closed: the depth check fires while parsing, before the parser reaches the end
    error = refused(tmp_path, "a: " + "{b: " * 100 + "\n")
    assert error.message.startswith(f"nested more than {MAX_DEPTH} levels deep")


# syntax errors, located


def test_unclosed_flow_mapping_names_where_it_began(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nb: {c: 1,\nd: 2\n\ne: 3\n")
    assert error.line == 5
    assert error.message == ("YAML: expected ',' or '}', but got ':' near this line: 'e: 3'; "
                             "a flow mapping began at line 2: 'b: {c: 1,'")


def test_unclosed_flow_sequence_names_where_it_began(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nb: [1, 2\nc: 3\n")
    assert error.line == 3
    assert error.message == ("YAML: expected ',' or ']', but got ':' near this line: 'c: 3'; "
                             "a flow sequence began at line 2: 'b: [1, 2'")


def test_bad_indentation_located(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\n  b: 2\n")
    assert error.line == 2
    assert error.message == "YAML: mapping values are not allowed here near this line: 'b: 2'"


def test_unterminated_quote_located(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\nb: 'open\n")
    assert error.line == 3  # the end of the stream, one past the last line
    assert "began at line 2: \"b: 'open\"" in error.message


def test_error_string_has_file_and_line(tmp_path: Path) -> None:
    error = refused(tmp_path, "a: 1\na: 2\n")
    assert str(error) == f"{tmp_path / 'contract.yaml'}:2: duplicate key 'a'"
