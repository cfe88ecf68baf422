"""TRL's configuration, field by field: every field of the installed TRL's ``GRPOConfig`` (its own
and those it inherits from transformers' ``TrainingArguments``) is mapped to an asyncrl key or
said to be not offered, with why; ``--help-keys`` prints that line for TRL's common names; the
docs tables are the data; the defaults docs/config.md says differ are the real ones; a batch can be
given in completions (``rollout.completions_per_step``); an existing run directory is refused with
the keys that go on."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from asyncrl.cli import main
from asyncrl.config import ConfigError, load_config
from asyncrl.config.help import config_keys, describe_keys
from asyncrl.config.peers import AGENT_PEER_NAMES, PEER_NAMES, TRL_DEFAULTS, TRL_NOT_OFFERED
from asyncrl.runtime.resume import find_resume

CONFIG_MD = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _names(cell: str) -> set[str]:
    return {n.split("=")[0] for n in re.findall(r"`([^`]+)`", cell) if not n.startswith('"')}


def test_every_grpo_config_field_is_mapped_or_not_offered_with_a_reason():
    trl = pytest.importorskip("trl")
    cited = {name for table in (PEER_NAMES["TRL"], AGENT_PEER_NAMES["TRL"], TRL_NOT_OFFERED)
             for theirs, _ in table for name in _names(theirs)}
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert len(fields) > 150  # TRL's own and TrainingArguments' (191 in TRL 1.16)
    assert sorted(fields - cited) == []
    for theirs, ours in TRL_NOT_OFFERED:
        assert ours.startswith("not offered, because ") and len(ours) > len("not offered, because ") + 15, theirs
    # mapped and not offered at once would be two contradicting answers
    mapped = {name for theirs, _ in PEER_NAMES["TRL"] for name in _names(theirs)}
    assert mapped & {name for theirs, _ in TRL_NOT_OFFERED for name in _names(theirs)} == set()


def test_the_asyncrl_keys_the_trl_rows_name_exist():
    keys = {k.key for k in config_keys()}
    sections = {k.rsplit(".", 1)[0] for k in keys}
    for _, ours in (*PEER_NAMES["TRL"], *TRL_NOT_OFFERED):
        for name in _names(ours):
            if re.fullmatch(r"(run|policy|rollout|trainer|eval|reward|loss|async|env|task)\.[\w.*]+", name):
                # loss.params.* and engine_kwargs.* are open mappings; trainer.fsdp.* a section
                known = (name in keys or name.startswith(("loss.params.", "rollout.engine_kwargs."))
                         or name.removesuffix(".*") in sections)
                assert known, f"{name} (in {ours!r}) is not an asyncrl key"


def _docs_table(heading: str) -> tuple[tuple[str, ...], ...]:
    part = re.split(r"\n### |\n## ", CONFIG_MD.read_text().split(heading, 1)[1])[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")][2:]  # header, rule
    return tuple(tuple(c.strip() for c in line.strip()[2:-2].split(" | ")) for line in lines)


def test_the_docs_tables_are_the_data():
    assert _docs_table("### TRL `GRPOConfig` / `GRPOTrainer`") == PEER_NAMES["TRL"]
    assert _docs_table("### TRL settings not offered") == TRL_NOT_OFFERED
    assert _docs_table("### TRL's defaults and ours") == TRL_DEFAULTS


def _value(cell: str):
    return json.loads(cell.strip("`"))


def test_the_defaults_said_to_differ_are_trls_and_ours():
    trl = pytest.importorskip("trl")
    theirs = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    ours = {k.key: k.default for k in config_keys()}
    for trl_name, trl_default, our_key, our_default, _ in TRL_DEFAULTS:
        assert theirs[trl_name.strip("`")] == _value(trl_default), trl_name
        key = our_key.strip("`")
        if key in ours:
            assert ours[key] == _value(our_default), key
    named = {row[0].strip("`") for row in TRL_DEFAULTS}
    assert {"learning_rate", "lr_scheduler_type", "max_completion_length", "gradient_checkpointing"} <= named
    assert (theirs["learning_rate"], ours["trainer.lr"]) == (1e-6, 3e-5)  # a difference the table must keep
    # the ones docs/config.md says are the same
    same = {"num_generations": ("rollout.samples_per_prompt", 8), "temperature": ("rollout.temperature", 1.0),
            "top_p": ("rollout.top_p", 1.0), "top_k": ("rollout.top_k", 0), "beta": ("trainer.kl_coef", 0.0),
            "adam_beta1": ("trainer.beta1", 0.9), "adam_beta2": ("trainer.beta2", 0.999),
            "weight_decay": ("trainer.weight_decay", 0.0), "max_grad_norm": ("trainer.grad_clip", 1.0),
            "warmup_steps": ("trainer.warmup_steps", 0)}
    for trl_name, (key, value) in same.items():
        assert theirs[trl_name] == ours[key] == value, trl_name
    assert (theirs["epsilon"], theirs["epsilon_high"], theirs["scale_rewards"]) == (0.2, None, "group")


@pytest.mark.parametrize("name, line", [
    ("eval_strategy", "TRL eval_strategy, eval_steps  ->  eval.every"),
    ("vllm_mode", "TRL vllm_mode, vllm_server_base_url, vllm_server_host, vllm_server_port, vllm_server_timeout, "
                  "vllm_group_port  ->  not offered, because asyncrl places vLLM itself"),
    ("push_to_hub", "TRL push_to_hub, hub_token, hub_private_repo, hub_model_id, hub_strategy, hub_always_push, "
                    "hub_revision, log_completions_hub_repo  ->  not offered, because asyncrl uploads nothing"),
    ("per_device_train_batch_size", "TRL per_device_train_batch_size (sequences per forward/backward)  ->  "
                                    "trainer.micro_batch_size"),
    ("num_generations", "TRL num_generations  ->  rollout.samples_per_prompt"),
    ("learning_rate", "TRL learning_rate  ->  trainer.lr"),
    ("max_completion_length", "TRL max_completion_length  ->  rollout.max_new_tokens"),
    ("generation_batch_size", "TRL generation_batch_size, steps_per_generation  ->  rollout.completions_per_step"),
    ("log_completions", "TRL log_completions, num_completions_to_print  ->  run.print_completions"),
    ("num_train_epochs", "TRL num_train_epochs  ->  not offered, because a run is counted in steps (trainer.steps)"),
    ("deepspeed", "TRL ds3_gather_for_generation, deepspeed  ->  not offered, because the trainer shards with FSDP2"),
])
def test_help_keys_answers_trls_common_names(name, line, capsys):
    assert main(["train", "--help-keys", name]) == 0
    out = capsys.readouterr().out
    assert any(printed.strip().startswith(line) for printed in out.splitlines()), out
    mapped = line.split("->  ", 1)[1]
    if not mapped.startswith("not offered"):  # our key is listed with its type and default
        assert re.search(rf"^  {re.escape(mapped.split()[0])}\s+\S+ = ", out, re.M), out


def test_help_keys_finds_every_grpo_config_field():
    trl = pytest.importorskip("trl")
    for f in dataclasses.fields(trl.GRPOConfig):
        text = describe_keys(f.name)
        assert text is not None and "in other libraries:" in text, f.name


def test_a_batch_in_completions():
    cfg = load_config(None, ["rollout.completions_per_step=32", "rollout.samples_per_prompt=4"])
    assert (cfg.rollout.prompts_per_step, cfg.rollout.batch_size) == (8, 32)
    cfg = load_config(None, ["rollout.completions_per_step=64", "rollout.samples_per_prompt=4"])
    assert cfg.rollout.prompts_per_step == 16  # the default prompts_per_step gives way
    assert load_config(cfg.to_dict()).rollout.prompts_per_step == 16  # the saved config loads the same
    agree = load_config(None, ["rollout.completions_per_step=64", "rollout.prompts_per_step=16",
                               "rollout.samples_per_prompt=4"])
    assert agree.rollout.prompts_per_step == 16
    with pytest.raises(ConfigError) as err:
        load_config(None, ["rollout.completions_per_step=60"])
    assert str(err.value).endswith("rollout.completions_per_step: 60 is not a whole number of groups of "
                                   "rollout.samples_per_prompt=8 (try 64)")
    with pytest.raises(ConfigError, match=r"rollout\.completions_per_step: 64 completions are 8 prompts × 8, but "
                                          r"rollout\.prompts_per_step=4 \(given beside it, or by the --config file\); give only one of the two"):
        load_config(None, ["rollout.completions_per_step=64", "rollout.prompts_per_step=4"])
    with pytest.raises(ConfigError, match=r"trainer\.n_minibatches: must divide the batch size 32"):
        load_config(None, ["rollout.completions_per_step=32", "trainer.n_minibatches=3"])  # the batch as set


def test_an_existing_run_directory_is_refused_with_the_keys_that_go_on(tmp_path):
    run_dir = tmp_path / "runs" / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("{}\n")
    cfg = load_config(None, ["run.name=mine", f"run.out_dir={tmp_path / 'runs'}"])
    with pytest.raises(ConfigError) as err:
        find_resume(cfg, run_dir)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: run.name: run directory already exists: {run_dir}")
    assert "run.resume=auto" in text and "run.name=<new name>" in text and "not overwritten" in text
