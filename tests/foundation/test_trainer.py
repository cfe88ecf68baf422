import math

import pytest
import torch

import asyncrl.training.trainer as trainer_module
from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout import EngineSpec, make_engine, score
from asyncrl.training.trainer import Learner


@pytest.fixture()
def setup(tiny_policy):
    model, tok, task = tiny_policy
    state = {k: v.clone() for k, v in model.state_dict().items()}
    problems = task.problems("train")[:4]
    engine = make_engine("transformers", EngineSpec(max_new_tokens=8, temperature=1.0), model=model, tokenizer=tok)
    gen = engine.generate(encode_problems(tok, problems, 4))
    batch = score(gen, problems, 4, task, tok)
    batch.rewards = torch.tensor([1.0, 0, 0, 0] * 4)  # signal in every group
    yield model, batch
    model.load_state_dict(state)


def test_step_updates_weights_and_version(setup):
    model, batch = setup
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3), LossConfig())
    stats = trainer.step(batch)
    assert trainer.version == 1
    assert math.isfinite(stats["loss"]) and stats["skipped_updates"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    torch.testing.assert_close(batch.advantages[:4].sum(), torch.tensor(0.0))


def test_positive_advantage_sequences_gain_probability(setup):
    model, batch = setup
    trainer = Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3), LossConfig())
    with torch.no_grad():
        before = (trainer.logprobs(batch)[0]).sum(1)
    for _ in range(3):
        trainer.step(batch)
    with torch.no_grad():
        delta = (trainer.logprobs(batch)[0]).sum(1) - before
    winners = torch.arange(16) % 4 == 0
    assert delta[winners].mean() > 0 > delta[~winners].mean()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_loss_never_reaches_weights(setup, monkeypatch, bad):
    model, batch = setup
    real = trainer_module.policy_loss

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * bad, stats

    monkeypatch.setattr(trainer_module, "policy_loss", poisoned)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Learner(model, TrainerConfig(n_minibatches=2), LossConfig())
    stats = trainer.step(batch)
    assert stats["skipped_updates"] == 2
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert trainer.version == 1  # the batch was consumed


def test_step_statistics_are_named_for_what_they_hold(setup, monkeypatch):
    """A key ending in _max is the largest of the step's updates' values, _min the smallest, any
    other the mean: ratio_max is the step's largest ratio, not a mean of per-minibatch maxima."""
    model, batch = setup
    per_update, real = [], trainer_module.policy_loss

    def spy(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        per_update.append({key: float(value) for key, value in stats.items()})
        return loss, stats

    monkeypatch.setattr(trainer_module, "policy_loss", spy)
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-2), LossConfig())
    trainer.version = 1  # the batch is one version stale: both updates have ratios and staleness
    stats = trainer.step(batch.select(torch.arange(len(batch))))
    assert len(per_update) == 2  # one loss per update (no micro-batches)
    first, second = per_update
    assert first["ratio_max"] != second["ratio_max"]  # the second update sees moved weights
    for key in ("ratio_max", "importance_weight_max", "staleness_max"):
        assert stats[key] == max(first[key], second[key]), key
    for key in ("ratio_min", "importance_weight_min", "staleness_min"):
        assert stats[key] == min(first[key], second[key]), key
    assert stats["ratio_mean"] == pytest.approx((first["ratio_mean"] + second["ratio_mean"]) / 2)


def test_reduce_updates_leaves_nan_out():
    nan = math.nan
    out = trainer_module.reduce_updates({"a_max": [1.0, nan, 3.0], "a_min": [nan, 2.0, 1.0], "a": [1.0, nan, 2.0],
                                         "none_max": [nan, nan], "maximum": [1.0, 3.0]})
    assert out["a_max"] == 3.0 and out["a_min"] == 1.0 and out["a"] == 1.5 and out["maximum"] == 2.0
    assert math.isnan(out["none_max"])


