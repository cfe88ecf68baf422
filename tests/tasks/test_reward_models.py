"""Reward models (``reward.models``, docs/rewards.md "Reward models"): a tiny sequence-classification
model saved locally scores exactly what a direct forward pass gives (TRL's text, batched and padded
on the right; a chat row through the reward model's chat template), errors are one line naming the
directory, ``asyncrl.train(reward_funcs=[...])`` sorts directories and model objects into
``reward.models``, and a run mixing a model with a function trains in sync and async mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from asyncrl.runtime.validate import load_run_config
from asyncrl.core.hf_tokenizer import load_tokenizer
from asyncrl.core.loader import ConfigError
from asyncrl.rewards import RewardSet
from asyncrl.tasks import Problem

EXACT = "asyncrl.tasks.rewards:exact_answer"
CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"


def tiny_reward_model(tokenizer, *, num_labels: int = 1, seed: int = 0):
    """A 2-layer Qwen2 sequence classifier. No pad token id in its config: loading must set it from
    the tokenizer (TRL does), else a padded batch reads the score at the wrong position."""
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=num_labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForSequenceClassification(config)


def save_tiny_reward_model(path, tokenizer, *, num_labels: int = 1, with_tokenizer: bool = True):
    tiny_reward_model(tokenizer, num_labels=num_labels).save_pretrained(path)
    if with_tokenizer:
        tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, tiny_policy):
    return save_tiny_reward_model(tmp_path_factory.mktemp("rm") / "tiny_rm", tiny_policy[1])


@pytest.fixture(scope="module")
def chat_rm(tmp_path_factory, rm_dir):
    """The same weights, with a tokenizer that has a chat template."""
    tokenizer = load_tokenizer(rm_dir)
    tokenizer.chat_template = CHAT_TEMPLATE
    path = tmp_path_factory.mktemp("rm") / "chat_rm"
    save_tiny_reward_model(path, tokenizer)
    return path, tokenizer


def direct_scores(path, tokenizer, texts: list[str]) -> list[float]:
    """One unpadded forward pass per text: the reference the batched scorer must reproduce."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.inference_mode():
        return [model(**tokenizer(t, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
                for t in texts]


def test_scores_equal_a_direct_forward_pass_and_join_the_weighted_sum(rm_dir, tiny_policy):
    _, tokenizer, task = tiny_policy
    problems = task.problems("train")[:5]
    completions = [p.solution[: 3 + 4 * i] for i, p in enumerate(problems)]  # lengths differ: padding in a batch
    completions[0] = problems[0].solution  # the exact answer: exact_answer's 1
    cfg = load_run_config(None, [f"reward.funcs=[{EXACT}]", f"reward.models=[{rm_dir}]", "reward.weights=[1.0, 0.5]",
                             "reward.model_batch_size=2"])
    rewards = RewardSet.from_config(cfg.reward, task)
    assert rewards.names == ["exact_answer", "tiny_rm"]
    scores = rewards.score(completions, problems)
    expected = direct_scores(rm_dir, tokenizer, [p.prompt + c for p, c in zip(problems, completions)])
    assert [row[1] for row in scores.parts] == pytest.approx(expected, abs=1e-5)
    assert len({round(v, 6) for v in expected}) == len(expected)  # distinct: a misread position would show
    assert [row[0] for row in scores.parts] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert scores.total == pytest.approx([e + 0.5 * m for e, m in zip([1, 0, 0, 0, 0], expected)], abs=1e-5)
    metrics = rewards.metrics(rewards.parts_tensor(scores))
    assert metrics["reward/tiny_rm"] == pytest.approx(sum(expected) / 5, abs=1e-5)


def test_a_chat_row_is_rendered_by_the_reward_models_template(chat_rm, tiny_policy):
    path, tokenizer = chat_rm
    task = tiny_policy[2]
    problems = [Problem(uid=f"c-{i}", prompt=f"What is {i} + 1?\nA:", answer=str(i + 1), solution=f" {i + 1}",
                        messages=(("system", "Be brief."), ("user", f"What is {i} + 1?"))) for i in range(3)]
    completions = [" 1", " the answer is 2", " 3"]
    chat = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"What is {i} + 1?"},
             {"role": "assistant", "content": c}] for i, c in enumerate(completions)]
    rewards = RewardSet.from_config(load_run_config(None, [f"reward.models=[{path}]"]).reward, task)
    assert rewards.names == ["chat_rm"]  # alone: no task correctness reward beside it
    got = [row[0] for row in rewards.score(completions, problems).parts]
    texts = [tokenizer.apply_chat_template(messages, tokenize=False) for messages in chat]
    assert texts[0].startswith("<system>Be brief.\n<user>What is 0 + 1?\n<assistant> 1")
    assert got == pytest.approx(direct_scores(path, tokenizer, texts), abs=1e-5)
    # completion_format=text: the prompt's template-free text, as for a plain row
    plain = RewardSet.from_config(load_run_config(None, [f"reward.models=[{path}]", "reward.completion_format=text"]).reward, task)
    got = [row[0] for row in plain.score(completions, problems).parts]
    assert got == pytest.approx(direct_scores(path, tokenizer, [p.prompt + c for p, c in zip(problems, completions)]),
                                abs=1e-5)


