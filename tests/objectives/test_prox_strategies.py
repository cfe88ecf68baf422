"""The proximal-strategy registry and each loss's proximal policy (docs/objectives.md)."""

from __future__ import annotations

import pytest
import torch

from asyncrl.objectives import (
    LOSSES,
    PROX_STRATEGIES,
    consistent_prox,
    natural_prox,
    prox_pairing_error,
    prox_strategy,
)
from asyncrl.objectives.prox import ProxStrategy

from .helpers import t


def test_registry_holds_the_strategies_and_their_declarations():
    assert list(PROX_STRATEGIES) == ["recompute", "loglinear", "linear", "behav", "none", "loglinear_floor",
                                     "loglinear_ess"]
    assert [name for name, s in PROX_STRATEGIES.items() if s.needs_forward] == ["recompute"]
    assert [name for name, s in PROX_STRATEGIES.items() if not s.gives_prox] == ["none"]
    assert [name for name, s in PROX_STRATEGIES.items() if s.approximate] == ["loglinear", "linear", "behav",
                                                                                "loglinear_floor", "loglinear_ess"]
    with pytest.raises(ValueError, match="trainer.prox: must be one of recompute, loglinear, .*; got 'sometimes'"):
        prox_strategy("sometimes")


def test_recompute_hands_each_minibatch_its_rows_of_the_exact_logprobs():
    exact = torch.arange(12.0).reshape(4, 3)
    behav = torch.zeros(4, 3)
    versions = torch.zeros(4, 3, dtype=torch.long)
    plan = PROX_STRATEGIES["recompute"].plan(behav, versions, 5, exact)
    assert torch.equal(plan.minibatch(1, 3, behav[1:3], behav[1:3], versions[1:3]), exact[1:3])
    with pytest.raises(ValueError, match="exact_logp"):
        PROX_STRATEGIES["recompute"].plan(behav, versions, 5)


def test_none_gives_no_prox_and_behav_gives_the_behavior_logprobs():
    behav = t([[-1.0, -2.0]]).to(torch.bfloat16)
    logp = t([[-3.0, -3.0]])
    versions = torch.tensor([[0, 4]])
    assert PROX_STRATEGIES["none"].plan(behav, versions, 4).minibatch(0, 1, behav, logp, versions) is None
    out = PROX_STRATEGIES["behav"].plan(behav, versions, 4).minibatch(0, 1, behav, logp, versions)
    assert out.dtype == torch.float32 and torch.equal(out, behav.float())


def test_a_new_strategy_is_a_subclass_and_one_registry_line(monkeypatch):
    class Current(ProxStrategy):  # π_prox = sg(π_θ): r = 1, the clip never acts
        def minibatch(self, rows, behav_logp, logp, versions, current_version):
            return logp.detach().float()

    monkeypatch.setitem(PROX_STRATEGIES, "current", Current())
    logp = t([[-1.0, -2.0]])
    plan = prox_strategy("current").plan(logp, torch.zeros(1, 2, dtype=torch.long), 0)
    assert torch.equal(plan.minibatch(0, 1, logp, logp, torch.zeros(1, 2, dtype=torch.long)), logp)
    assert "current" in consistent_prox("ppo") and "current" in consistent_prox("decoupled")


# each loss's natural proximal policy: the atlas ran every loss with these
NATURAL = {"decoupled": "loglinear", "ppo": "none", "tis": "none", "mis": "none", "cispo": "none", "opsm": "none",
           "m2po": "none", "gspo": "none", "vaco": "none", "reinforce": "none", "ppo_kl": "none", "spo": "none",
           "decoupled_bounded": "loglinear", "a3po_seq": "loglinear", "vespo": "none", "dppo": "none",
           "dppo_kl": "none", "sapo": "none"}


def test_natural_prox_of_every_loss():
    assert {name: natural_prox(name) for name in LOSSES} == NATURAL
    with pytest.raises(ValueError, match="loss.name: must be one of ppo, .*; got 'nope'"):
        natural_prox("nope")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_natural_prox_is_consistent_and_registered(name):
    assert natural_prox(name) in consistent_prox(name)
    assert set(consistent_prox(name)) <= set(PROX_STRATEGIES)
    assert prox_pairing_error(name, natural_prox(name)) is None


def test_pairing_rule_from_what_the_loss_reads():
    # decoupled is built on π_prox: every strategy that gives one, and not none
    for name in ("decoupled", "decoupled_bounded", "a3po_seq"):
        assert consistent_prox(name) == ("recompute", "loglinear", "linear", "behav", "loglinear_floor", "loglinear_ess")
    assert "natural one: loglinear" in prox_pairing_error("decoupled", "none")
    # m2po, vaco, reinforce and vespo act on π_θ/π_behav alone: an extra forward pass would be computed for
    # nothing; an approximation is one fused op and ignored (so the default trainer.prox still runs them)
    for name in ("m2po", "vaco", "reinforce", "vespo"):
        assert consistent_prox(name) == ("loglinear", "linear", "behav", "none", "loglinear_floor", "loglinear_ess")
        assert "for nothing" in prox_pairing_error(name, "recompute")
    # the anchored losses run a coupled form without π_prox and a decoupled one with it
    for name in ("ppo", "tis", "mis", "cispo", "opsm", "gspo", "ppo_kl", "spo", "dppo", "dppo_kl", "sapo"):
        assert consistent_prox(name) == tuple(PROX_STRATEGIES)


def test_every_pairing_the_benchmarks_run_is_consistent():
    from .prox_golden_cases import PAIRINGS

    for loss, prox, _ in PAIRINGS.values():
        assert prox_pairing_error(loss, prox) is None, (loss, prox)


def test_config_refuses_an_inconsistent_pairing_in_one_line_naming_both_fields():
    from asyncrl.config import ConfigError
    from asyncrl.runtime.validate import load_run_config

    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["loss.name=decoupled", "trainer.prox=none"])
    message = str(err.value)
    assert "trainer.prox" in message and "loss.name='decoupled'" in message and "\n" not in message
    with pytest.raises(ConfigError, match="trainer.prox.*loss.name='vaco'.*use loglinear, linear, behav, none"):
        load_run_config(None, ["loss=vaco", "trainer.prox=recompute"])
    with pytest.raises(ConfigError, match="trainer.prox: must be one of recompute, loglinear, linear, behav, none"):
        load_run_config(None, ["trainer.prox=sometimes"])
    for loss, prox, params in [("decoupled", "recompute", {}), ("ppo", "behav", {}), ("vaco", "none", {}),
                               ("vaco", "loglinear", {})]:
        cfg = load_run_config(None, [f"loss.name={loss}", f"trainer.prox={prox}"])
        assert (cfg.loss.name, cfg.trainer.prox) == (loss, prox)


def test_cli_refuses_decoupled_without_a_proximal_policy(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "loss.name=decoupled", "trainer.prox=none"],
                          check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "trainer.prox" in lines[0] and "loss.name='decoupled'" in lines[0]
    assert not any(tmp_path.iterdir())  # refused before anything ran
