"""Every model a lane reads is pinned (issue #33): `models:` by role, a file by sha256 or a directory by its
manifest; ${model:ROLE} in args and env; draft-model flags refused unless they name a pinned model;
hashed at freeze and again at run; a drafter an axis of one digest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from campaign.contracts.freeze import check_frozen, freeze
from campaign.contracts.load import load_contract
from campaign.contracts.manifest import render_manifest
from campaign.contracts.resolve import axis_difference
from campaign.errors import AxisError, ContractError, FrozenChanged
from campaign.lanes.session import resolve_refs
from campaign.signing import init_keys, load_signing_key, load_trusted
from tests.support.cli import campaign
from tests.support.contracts import EXAMPLES, MODEL, MODEL_SHA256, write_contract


def _draft_dir(directory: Path, name: str, payload: bytes) -> str:
    """A directory model with two files and its manifest beside it; returns the manifest's sha256."""
    root = directory / name
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_bytes(b'{"arch": "eagle3"}\n')
    (root / "sub" / "weights.bin").write_bytes(payload)
    listing = {"config.json": hashlib.sha256(b'{"arch": "eagle3"}\n').hexdigest(),
               "sub/weights.bin": hashlib.sha256(payload).hexdigest()}
    text = render_manifest(listing).encode()
    (directory / f"{name}.sha256").write_bytes(text)
    return hashlib.sha256(text).hexdigest()


def _contract(directory: Path, *, engine: str = "llamacpp", runtime: str = "process", axis: str = "[models.draft]",
              defaults_models: str = "", candidate_set: str = "", control_args: str = "",
              defaults_args: str = '[--ctx-size, "512"]') -> Path:
    image = "" if runtime == "process" else f"\n          image: img@sha256:{'0' * 64}\n          mounts: " \
        f"[{{host: {MODEL.parent}, container: /m}}]"
    # the served model in the form the engine serves: llama.cpp's GGUF, a folder for vLLM and SGLang
    served = f"{{path: {MODEL}, sha256: {MODEL_SHA256}}}" if engine == "llamacpp" else \
        f"{{path: served, sha256_manifest: served.sha256, sha256: {_draft_dir(directory, 'served', b'w')}}}"
    return write_contract(directory, f"""\
        contract: t-models
        version: 1
        lane_defaults:
          runtime: {runtime}
          engine: {engine}
          executable: {"srv" if runtime == "process" else "/app/srv"}{image}
          port: 18001
          model: {served}
          args: {defaults_args}{defaults_models}
        lanes:
          - name: base
            role: control{control_args}
          - name: cand
            role: candidate
            axis: {axis}
            set:
{candidate_set}
        """)


def _file_draft(directory: Path, name: str = "draft.gguf", data: bytes = b"draft-a") -> str:
    (directory / name).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_a_drafter_change_is_an_axis_of_one_digest(tmp_path: Path) -> None:
    """Drafter A against drafter B, the same flag in both lanes: the one axis is models.draft, by digest."""
    a, b = _file_draft(tmp_path, "a.gguf", b"A"), _file_draft(tmp_path, "b.gguf", b"B")
    loaded = load_contract(_contract(
        tmp_path, defaults_args='[--ctx-size, "512", --model-draft, "${model:draft}"]',
        defaults_models=f"\n          models: {{draft: {{path: a.gguf, sha256: {a}}}}}",
        candidate_set=f"              models: {{draft: {{path: b.gguf, sha256: {b}}}}}"))
    difference = axis_difference(loaded.lanes["base"], loaded.lanes["cand"])
    assert difference == {"models.draft": (f"sha256:{a}", f"sha256:{b}")}
    assert resolve_refs(loaded.lanes["cand"]).args[-2:] == ["--model-draft", str(tmp_path / "b.gguf")]