def test_a_model_is_loaded_once_per_process(rm_dir):
    from asyncrl.rewards.reward_model import load_reward_model

    assert load_reward_model(str(rm_dir)) is load_reward_model(str(rm_dir))


@pytest.mark.parametrize("case, message", [
    ("missing", "{path}: no such directory"),
    ("causal_lm", "{path} is not a sequence-classification model (architectures: Qwen2ForCausalLM)"),
    ("two_labels", "{path} has num_labels=2; a reward model has one output"),
    ("no_tokenizer", "{path}: no tokenizer in the directory"),
    ("not_a_model", "{path}: not a Hugging Face model directory (no config.json)"),
])
def test_a_bad_reward_model_is_one_line_naming_it(tmp_path, model_dir, tiny_policy, case, message):
    path = {"missing": tmp_path / "nope", "causal_lm": model_dir, "not_a_model": tmp_path}.get(case, tmp_path / case)
    if case == "two_labels":
        save_tiny_reward_model(path, tiny_policy[1], num_labels=2)
    elif case == "no_tokenizer":
        save_tiny_reward_model(path, tiny_policy[1], with_tokenizer=False)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"reward.models=[{path}]"])
    text = str(err.value)
    assert text.startswith("config error: reward.models[0]: ") and "\n" not in text
    assert message.format(path=path) in text


def test_weights_count_functions_then_models(rm_dir):
    cfg = load_run_config(None, [f"reward.models=[{rm_dir}]", "reward.weights=[2.0]"])  # the model alone
    assert cfg.reward.funcs == [] and cfg.reward.weights == [2.0]
    with pytest.raises(ConfigError, match=r"reward.weights: 1 weight\(s\) for 2 reward function\(s\) and model\(s\)"):
        load_run_config(None, [f"reward.funcs=[{EXACT}]", f"reward.models=[{rm_dir}]", "reward.weights=[2.0]"])


def test_the_api_sorts_directories_and_model_objects_into_reward_models(tmp_path, rm_dir, tiny_policy):
    from transformers import AutoModelForSequenceClassification

    from asyncrl.api import build_config

    base = {"run.out_dir": str(tmp_path)}
    loaded = AutoModelForSequenceClassification.from_pretrained(rm_dir)  # its tokenizer: where it came from
    cfg = build_config(base, reward_funcs=[str(rm_dir), EXACT, loaded], reward__weights=[2.0, 1.0, 3.0])
    assert cfg.reward.funcs == [EXACT] and cfg.reward.weights == [1.0, 2.0, 3.0]  # TRL's order → the config's
    assert cfg.reward.models[0] == str(rm_dir)
    saved = cfg.reward.models[1]
    assert saved.startswith(str(tmp_path / ".inputs" / "reward_model-")) and saved.endswith("/tiny_rm")
    again = build_config(base, reward_funcs=[loaded]).reward.models  # named by content: saved once
    assert again == [saved] and len(list((tmp_path / ".inputs").glob("reward_model-*"))) == 1
    rewards = RewardSet.from_config(cfg.reward, tiny_policy[2])
    problems = tiny_policy[2].problems("train")[:3]
    parts = rewards.score([p.solution for p in problems], problems).parts
    assert [row[1] for row in parts] == [row[2] for row in parts]  # the saved copy scores as the original
    assert rewards.names == ["exact_answer", "tiny_rm", "tiny_rm_2"]


