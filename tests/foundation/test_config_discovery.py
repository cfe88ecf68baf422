"""Every config key is discoverable: described in the dataclasses, listed by `--help` and
`--help-keys`, and printed by `asyncrl config` in a form that loads back to the same config."""

import dataclasses

import pytest

from asyncrl.cli import main
from asyncrl.config import Config, load_config
from asyncrl.config.help import config_keys, matching, type_label, value_label


def _leaf_count(cls) -> int:
    total = 0
    for f in dataclasses.fields(cls):
        value = getattr(cls(), f.name)
        total += _leaf_count(type(value)) if dataclasses.is_dataclass(value) else 1
    return total


def test_every_leaf_key_has_a_one_line_description():
    keys = config_keys()
    assert len(keys) == _leaf_count(Config)
    missing = [k.key for k in keys if not k.help.strip()]
    assert not missing, f"config fields without setting(..., help=...): {missing}"
    assert all("\n" not in k.help for k in keys)


def test_keys_are_the_dotted_override_names_with_their_defaults():
    by_key = {k.key: k for k in config_keys()}
    defaults = Config()
    assert by_key["trainer.lr"].default == defaults.trainer.lr and by_key["trainer.lr"].type == "float"
    assert by_key["async.max_ahead"].default == 1 and by_key["async.max_ahead"].type == "int|null"
    assert by_key["task.arithmetic.max_value"].default == defaults.task.arithmetic.max_value
    assert by_key["run.mode"].type == "sync|async|simulated"
    assert "async_.n_workers" not in by_key and "async.n_workers" in by_key
    # each default, written as listed, is read back as itself
    assert load_config(None, [f"{k}={value_label(v.default)}" for k, v in by_key.items()]) == defaults


def test_labels():
    assert value_label(None) == "null" and value_label(True) == "true" and value_label("runs") == "runs"
    assert value_label("a: b") == '"a: b"' and value_label([1]) == "[1]"
    assert value_label("no") == '"no"' and value_label("1") == '"1"'
    assert type_label(list[str] | None) == "list[str]|null"


@pytest.mark.parametrize("command", ["train", "eval", "pretrain", "config"])
def test_help_lists_every_key_and_the_presets(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for key in config_keys():
        assert f"  {key.key} " in out, key.key
    assert "AdamW learning rate" in out and "a3po" in out and "gpu-gsm8k" in out


def test_help_keys_filters(capsys):
    assert main(["train", "--help-keys", "trainer.vcpo.*"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("  ")]
    assert [l.split()[0] for l in lines] == [k.key for k in config_keys() if k.key.startswith("trainer.vcpo.")]
    assert {k.key for k in matching(config_keys(), "staleness")} >= {"async.max_staleness"}
    assert main(["config", "--help-keys", "no-such-key-anywhere"]) == 2


def _printed_config(capsys, argv) -> str:
    assert main(["config", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    [],
    ["--config", "sync", "loss.params.eps_high=0.28", "rollout.vllm_kwargs.max_model_len=512"],
    ['task.prompt_template="Q: {question}\\nA: #"', "policy.lora_target_modules=[q_proj, v_proj]",
     "async.max_ahead=null", "run.name='no'", "trainer.lr=1e-4", "task.arithmetic.ops='*+'"],
])
def test_config_output_round_trips(argv, capsys, tmp_path):
    text = _printed_config(capsys, argv)
    options = argv[1] if argv[:1] == ["--config"] else None
    expected = load_config(options, argv[2:] if options else argv)
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert load_config(path) == expected
    # every key is in the output, defaults included
    assert all(f"{k.key.rpartition('.')[2]}:" in text for k in config_keys())


def test_config_bad_key_is_one_line_exit_2(capsys):
    assert main(["config", "trainer.nope=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trainer.nope" in err
