"""Command-line arguments as ordered (option, value) pairs: parsed, merged with a lane's changes, rendered
back, and named as axes."""

from __future__ import annotations

import pytest

from campaign.contracts.args import axis_key, merge_args, parse_args, render_args

# parse_args


def test_options_with_values_and_bare_flags_keep_their_order() -> None:
    assert parse_args(["-m", "x.gguf", "--spec-draft-n-max", "4", "--metrics"]) == [
        ("-m", "x.gguf"), ("--spec-draft-n-max", "4"), ("--metrics", None)]


def test_a_flag_followed_by_an_option_has_no_value() -> None:
    assert parse_args(["--metrics", "--port", "8080", "--no-webui"]) == [
        ("--metrics", None), ("--port", "8080"), ("--no-webui", None)]


def test_long_option_with_equals_is_split_at_the_first_equals_only() -> None:
    assert parse_args(["--override-kv=a=b", "--alias=x"]) == [("--override-kv", "a=b"), ("--alias", "x")]


def test_long_option_with_equals_and_empty_value() -> None:
    assert parse_args(["--chat-template=", "--metrics"]) == [("--chat-template", ""), ("--metrics", None)]


def test_equals_form_does_not_swallow_the_next_token() -> None:
    assert parse_args(["--port=8080", "extra"]) == [("--port", "8080"), ("#0", "extra")]


def test_short_options_take_values() -> None:
    assert parse_args(["-c", "4096", "-ngl", "99", "-fa"]) == [("-c", "4096"), ("-ngl", "99"), ("-fa", None)]


def test_repeated_options_are_all_kept_in_order() -> None:
    assert parse_args(["--lora", "a.gguf", "--lora", "b.gguf", "-v", "-v"]) == [
        ("--lora", "a.gguf"), ("--lora", "b.gguf"), ("-v", None), ("-v", None)]


@pytest.mark.parametrize("number", ["-1", "-0.5", "-1e-3", "-42"])
def test_negative_numbers_are_values_not_options(number: str) -> None:
    assert parse_args(["--temp", number, "--seed", "-1"]) == [("--temp", number), ("--seed", "-1")]


def test_a_negative_number_without_leading_zero_is_a_value() -> None:
    assert parse_args(["--temp", "-.5"]) == [("--temp", "-.5")]


def test_a_lone_dash_is_a_value() -> None:
    assert parse_args(["--input", "-"]) == [("--input", "-")]


def test_a_value_that_looks_like_a_flag_needs_the_equals_form() -> None:
    # space-separated, a dash-led value is read as the next option (the documented limit)...
    assert parse_args(["--stop", "-x"]) == [("--stop", None), ("-x", None)]
    # ...the equals form keeps it as the value
    assert parse_args(["--stop=-x"]) == [("--stop", "-x")]
    assert parse_args(["--stop=--"]) == [("--stop", "--")]


def test_leading_positionals_are_numbered_in_place() -> None:
    assert parse_args(["serve", "/models/x", "--port", "8000", "trailing"]) == [
        ("#0", "serve"), ("#1", "/models/x"), ("--port", "8000"), ("#2", "trailing")]


def test_empty_argv() -> None:
    assert parse_args([]) == []
    assert render_args([]) == []


# render_args


def test_render_writes_options_values_and_positionals() -> None:
    assert render_args([("#0", "serve"), ("--port", "8000"), ("--metrics", None), ("-m", "x.gguf")]) == [
        "serve", "--port", "8000", "--metrics", "-m", "x.gguf"]


def test_render_splits_the_equals_form() -> None:
    assert render_args(parse_args(["--alias=x", "--override-kv=a=b"])) == ["--alias", "x", "--override-kv", "a=b"]


def test_render_keeps_an_empty_value_as_its_own_token() -> None:
    assert render_args([("--chat-template", "")]) == ["--chat-template", ""]


@pytest.mark.parametrize("argv", [
    ["-m", "x.gguf", "--spec-draft-n-max", "4", "--metrics"],
    ["serve", "model", "--port", "8000", "--seed", "-1", "-v", "-v"],
    ["--lora", "a", "--lora", "b", "--temp", "-0.5", "--input", "-"],
    ["--chat-template", "", "--no-webui"],
])
def test_render_parse_round_trip(argv: list[str]) -> None:
    pairs = parse_args(argv)
    assert render_args(pairs) == argv
    assert parse_args(render_args(pairs)) == pairs