def test_prox_error_stats_hand_worked():
    exact = torch.tensor([[-1.0, -2.0, -3.0]])
    approx = torch.tensor([[-1.5, -2.0, -9.0]])
    mask = torch.tensor([[True, True, False]])  # the padded token's 6.0 is not counted
    assert trainer_module.prox_error_stats(exact, approx, mask) == {"prox_abs_err_mean": 0.25,
                                                                    "prox_abs_err_max": 0.5}
    empty = trainer_module.prox_error_stats(exact, approx, torch.zeros_like(mask))
    assert all(math.isnan(v) for v in empty.values())
    # per staleness: tokens 2 versions behind err 0.5 and 0.0 (mean 0.25); the 3-behind token is padding
    stale = torch.tensor([[2, 2, 3]])
    assert trainer_module.prox_error_stats(exact, approx, mask, stale) == {
        "prox_abs_err_mean": 0.25, "prox_abs_err_max": 0.5, "prox_abs_err_stale2": 0.25}
    stale = torch.tensor([[1, 4, 4]])
    assert trainer_module.prox_error_stats(exact, approx, mask, stale) == {
        "prox_abs_err_mean": 0.25, "prox_abs_err_max": 0.5, "prox_abs_err_stale1": 0.5, "prox_abs_err_stale4": 0.0}


def test_prox_error_measures_without_changing_the_update(setup):
    """trainer.prox_error only logs: same weights as without it, and a non-zero error once the
    current policy has moved within the step (second minibatch, staleness 2)."""
    model, batch = setup
    start = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    for measure in (False, True):
        model.load_state_dict(start)
        trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3, prox="loglinear", prox_error=measure),
                          LossConfig())
        trainer.version = 2  # the batch (version 0) is two versions stale
        results[measure] = (trainer.step(batch.select(torch.arange(len(batch)))),
                            {k: v.clone() for k, v in model.state_dict().items()})
    for key, value in results[False][1].items():
        torch.testing.assert_close(results[True][1][key], value, rtol=0, atol=0)
    stats = results[True][0]
    assert "prox_abs_err_mean" not in results[False][0]
    assert 0 < stats["prox_abs_err_mean"] <= stats["prox_abs_err_max"] < 10
    assert stats["prox_abs_err_stale2"] == pytest.approx(stats["prox_abs_err_mean"])  # every token 2 behind
    assert stats["prox_error_time_s"] > 0 and "prox_error_time_s" not in results[False][0]


def test_prox_error_every_n_measures_only_on_multiples_of_n(setup):
    model, batch = setup
    start = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3, prox="loglinear", prox_error=True,
                                           prox_error_every=3), LossConfig())
    measured = [("prox_abs_err_mean" in trainer.step(batch.select(torch.arange(len(batch))))) for _ in range(7)]
    model.load_state_dict(start)
    assert measured == [True, False, False, True, False, False, True]  # versions 0, 3, 6


def test_trainer_never_names_a_proximal_strategy():
    """The Learner reaches the proximal policy through the registry only: no strategy name appears
    as a string in its class (so no ``if prox == ...`` branch)."""
    import ast
    from pathlib import Path

    from asyncrl.objectives import PROX_STRATEGIES

    tree = ast.parse(Path(trainer_module.__file__).read_text())
    (trainer_class,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Learner"]
    strings = {node.value for node in ast.walk(trainer_class)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert "step" in {node.name for node in trainer_class.body if isinstance(node, ast.FunctionDef)}
    assert not strings & set(PROX_STRATEGIES)


@pytest.mark.parametrize("prox, loss", [("recompute", "decoupled"), ("loglinear", "decoupled"),
                                        ("linear", "decoupled"), ("behav", "ppo"), ("none", "ppo")])
def test_each_strategy_gets_the_extra_forward_pass_only_when_it_declares_it(setup, monkeypatch, prox, loss):
    from asyncrl.objectives import PROX_STRATEGIES

    model, batch = setup
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3, prox=prox), LossConfig(name=loss))
    forwards, seen = [], []
    real_logprobs, real_loss = trainer.logprobs, trainer_module.policy_loss
    monkeypatch.setattr(trainer, "logprobs", lambda *a, **k: forwards.append(1) or real_logprobs(*a, **k))

    def spy(name, logp, *args, prox_logp=None, **kwargs):
        seen.append((logp.detach().clone(), prox_logp))
        return real_loss(name, logp, *args, prox_logp=prox_logp, **kwargs)

    monkeypatch.setattr(trainer_module, "policy_loss", spy)
    stats = trainer.step(batch)
    strategy = PROX_STRATEGIES[prox]
    assert len(forwards) == 2 + strategy.needs_forward
    assert all((p is None) == (not strategy.gives_prox) for _, p in seen)
    if strategy.needs_forward:  # before the first update the exact π_prox is the current policy
        torch.testing.assert_close(seen[0][1], seen[0][0], rtol=1e-5, atol=1e-5)
    assert stats["prox_time_s"] >= 0 and math.isfinite(stats["loss"])