def test_adding_a_drafter_is_its_one_axis_with_the_flag_that_hands_it_over(tmp_path: Path) -> None:
    digest = _draft_dir(tmp_path, "eagle", b"weights")
    loaded = load_contract(_contract(
        tmp_path, engine="vllm",
        candidate_set=f"""              models: {{draft: {{path: eagle, sha256_manifest: eagle.sha256, sha256: {digest}}}}}
              args: {{--speculative-config: '{{"method":"eagle3","model":"${{model:draft}}","num_speculative_tokens":3}}'}}"""))
    cand = loaded.lanes["cand"]
    assert cand.models["draft"].is_directory and cand.models["draft"].sha256 == digest
    launched = resolve_refs(cand).args[-1]
    assert json.loads(launched) == {"method": "eagle3", "model": str(tmp_path / "eagle"), "num_speculative_tokens": 3}


def test_a_second_change_beside_an_added_drafter_is_still_an_axis_error(tmp_path: Path) -> None:
    digest = _file_draft(tmp_path)
    with pytest.raises(AxisError, match=r"changed but not declared: args\.ctx-size"):
        load_contract(_contract(tmp_path, candidate_set=f"""\
              models: {{draft: {{path: draft.gguf, sha256: {digest}}}}}
              args: {{--model-draft: "${{model:draft}}", --ctx-size: "1024"}}"""))


def test_a_changed_flag_beside_a_changed_drafter_is_not_implied(tmp_path: Path) -> None:
    """Both lanes have the drafter: its flag's other settings changing is a second axis."""
    a, b = _file_draft(tmp_path, "a.gguf", b"A"), _file_draft(tmp_path, "b.gguf", b"B")
    with pytest.raises(AxisError, match=r"changed but not declared: args\.speculative-config"):
        load_contract(_contract(
            tmp_path, engine="vllm",
            defaults_args="""[--speculative-config, '{"model":"${model:draft}","num_speculative_tokens":3}']""",
            defaults_models=f"\n          models: {{draft: {{path: a.gguf, sha256: {a}}}}}",
            candidate_set=f"""              models: {{draft: {{path: b.gguf, sha256: {b}}}}}
              args: {{--speculative-config: '{{"model":"${{model:draft}}","num_speculative_tokens":5}}'}}"""))


@pytest.mark.parametrize(("engine", "flag", "value"), [
    ("llamacpp", "--model-draft", "/srv/d.gguf"),
    ("llamacpp", "-md", "/srv/d.gguf"),
    ("llamacpp", "--spec-draft-model", "/srv/d.gguf"),
    ("llamacpp", "--hf-repo-draft", "org/drafter"),
    ("vllm", "--speculative-config", '{"method":"eagle3","model":"/models/EAGLE3","num_speculative_tokens":3}'),
    ("vllm", "--speculative_config", '{"model":"org/drafter"}'),
    ("vllm", "--spec-model", "/models/EAGLE3"),
    ("vllm", "--speculative-config.model", "/models/EAGLE3"),
    ("sglang", "--speculative-draft-model-path", "/models/EAGLE3"),
])
def test_a_draft_model_that_is_not_pinned_is_refused_at_its_line(tmp_path: Path, engine: str, flag: str,
                                                                 value: str) -> None:
    path = _contract(tmp_path, engine=engine, axis="[args.x]",
                     candidate_set=f"              args: {{{flag}: '{value}', --x: '1'}}")
    with pytest.raises(ContractError, match=r"draft model|fetches a draft model") as caught:
        load_contract(path)
    error = caught.value
    assert error.field == f"lanes[1].set.args.{flag}" and error.line == 17 and error.file == str(path)
    assert "\n" not in str(error) and error.exit_code == 2


def test_a_speculative_config_without_a_model_needs_no_pin(tmp_path: Path) -> None:
    loaded = load_contract(_contract(tmp_path, engine="vllm", axis="[args.speculative-config]", candidate_set=(
        """              args: {--speculative-config: '{"method":"ngram","num_speculative_tokens":3}'}""")))
    assert loaded.lanes["cand"].models == {}


def test_a_draft_flag_in_lane_defaults_is_located_there(tmp_path: Path) -> None:
    path = _contract(tmp_path, defaults_args='[--ctx-size, "512", -md, /srv/x.gguf]', axis="[args.x]",
                     candidate_set="              args: {--x: '1'}")
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert caught.value.field == "lane_defaults.args[2]" and caught.value.line == 9