@pytest.mark.parametrize("pairs", [
    parse_args(["--stop=-x"]),
    merge_args([], {"--stop": "-x"}),
])
def test_render_parse_round_trip_keeps_a_dash_led_value(pairs: list[tuple[str, str | None]]) -> None:
    assert pairs == [("--stop", "-x")]
    assert parse_args(render_args(pairs)) == pairs


# merge_args


BASE = parse_args(["-m", "x.gguf", "--ctx-size", "4096", "--metrics"])


def test_merge_replaces_a_value_in_place() -> None:
    assert merge_args(BASE, {"--ctx-size": "8192"}) == [("-m", "x.gguf"), ("--ctx-size", "8192"), ("--metrics", None)]


def test_merge_appends_a_new_option_at_the_end() -> None:
    assert merge_args(BASE, {"--spec-draft-n-max": 4}) == [*BASE, ("--spec-draft-n-max", "4")]


def test_merge_none_and_false_remove_the_option() -> None:
    assert merge_args(BASE, {"--metrics": None}) == [("-m", "x.gguf"), ("--ctx-size", "4096")]
    assert merge_args(BASE, {"--ctx-size": False}) == [("-m", "x.gguf"), ("--metrics", None)]


def test_merge_removing_an_absent_option_changes_nothing() -> None:
    assert merge_args(BASE, {"--not-there": None}) == BASE


def test_merge_true_makes_a_bare_flag() -> None:
    assert merge_args(BASE, {"--ctx-size": True, "--flash-attn": True}) == [
        ("-m", "x.gguf"), ("--ctx-size", None), ("--metrics", None), ("--flash-attn", None)]


def test_merge_zero_is_a_value_not_a_removal() -> None:
    assert merge_args(BASE, {"--ctx-size": 0}) == [("-m", "x.gguf"), ("--ctx-size", "0"), ("--metrics", None)]


def test_merge_numbers_are_rendered_as_strings() -> None:
    assert merge_args([], {"--temp": 0.25, "--seed": -1}) == [("--temp", "0.25"), ("--seed", "-1")]


def test_merge_collapses_a_repeated_option_into_its_first_place() -> None:
    base = parse_args(["--lora", "a", "--port", "1", "--lora", "b", "--lora", "c"])
    assert merge_args(base, {"--lora": "z"}) == [("--lora", "z"), ("--port", "1")]


def test_merge_removes_every_repeat() -> None:
    base = parse_args(["--lora", "a", "--port", "1", "--lora", "b"])
    assert merge_args(base, {"--lora": None}) == [("--port", "1")]


def test_merge_applies_changes_in_order() -> None:
    assert merge_args([], {"--a": "1", "--b": "2"}) == [("--a", "1"), ("--b", "2")]


def test_merge_does_not_mutate_the_base() -> None:
    base = parse_args(["--port", "1"])
    snapshot = list(base)
    merge_args(base, {"--port": "2", "--metrics": True})
    assert base == snapshot


def test_merge_keeps_positionals() -> None:
    base = parse_args(["serve", "model", "--port", "1"])
    assert merge_args(base, {"--port": None}) == [("#0", "serve"), ("#1", "model")]


@pytest.mark.parametrize("name", ["ctx-size", "#0", "-", "-1", ""])
def test_merge_refuses_a_name_that_is_not_an_option(name: str) -> None:
    with pytest.raises(ValueError, match="is not an option"):
        merge_args(BASE, {name: "1"})


def test_merged_args_render_to_a_command_line() -> None:
    merged = merge_args(parse_args(["-m", "x.gguf", "--ctx-size=4096", "--metrics"]),
                        {"--ctx-size": "8192", "--metrics": None, "--spec-type": "ngram"})
    assert render_args(merged) == ["-m", "x.gguf", "--ctx-size", "8192", "--spec-type", "ngram"]


# axis_key


@pytest.mark.parametrize(("option", "key"), [
    ("--spec-draft-n-max", "args.spec-draft-n-max"),
    ("spec-draft-n-max", "args.spec-draft-n-max"),
    ("-m", "args.m"),
    ("-ngl", "args.ngl"),
])
def test_axis_key(option: str, key: str) -> None:
    assert axis_key(option) == key


def test_axis_key_strips_only_leading_dashes() -> None:
    assert axis_key("--a--b-") == "args.a--b-"
