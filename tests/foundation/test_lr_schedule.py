"""trainer.lr_schedule: hand-worked factors, the lr each update really uses (with VCPO's ESS
scaling on top), the scheduler's state across a checkpoint, and the resume refusal."""

import math

import pytest

from asyncrl.config import LossConfig, TrainerConfig, load_config
from asyncrl.core.loader import ConfigError
from asyncrl.training.lr_schedule import check_schedule, lr_factor
from asyncrl.stability.config import VcpoConfig
from asyncrl.training.trainer import Learner


def factors(shape, total=6, warmup=2, min_ratio=0.0):
    return [lr_factor(k, total=total, warmup=warmup, shape=shape, min_ratio=min_ratio) for k in range(1, total + 1)]


def test_factors_by_hand():
    assert factors("constant", warmup=0) == [1.0] * 6
    assert factors("constant") == [0.5, 1, 1, 1, 1, 1]  # warm-up, then flat
    # decay over the T - W = 4 steps after the warm-up: p = 0, 1/4, 2/4, 3/4
    assert factors("linear") == pytest.approx([0.5, 1, 1, 0.75, 0.5, 0.25])
    cos = [0.5 * (1 + math.cos(math.pi * p)) for p in (0, 0.25, 0.5, 0.75)]
    assert factors("cosine", min_ratio=0.1) == pytest.approx([0.5, 1] + [0.1 + 0.9 * c for c in cos])
    assert factors("linear", warmup=0, total=4) == pytest.approx([1, 0.75, 0.5, 0.25])
    assert all(f > 0 for shape in ("linear", "cosine") for f in factors(shape, total=3, warmup=5))


def record_update_lrs(trainer):
    """The learning rate of every optimizer.step call, as the optimizer saw it."""
    seen = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"]))
    return seen


def test_each_update_uses_the_scheduled_lr(policy_and_batch):
    model, batch = policy_and_batch
    cfg = TrainerConfig(n_minibatches=2, lr=1e-3, steps=4, warmup_steps=1, lr_schedule="linear", min_lr_ratio=0.2)
    trainer = Learner(model, cfg, LossConfig())
    seen = record_update_lrs(trainer)
    logged = [trainer.step(batch)["lr"] for _ in range(4)]
    expected = [1e-3 * f for f in factors("linear", total=4, warmup=1, min_ratio=0.2)]
    assert logged == pytest.approx(expected)
    assert seen == pytest.approx([lr for lr in expected for _ in range(2)])  # both minibatches of a step


def test_ess_scaling_rides_on_the_schedule_without_compounding(policy_and_batch):
    model, batch = policy_and_batch
    cfg = TrainerConfig(n_minibatches=2, lr=1e-3, steps=3, lr_schedule="cosine",
                        vcpo=VcpoConfig(enabled=True, base_ess_ratio=1.0))
    trainer = Learner(model, cfg, LossConfig())
    seen = record_update_lrs(trainer)
    scales = []
    for k in range(1, 4):
        stats = trainer.step(batch)
        scheduled = 1e-3 * lr_factor(k, total=3, warmup=0, shape="cosine", min_ratio=0.0)
        assert stats["lr"] == pytest.approx(scheduled)
        assert stats["lr_effective"] == pytest.approx(scheduled * stats["lr_scale"])
        scales.append(stats["lr_scale"])
        # the ESS scaling is undone after each update: the group holds the next step's scheduled lr
        next_lr = 1e-3 * lr_factor(k + 1, total=3, warmup=0, shape="cosine", min_ratio=0.0)
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(next_lr)
    assert any(s < 1 for s in scales), "ESS never scaled the lr: test is vacuous"
    assert all(lr <= 1e-3 + 1e-12 for lr in seen)


def test_scheduler_state_round_trips_and_a_reloaded_optimizer_is_rescheduled(policy_and_batch):
    model, batch = policy_and_batch
    cfg = TrainerConfig(n_minibatches=1, lr=1e-3, steps=5, lr_schedule="cosine")

    def factor(k):
        return lr_factor(k, total=5, warmup=0, shape="cosine", min_ratio=0.0)

    first = Learner(model, cfg, LossConfig())
    first.step(batch)
    saved = first.state_dict()
    first.step(batch)
    second = Learner(model, cfg, LossConfig())
    second.load_state_dict(saved)
    assert second.scheduler.last_epoch == 1
    assert second.step(batch)["lr"] == pytest.approx(1e-3 * factor(2))
    # the optimizer state of step 1 loaded again (an ESS rollback): step 3 still gets step 3's lr
    second.load_optimizer_state(saved["optimizer"])
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-3 * factor(2)) != 1e-3 * factor(3)
    assert second.step(batch)["lr"] == pytest.approx(1e-3 * factor(3))


def test_resume_refuses_a_longer_decaying_schedule():
    decaying = TrainerConfig(steps=10, lr_schedule="cosine")
    state = {"schedule": ["cosine", 0, 0.0, 10]}
    check_schedule(decaying, state)
    with pytest.raises(ConfigError, match="trainer.steps"):
        check_schedule(TrainerConfig(steps=20, lr_schedule="cosine"), state)
    check_schedule(TrainerConfig(steps=20), {"schedule": ["constant", 0, 0.0, None]})  # constant: may grow


@pytest.mark.parametrize("override, key", [("trainer.min_lr_ratio=1.5", "trainer.min_lr_ratio"),
                                           ("trainer.warmup_steps=-1", "trainer.warmup_steps"),
                                           ("trainer.lr_schedule=step", "trainer.lr_schedule")])
def test_bad_schedule_settings(override, key):
    with pytest.raises(ConfigError, match=key):
        load_config(None, [override])