def test_a_draft_env_variable_must_name_a_pinned_model(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"LLAMA_ARG_SPEC_DRAFT_MODEL '/x.gguf' is a draft model"):
        load_contract(_contract(tmp_path, axis="[env.LLAMA_ARG_SPEC_DRAFT_MODEL]",
                                candidate_set="              env: {LLAMA_ARG_SPEC_DRAFT_MODEL: /x.gguf}"))


@pytest.mark.parametrize(("value", "message"), [
    ("${model:drafter}", r"\$\{model:drafter\} names no model of lane 'cand' \(its models: draft\)"),
    ("${model:served}", r"the served model is the lane's `model:`"),
    ("${model:draft}.gguf", r"must be a whole value"),
    ('{"model":"x/${model:draft}"}', r"must be the whole string"),
    ('{"${model:draft}":"x"}', r"JSON key"),
    ('{"m":["${model:draft}"]}', r"JSON list"),
    ('{"model":"\\u0024{model:draft}","x":"${model:draft}"}', r"no escapes|must be the whole"),
])
def test_a_model_reference_stands_only_where_it_names_a_pinned_model(tmp_path: Path, value: str,
                                                                     message: str) -> None:
    digest = _file_draft(tmp_path)
    with pytest.raises(ContractError, match=message):
        load_contract(_contract(tmp_path, axis="[models.draft]", candidate_set=(
            f"              models: {{draft: {{path: draft.gguf, sha256: {digest}}}}}\n"
            f"              args: {{--lookup: '{value}'}}")))


@pytest.mark.parametrize(("token", "message"), [
    ("-md=${model:nope}", r"\$\{model:nope\} names no model of lane"),
    ("-md=/x.gguf", r"-md '/x.gguf' is a draft model that is not pinned"),
])
def test_a_short_option_written_with_equals_is_checked_as_the_launch_reads_it(tmp_path: Path, token: str,
                                                                              message: str) -> None:
    with pytest.raises(ContractError, match=message):
        load_contract(_contract(tmp_path, defaults_args=f'[--ctx-size, "512", "{token}"]', axis="[args.ctx-size]",
                                candidate_set='              args: {--ctx-size: "1024"}'))


def test_served_is_the_lanes_model_not_a_models_role(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"role 'served' is the lane's `model:`"):
        load_contract(_contract(tmp_path, axis="[models.served]", candidate_set=(
            f"              models: {{served: {{path: draft.gguf, sha256: {'a' * 64}}}}}")))


def test_roles_are_identifiers_and_differ_beyond_case(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"name 'dr aft' is not an identifier"):
        load_contract(_contract(tmp_path, axis="[x]", candidate_set=(
            f"              models: {{'dr aft': {{path: d.gguf, sha256: {'a' * 64}}}}}")))
    with pytest.raises(ContractError, match=r"differ only in case"):
        load_contract(_contract(tmp_path, axis="[x]", candidate_set=(
            f"              models: {{draft: {{path: d, sha256: {'a' * 64}}}, Draft: {{path: e, sha256: {'a' * 64}}}}}")))
    # one from the defaults, one from the lane's set: checked again once merged
    with pytest.raises(ContractError, match=r"differ only in case"):
        load_contract(_contract(
            tmp_path, axis="[models.Draft]",
            defaults_models=f"\n          models: {{draft: {{path: d, sha256: {'a' * 64}, mount: /x/d}}}}",
            candidate_set=f"              models: {{Draft: {{path: e, sha256: {'a' * 64}, mount: /x/d}}}}"))


