"""Every loss × proximal pairing the benchmarks run gives the losses, gradients, proximal log-probs
and diagnostics recorded in data/prox_golden.pt, bit for bit.

The golden file was written from the code before the proximal strategies had one home (commit
a41c1e1: ``Learner._prox_setup`` and the per-minibatch branches of ``Learner.step``, with the model's
forward passes replaced by the fixed tensors of prox_golden_cases.py). This test drives the same
calls ``Learner.step`` makes now: the strategy's plan once per step, its minibatch rows, policy_loss.

The file may have been written on another CPU, whose vectorized exp/log round differently in the
last bits: values must agree to float32 rounding (``FLOAT32_TOLERANCE`` in prox_golden_cases.py,
with its reasoning), not bit for bit. Bit-identity is checked where both sides run in one process
(async K = 0 ≡ sync, resume ≡ uninterrupted). To re-record after an intended change of the math:
``python tests/objectives/test_prox_golden.py --write``.
"""

from __future__ import annotations

import sys

import pytest
import torch

from asyncrl.objectives import policy_loss, prox_strategy

try:
    from .prox_golden_cases import CURRENT_VERSION, GOLDEN_PATH, PAIRINGS, build_inputs, close, minibatch_sizes
except ImportError:  # run as a script (--write)
    from prox_golden_cases import CURRENT_VERSION, GOLDEN_PATH, PAIRINGS, build_inputs, close, minibatch_sizes


def trainer_path(loss_name: str, prox: str, params: dict, inp: dict) -> dict:
    """What Learner.step computes on these tensors, minibatch by minibatch, concatenated."""
    strategy = prox_strategy(prox)
    exact = inp["recomputed"] if strategy.needs_forward else None  # the extra no-grad forward pass
    plan = strategy.plan(inp["behav_logp"], inp["versions"], CURRENT_VERSION, exact)
    sizes = minibatch_sizes(len(inp["logp"]))
    losses, grads, proxes, stats = [], [], [], []
    for i, size in enumerate(sizes):
        start = sum(sizes[:i])
        mb = {key: value[start:start + size] for key, value in inp.items()}
        logp = mb["logp"].clone().requires_grad_()
        prox_logp = plan.minibatch(start, start + size, mb["behav_logp"], logp, mb["versions"])
        loss, loss_stats = policy_loss(loss_name, logp, mb["behav_logp"], mb["advantages"], mb["completion_mask"],
                                       prox_logp=prox_logp, versions=mb["versions"], current_version=CURRENT_VERSION,
                                       group_ids=mb["group_ids"], **params)
        (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
        losses.append(loss.detach())
        grads.append(torch.zeros_like(logp) if grad is None else grad)
        # outside the mask a proximal log-prob is never read (the loss zeroes it)
        proxes.append(None if prox_logp is None else torch.where(mb["completion_mask"], prox_logp, 0.0))
        stats.append(loss_stats)
    names = sorted(stats[0])
    return {
        "loss": torch.stack(losses),
        "grad": torch.cat(grads),
        "prox_logp": None if proxes[0] is None else torch.cat(proxes),
        "stat_names": names,
        "stats": torch.stack([torch.stack([s[k].float() for k in names]) for s in stats]),
    }


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(GOLDEN_PATH)


def test_golden_covers_the_benchmark_pairings(golden):
    assert set(golden["cases"]) == set(PAIRINGS)
    pairs = {(loss, prox) for loss, prox, _ in PAIRINGS.values()}
    assert {("decoupled", "loglinear"), ("decoupled", "recompute"), ("ppo", "behav"), ("decoupled", "linear")} <= pairs
    staleness = CURRENT_VERSION - golden["inputs"]["versions"][golden["inputs"]["completion_mask"]]
    assert set(staleness.tolist()) == set(range(17))
    assert not golden["inputs"]["completion_mask"].all()  # padded tails


@pytest.mark.parametrize("case", sorted(PAIRINGS))
def test_pairing_reproduces_the_golden_values(golden, case):
    loss_name, prox, params = PAIRINGS[case]
    want = golden["cases"][case]
    got = trainer_path(loss_name, prox, params, golden["inputs"])
    assert got["stat_names"] == want["stat_names"]
    assert (got["prox_logp"] is None) == (want["prox_logp"] is None)
    for key in ("loss", "grad", "prox_logp", "stats"):
        if want[key] is not None:
            agree, why = close(got[key], want[key])
            assert agree, f"{case}: {key} differs from the golden value: {why}"


def _last_bit(tensor: torch.Tensor, direction: float) -> torch.Tensor:
    """Every element moved by one float32 step (another machine's rounding, at its largest)."""
    return torch.nextafter(tensor, torch.full_like(tensor, direction))


@pytest.mark.parametrize("case", ["decoupled", "recompute", "a3po-sync", "cispo"])
def test_a_fixture_rounded_elsewhere_still_passes(golden, case):
    """A fixture regenerated on another CPU, simulated by moving every golden value by one float32
    step (up, then down), agrees with this machine's values."""
    loss_name, prox, params = PAIRINGS[case]
    got = trainer_path(loss_name, prox, params, golden["inputs"])
    for direction in (float("inf"), float("-inf")):
        for key in ("loss", "grad", "prox_logp", "stats"):
            if golden["cases"][case][key] is not None:
                agree, why = close(got[key], _last_bit(golden["cases"][case][key], direction))
                assert agree, f"{case}: {key}: {why}"


def test_a_real_change_fails(golden):
    """The comparison is not too loose: a clip bound moved by 1e-3, an α rule replaced (linear
    interpolation for log-linear) and one gradient element off by 1e-4 relative all fail it."""
    want = golden["cases"]["decoupled"]
    moved_clip = trainer_path("decoupled", "loglinear", {"eps_low": 0.199}, golden["inputs"])
    assert not all(close(moved_clip[k], want[k])[0] for k in ("loss", "grad", "stats"))
    other_alpha = trainer_path("decoupled", "linear", {}, golden["inputs"])
    assert not close(other_alpha["prox_logp"], want["prox_logp"])[0]
    grad = want["grad"].clone()
    i = int(grad.abs().argmax())
    grad.view(-1)[i] *= 1 + 1e-4
    assert not close(grad, want["grad"])[0]
    assert close(want["grad"], want["grad"])[0]


def _write() -> None:
    inp = build_inputs()
    golden = {"inputs": inp, "torch": str(torch.__version__), "cpu": torch.backends.cpu.get_cpu_capability(),
              "cases": {name: trainer_path(loss, prox, params, inp) for name, (loss, prox, params) in PAIRINGS.items()}}
    torch.save(golden, GOLDEN_PATH)


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
