"""eval.cache_initial: the step-0 evaluation is keyed by what it depends on and read back."""

import json
import subprocess
import sys
from pathlib import Path

from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

import torch

from asyncrl.config import load_config
from asyncrl.runtime import eval_cache

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402

# an untrained warm start (pretrain.steps=0) builds in a second: this test reads and writes the
# step-0 cache, it does not need a policy that learned anything
FAST = [a for a in TINY if not a.startswith("pretrain.steps")] + ["pretrain.steps=0"]


def key(model, problems, *overrides):
    return eval_cache.initial_eval_key(load_config(None, list(overrides)), model, problems)


def test_key_follows_weights_problems_and_settings(tiny_policy):
    model, _, task = tiny_policy
    problems = task.problems("eval")[:8]
    base = key(model, problems)
    assert key(model, problems) == base
    # settings that do not change the step-0 result keep the key
    assert key(model, problems, "eval.every=7", "eval.cache_initial=true", "trainer.steps=9") == base
    for override in ("eval.samples=2", "run.seed=1", "rollout.max_new_tokens=9", "eval.temperature=0.5",
                     "task.arithmetic.max_value=20"):
        assert key(model, problems, override) != base, override
    assert key(model, problems[:7]) != base
    # an episode's environment shapes the evaluation: the same start played another way is another key
    guess = key(model, problems, "env.name=guess")
    assert guess != base and key(model, problems, "env.name=guess", "env.max_turns=7") != guess
    assert key(model, problems, "env.harness=examples/harness_guess.py:agent") not in (base, guess)
    weight = next(model.parameters())
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.view(-1)[0] += 1e-6  # one weight, barely moved: still a different start
    try:
        assert key(model, problems) != base
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert key(model, problems) == base


def test_store_load_round_trip_and_unreadable(tmp_path):
    path = tmp_path / "initial-eval" / "k.json"
    assert eval_cache.load(path) is None
    eval_cache.store(path, {"eval_reward": 0.25, "eval_answer_acc": 0.5})
    assert eval_cache.load(path) == {"eval_reward": 0.25, "eval_answer_acc": 0.5}
    assert [p.name for p in path.parent.iterdir()] == ["k.json"]  # no temporary left behind
    path.write_text("{not json")
    assert eval_cache.load(path) is None
    path.write_text(json.dumps({"eval_pass_at_1": 1.0}))  # not an evaluation's metrics
    assert eval_cache.load(path) is None


def _step0(tmp_path: Path, cache: Path, name: str, *args: str) -> dict:
    proc = run_cli(["train", *FAST, "trainer.steps=1", "eval.every=0", f"policy.cache_dir={cache}",
                    f"run.name={name}", *args], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()[0]
    return json.loads(first)


def test_second_run_reads_the_cached_step0_eval(tmp_path):
    cache = tmp_path / "cache"
    first = _step0(tmp_path, cache, "a", "eval.cache_initial=true")
    [entry] = (cache / "initial-eval").iterdir()
    assert json.loads(entry.read_text())["eval_reward"] == first["eval_reward"]
    # a value no evaluation of 8 problems × 4 samples can return proves the run read the file
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "eval_reward": 0.123}))
    assert _step0(tmp_path, cache, "b", "eval.cache_initial=true")["eval_reward"] == 0.123
    assert _step0(tmp_path, cache, "c")["eval_reward"] == first["eval_reward"]  # off: evaluates
    assert _step0(tmp_path, cache, "d", "eval.cache_initial=true", "run.seed=1")["eval_reward"] != 0.123