def test_a_null_removes_a_role_and_a_set_entry_keeps_the_defaults_mount(tmp_path: Path) -> None:
    a, b = _file_draft(tmp_path, "a.gguf", b"A"), _file_draft(tmp_path, "b.gguf", b"B")
    loaded = load_contract(_contract(
        tmp_path, runtime="docker", defaults_args='[--ctx-size, "512", -md, "${model:draft}"]',
        defaults_models=f"\n          models: {{draft: {{path: a.gguf, sha256: {a}, mount: /drafts/d.gguf}}}}",
        candidate_set=f"              models: {{draft: {{path: b.gguf, sha256: {b}}}}}"))
    cand = loaded.lanes["cand"]
    assert cand.model_seen_at("draft") == "/drafts/d.gguf" and resolve_refs(cand).args[-1] == "/drafts/d.gguf"
    with pytest.raises(ContractError, match=r"names no model of lane 'cand'"):
        load_contract(_contract(
            tmp_path, defaults_args='[--ctx-size, "512", -md, "${model:draft}"]',
            defaults_models=f"\n          models: {{draft: {{path: a.gguf, sha256: {a}}}}}",
            candidate_set="              models: {draft: null}"))


def test_a_file_pinned_as_a_directory_and_the_reverse_are_named(tmp_path: Path) -> None:
    digest = _draft_dir(tmp_path, "eagle", b"w")
    with pytest.raises(ContractError, match=r"set\.models\.draft\.path: .*a directory is pinned by sha256_manifest"):
        load_contract(_contract(tmp_path, candidate_set=f"              models: {{draft: {{path: eagle, sha256: {digest}}}}}"))
    _file_draft(tmp_path)
    with pytest.raises(ContractError, match=r"set\.models\.draft\.path: 'draft.gguf' is not a directory"):
        load_contract(_contract(tmp_path, candidate_set=(
            f"              models: {{draft: {{path: draft.gguf, sha256_manifest: eagle.sha256, sha256: {digest}}}}}")))


def _pinned_dir_contract(directory: Path) -> Path:
    digest = _draft_dir(directory, "eagle", b"weights-1")
    return _contract(directory, candidate_set=(
        f"              models: {{draft: {{path: eagle, sha256_manifest: eagle.sha256, sha256: {digest}}}}}\n"
        "              args: {--model-draft: '${model:draft}'}"))


def test_freeze_pins_a_directory_by_its_manifest_and_run_hashes_it_again(tmp_path: Path) -> None:
    init_keys()
    path = _pinned_dir_contract(tmp_path)
    record, created = freeze(load_contract(path), load_signing_key())
    frozen = json.loads(record.read_text())
    assert created and frozen["files"]["eagle.sha256"] == load_contract(path).lanes["cand"].models["draft"].sha256
    check_frozen(load_contract(path), record, load_trusted())  # unchanged: runs
    (tmp_path / "eagle" / "sub" / "weights.bin").write_bytes(b"weights-2")  # one weight file swapped
    with pytest.raises(ContractError, match=r"set\.models\.draft\.path: eagle is not the directory eagle\.sha256 "
                                            r"lists: 1 of 2 files differ \(e\.g\. sub/weights\.bin\)"):
        check_frozen(load_contract(path), record, load_trusted())


def test_an_unlisted_file_in_a_pinned_directory_is_refused(tmp_path: Path) -> None:
    init_keys()
    path = _pinned_dir_contract(tmp_path)
    (tmp_path / "eagle" / "extra.safetensors").write_bytes(b"x")
    with pytest.raises(ContractError, match=r"1 files are not in the manifest \(e\.g\. extra\.safetensors\)"):
        freeze(load_contract(path), load_signing_key())


def test_a_wrong_pin_of_a_model_file_is_refused_at_freeze(tmp_path: Path) -> None:
    init_keys()
    _file_draft(tmp_path)
    path = _contract(tmp_path, candidate_set=(
        f"              models: {{draft: {{path: draft.gguf, sha256: {'a' * 64}}}}}\n"
        "              args: {--model-draft: '${model:draft}'}"))
    with pytest.raises(ContractError, match=r"models\.draft\.sha256: draft\.gguf has sha256 [0-9a-f]{64}, not the "
                                            r"pinned a{64}"):
        freeze(load_contract(path), load_signing_key())


