"""The agent suite: sync against async on multi-turn episodes with long-tailed lengths, where a
synchronous step waits for its slowest episode and asynchrony should pay most.

Every cell starts from the ``guess-tail`` preset (task ``guess_tail``: guess a number from 1 to 2^k
with P(k) ∝ k^(−2), k = 2..8, so bisection takes about k turns; asyncrl.envs.guess), or from the
``--config`` file instead. Arms:

* ``sync``: sync GRPO (the a3po suite's sync arm);
* ``async-loglinear-k<K>``: A-3PO (decoupled PPO, log-linear proximal policy) at look-ahead
  W = K (``async.max_staleness`` = ``async.max_ahead`` = K), for each K of ``--ks`` (1, 2, 4);
* ``async-recompute-k<K>``: decoupled PPO with the proximal policy recomputed, at one K
  (:data:`RECOMPUTE_K`, or the smallest ``--ks`` when that leaves it out): what the exact
  proximal pass costs where episodes are long.

The report (benchmarks.bench.agent_report) sets each async arm's throughput against sync's and
against the ideal overlap that sync's own generation and training times allow.
"""

from __future__ import annotations

from benchmarks.bench import wording as W
from benchmarks.bench.agent_report import METHOD_ORDER, build_agent
from benchmarks.bench.cells import Cell, check_known, overrides, params, under_config
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells

PRESET = "guess-tail"  # the long-tailed guess game; --config replaces it
AGENT_KS = (1, 2, 4)
RECOMPUTE_K = 2
ARMS: dict[str, dict[str, object]] = {
    "sync": {"run.mode": "sync", "trainer.prox": "behav", "loss.name": "ppo"},
    "async-loglinear": {"run.mode": "async", "trainer.prox": "loglinear", "loss.name": "decoupled"},
    "async-recompute": {"run.mode": "async", "trainer.prox": "recompute", "loss.name": "decoupled"},
}
# --quick: one seed of a few short steps on few prompts, so that the five cells finish in a minute
# or two on two cores (it runs in the test suite); the warm start is the preset's, built once
QUICK = {"trainer.steps": 4, "rollout.prompts_per_step": 4, "rollout.samples_per_prompt": 4,
         "trainer.n_minibatches": 2, "eval.n_problems": 16, "eval.samples": 1, "eval.every": 0}
# cells that share a seed share their step-0 evaluation
FULL = {"eval.cache_initial": True}


def recompute_k(ks) -> int:
    """The one K the recompute arm runs at: RECOMPUTE_K when asked for, else the smallest K."""
    return RECOMPUTE_K if RECOMPUTE_K in ks else min(ks)


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    methods = request.methods or list(ARMS)
    check_known("--methods", methods, ARMS)
    ks = list(request.ks) if request.ks is not None else list(AGENT_KS)
    bad = [k for k in ks if k < 1]
    if bad or not ks:
        raise ValueError(f"--ks: the agent suite's async arms need K >= 1, got {bad[0] if bad else 'none'}")
    config = request.config or PRESET
    # the suite's full defaults give way to what the starting file sets (the preset sets none of them)
    base = under_config(dict(suite.quick if request.quick else suite.full), config, request.quick)
    cells = []
    for method in methods:
        if method == "sync":  # the reference arm has no look-ahead to vary
            cells.append(Cell(f"sync-s{seed}", "sync", seed, "train",
                              overrides(base, ARMS["sync"], {"run.seed": seed}) + request.extra,
                              params(ARMS["sync"]), config))
            continue
        for k in ks if method == "async-loglinear" else [recompute_k(ks)]:
            switches = {**ARMS[method], "async.max_staleness": k, "async.max_ahead": k}
            cells.append(Cell(f"{method}-k{k}-s{seed}", f"{method}-k{k}", seed, "train",
                              overrides(base, switches, {"run.seed": seed}) + request.extra,
                              params(switches), config))
    return cells


SUITE = Suite(
    name="agent", help="sync vs async A-3PO (W = K = 1, 2, 4) vs recompute on long-tailed multi-turn episodes",
    cells=_cells, quick=QUICK, full=FULL, seeds=10,
    report=build_agent, headline=W.headline_agent, method_order=METHOD_ORDER,
    takes=frozenset({"ks", "config"}), validate=validate_train_cells)