def test_the_api_refuses_a_reward_model_it_cannot_use_in_one_line(tmp_path, tiny_policy):
    from asyncrl.api import build_config

    base = {"run.out_dir": str(tmp_path)}
    unsaved = tiny_reward_model(tiny_policy[1])  # built in memory: no directory holds its tokenizer
    with pytest.raises(ConfigError, match=r"^config error: reward_funcs\[0\]: no tokenizer for the reward model "
                                          r"Qwen2ForSequenceClassification \(it was not loaded from a directory\); "
                                          r"pass \(model, tokenizer\) instead$"):
        build_config(base, reward_funcs=[unsaved])
    with pytest.raises(ConfigError, match=r"^config error: reward_funcs\[0\]: Qwen2ForCausalLM is not a "
                                          r"sequence-classification model \(architectures: Qwen2ForCausalLM\)"):
        build_config(base, reward_funcs=[(tiny_policy[0], tiny_policy[1])])  # a policy, not a reward model
    cfg = build_config(base, reward_funcs=[(unsaved, tiny_policy[1])])
    assert cfg.reward.models[0].endswith("/Qwen2ForSequenceClassification")
    with pytest.raises(ConfigError, match=r"^config error: reward_funcs\[1\]: 'no/such/rm' is neither a local "
                                          r"reward model directory \(no such directory; .*\) nor 'module:function'$"):
        build_config(base, reward_funcs=[EXACT, "no/such/rm"])


SCRIPT = '''
import json
import asyncrl
from transformers import AutoModelForSequenceClassification

def has_marker(completions, **kwargs):  # defined in the script: pickled into .inputs/ for the worker
    return [1.0 if "####" in c else 0.0 for c in completions]

if __name__ == "__main__":
    reward_model = AutoModelForSequenceClassification.from_pretrained({rm!r})
    for mode in ("sync", "async"):
        summary = asyncrl.train({{"policy.model_path": {model!r}, "run.mode": mode, "run.name": mode}},
                                reward_funcs=[reward_model, has_marker], reward__weights=[2.0, 1.0],
                                overrides=json.loads({overrides!r}))
        print("SUMMARY", summary["steps"], summary["mode"])
'''
TINY = {"run.progress": False, "run.report_to": [], "rollout.prompts_per_step": 2, "rollout.samples_per_prompt": 2,
        "rollout.max_new_tokens": 8, "trainer.n_minibatches": 1, "trainer.steps": 2, "eval.n_problems": 2,
        "eval.samples": 1, "eval.every": 0, "task.arithmetic.n_train": 40, "task.arithmetic.n_eval": 4}


def test_a_reward_model_beside_a_function_trains_in_sync_and_async_mode(tmp_path, model_dir, rm_dir):
    """By the Python API with a model object: saved under .inputs/, loaded by the async rollout
    worker process from there; its metric is reward/<folder>, the total the weighted sum."""
    (tmp_path / "train_it.py").write_text(textwrap.dedent(SCRIPT).format(
        rm=str(rm_dir), model=str(model_dir), overrides=json.dumps(TINY)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "train_it.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SUMMARY 2 sync" in proc.stdout and "SUMMARY 2 async" in proc.stdout
    for mode in ("sync", "async"):
        run_dir = tmp_path / "runs" / mode
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in records if r["step"] > 0]
        assert len(steps) == 2
        for r in steps:
            assert 0.0 <= r["reward/has_marker"] <= 1.0 and r["reward/tiny_rm"] != 0.0
            assert r["reward_mean"] == pytest.approx(r["reward/has_marker"] + 2.0 * r["reward/tiny_rm"], abs=1e-5)
        saved = (run_dir / "config.yaml").read_text()
        assert "/.inputs/reward_model-" in saved and "tiny_rm" in saved