def test_a_contract_without_models_freezes_as_before(tmp_path: Path) -> None:
    """An old contract's canonical form and freeze record do not change: `models` is left out unless written."""
    init_keys()
    path = _contract(tmp_path, axis="[args.x]", candidate_set="              args: {--x: '1'}")
    loaded = load_contract(path)
    assert '"models":' not in json.dumps(loaded.canonical)
    record, _ = freeze(loaded, load_signing_key())
    assert set(json.loads(record.read_text())["files"]) == set()
    with pytest.raises(FrozenChanged):  # and a model added later is a change, named
        digest = _file_draft(tmp_path)
        changed = _contract(tmp_path, axis="[args.x, models.draft]", candidate_set=(
            f"              args: {{--x: '1', -md: '${{model:draft}}'}}\n"
            f"              models: {{draft: {{path: draft.gguf, sha256: {digest}}}}}"))
        check_frozen(load_contract(changed), record, load_trusted())


def test_the_vllm_drafter_example_pins_both_models_and_the_drafter_is_its_one_axis(tmp_path: Path) -> None:
    """examples/vllm-drafter.yaml: its models live on a GPU box, so it is loaded as a description (no file
    read); every other check runs."""
    loaded = load_contract(EXAMPLES / "vllm-drafter.yaml", check_files=False)
    base, cand = loaded.lanes["baseline"], loaded.lanes["eagle3-k3"]
    assert base.model.sha256_manifest and cand.model == base.model  # the served model, pinned by its manifest
    draft = cand.models["draft"]
    assert draft.is_directory and draft.sha256_manifest and len(draft.sha256) == 64
    assert [a.lstrip("-") for a in loaded.contract.lanes[1].axis] == ["models.draft"]
    assert set(axis_difference(base, cand)) == {"models.draft", "args.speculative-config"}  # the flag is implied
    spec = json.loads(resolve_refs(cand).options["--speculative-config"] or "")
    assert spec == {"method": "eagle3", "model": "/campaign/models/draft", "num_speculative_tokens": 3}
    # the stranger's original contract: the drafter's path written into the JSON, unpinned
    copy = tmp_path / "vllm-drafter.yaml"
    shutil.copytree(EXAMPLES / "prompts", tmp_path / "prompts")
    copy.write_text((EXAMPLES / "vllm-drafter.yaml").read_text().replace(
        "${model:draft}", "/models/EAGLE3-LLaMA3.1-Instruct-8B"))
    with pytest.raises(ContractError, match=r"key 'model' '/models/EAGLE3-LLaMA3\.1-Instruct-8B' is a draft model "
                                            r"that is not pinned") as caught:
        load_contract(copy, check_files=False)
    assert caught.value.field == "lanes[1].set.args.--speculative-config" and caught.value.line == 65


def test_the_strangers_unpinned_drafter_is_one_line_exit_2_and_an_old_bundles_copy_still_loads(tmp_path: Path) -> None:
    """The issue's contract as written: the EAGLE-3 directory named inside --speculative-config, no `models:`."""
    shutil.copytree(EXAMPLES / "prompts", tmp_path / "prompts")
    text = (EXAMPLES / "vllm-drafter.yaml").read_text().replace("${model:draft}", "/models/EAGLE3-LLaMA3.1-Instruct-8B")
    head, _, tail = text.partition("      models:\n")
    text = head + tail[tail.index("      args:"):]
    (tmp_path / "manifests").mkdir()  # the served model's manifest, as `campaign manifest` would write it
    (tmp_path / "manifests" / "llama-3.1-8b-instruct.sha256").write_text(f"{'a' * 64}  model.safetensors\n")
    path = tmp_path / "stranger.yaml"
    path.write_text(text.replace("axis: [models.draft]", "axis: [args.speculative-config]"))
    ran = campaign("validate", str(path))
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.strip() == (
        f"error: {path}:60: lanes[1].set.args.--speculative-config: --speculative-config key 'model' "
        "'/models/EAGLE3-LLaMA3.1-Instruct-8B' is a draft model that is not pinned: pin it under `models:` (path, "
        "sha256; a directory also sha256_manifest) and write ${model:ROLE} (pinned roles: none)")
    # a bundle measured before drafters had to be pinned is judged again as it ran
    assert load_contract(path, check_files=False, bundle_copy=True).lanes["eagle3-k3"].models == {}
