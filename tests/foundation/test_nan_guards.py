"""NaN or inf reaches the weights by no setting: one test per path (loss, gradient, clip limit,
learning rate, reward). Each injects a non-finite value and checks that the weights stay finite
and unchanged; the settings are also refused at config load."""

import math

import pytest
import torch

import asyncrl.training.trainer as trainer_module
from asyncrl.config import ConfigError, LossConfig, TrainerConfig, load_config
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout import EngineSpec, make_engine, score
from asyncrl.rollout.scoring import RewardError, check_reward, rewards_of
from asyncrl.training.trainer import Learner

BAD = [float("nan"), float("inf"), float("-inf")]


@pytest.fixture()
def setup(tiny_policy):
    model, tok, task = tiny_policy
    state = {k: v.clone() for k, v in model.state_dict().items()}
    problems = task.problems("train")[:2]
    engine = make_engine("transformers", EngineSpec(max_new_tokens=6, temperature=1.0), model=model, tokenizer=tok)
    batch = score(engine.generate(encode_problems(tok, problems, 4)), problems, 4, task, tok)
    batch.rewards = torch.tensor([1.0, 0, 0, 0] * 2)  # signal in every group: a real update
    yield model, batch, task
    model.load_state_dict(state)


def _snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def _unchanged_and_finite(model, before) -> bool:
    params = list(model.parameters())
    return all(torch.isfinite(p).all() for p in params) and all(torch.equal(a, b) for a, b in zip(before, params))


def test_healthy_step_changes_weights(setup):
    """The control: without injection the same step does move the weights (so 'unchanged' below
    means the guard held, not that nothing would have happened)."""
    model, batch, _ = setup
    before = _snapshot(model)
    Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3), LossConfig()).step(batch)
    assert not _unchanged_and_finite(model, before)


@pytest.mark.parametrize("bad", BAD)
def test_loss(setup, monkeypatch, bad):
    model, batch, _ = setup
    real = trainer_module.policy_loss
    monkeypatch.setattr(trainer_module, "policy_loss", lambda *a, **k: (lambda l, s: (l * bad, s))(*real(*a, **k)))
    before = _snapshot(model)
    stats = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3), LossConfig()).step(batch)
    assert stats["skipped_updates"] == 2
    assert _unchanged_and_finite(model, before)


@pytest.mark.parametrize("bad", BAD)
def test_gradient(setup, bad):
    """A finite loss whose backward pass produces a non-finite gradient in one parameter."""
    model, batch, _ = setup
    param = next(model.parameters())
    handle = param.register_hook(lambda grad: grad * bad)
    try:
        before = _snapshot(model)
        stats = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3), LossConfig()).step(batch)
    finally:
        handle.remove()
    assert stats["skipped_updates"] == 2 and math.isfinite(stats["loss"])
    assert _unchanged_and_finite(model, before)


@pytest.mark.parametrize("bad", [*BAD, 0.0, -1.0])
def test_clip_limit(setup, bad):
    model, batch, _ = setup
    with pytest.raises(ConfigError, match="trainer.grad_clip"):
        load_config(None, [f"trainer.grad_clip={bad}".replace("nan", ".nan").replace("inf", ".inf")])
    with pytest.raises(ValueError, match="trainer.grad_clip"):
        Learner(model, TrainerConfig(grad_clip=bad), LossConfig())  # a config built without load
    trainer = Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3), LossConfig())
    trainer.cfg.grad_clip = bad  # changed after construction: checked at every update
    before = _snapshot(model)
    with pytest.raises(ValueError, match="trainer.grad_clip"):
        trainer.step(batch)
    assert _unchanged_and_finite(model, before)


@pytest.mark.parametrize("bad", [*BAD, 0.0, -1e-3])
def test_learning_rate(setup, bad):
    model, batch, _ = setup
    with pytest.raises(ConfigError, match="trainer.lr"):
        load_config(None, [f"trainer.lr={bad}".replace("nan", ".nan").replace("inf", ".inf")])
    with pytest.raises(ValueError, match="trainer.lr"):
        Learner(model, TrainerConfig(lr=bad), LossConfig())
    trainer = Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3), LossConfig())
    trainer.optimizer.param_groups[0]["lr"] = bad  # e.g. a scheduler gone wrong
    before = _snapshot(model)
    with pytest.raises(ValueError, match="trainer.lr"):
        trainer.step(batch)
    assert _unchanged_and_finite(model, before)


@pytest.mark.parametrize("name", ["weight_decay", "beta1", "beta2", "adv_eps"])
def test_other_optimizer_settings_rejected_at_load(name):
    for bad in (".nan", ".inf", "-1"):
        with pytest.raises(ConfigError, match=f"trainer.{name}"):
            load_config(None, [f"trainer.{name}={bad}"])


@pytest.mark.parametrize("bad", BAD)
def test_reward(setup, bad):
    """A non-finite reward is refused where it is computed (one line naming the problem), and a
    batch that carries one anyway does not move the weights."""
    model, batch, task = setup
    problems = task.problems("train")[:2]

    class Broken:
        name = "broken"

        def problems(self, split):
            return problems

        def reward(self, completion, problem):
            return bad

    with pytest.raises(RewardError, match=r"task.name=broken: reward of problem .*: is"):
        rewards_of(Broken(), ["a", "b"], problems)
    with pytest.raises(RewardError):
        check_reward(Broken())
    # past that guard (a batch built by hand): the poisoned group's advantages are non-finite and
    # the objectives count them as 0; the other group still trains, and every weight stays finite
    batch.rewards[0] = bad
    stats = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3), LossConfig()).step(batch)
    assert math.isfinite(stats["loss"])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_reward_that_raises_names_the_problem(tiny_policy):
    _, _, task = tiny_policy
    problems = task.problems("train")[:3]

    class Raising:
        name = "raising"

        def reward(self, completion, problem):
            if problem is problems[1]:
                raise KeyError("gold")
            return 1.0

    with pytest.raises(RewardError, match=f"reward of problem {problems[1].uid}: raised KeyError"):
        rewards_of(Raising(), ["a", "b", "c"], problems)
