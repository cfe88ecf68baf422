"""The a3po suite: sync GRPO vs async decoupled PPO with the proximal policy recomputed vs A-3PO
(log-linear proximal policy), as in the A-3PO paper's Table 1 and Figs. 1-6.

``--ks`` runs the async methods at look-ahead W = K for each K instead of W = 1, so data arrive
about K versions stale and the approximation is exercised; A-3PO then also logs its error against
the exact proximal log-probs on every ``A3PO_ERROR_EVERY``-th step.
"""

from __future__ import annotations

from benchmarks.bench import wording as W
from benchmarks.bench.a3po_report import build_a3po
from benchmarks.bench.cells import Cell, check_known, overrides, params
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells
from asyncrl.objectives import prox_strategy

# The three A-3PO arms; each equals a packaged preset (sync, recompute, a3po: a test checks they agree).
A3PO_METHODS: dict[str, dict[str, object]] = {
    "sync": {"run.mode": "sync", "trainer.prox": "behav", "loss.name": "ppo"},
    "async-recompute": {"run.mode": "async", "async.max_staleness": 4, "async.max_ahead": 1,
                        "trainer.prox": "recompute",
                        "loss.name": "decoupled"},
    "async-loglinear": {"run.mode": "async", "async.max_staleness": 4, "async.max_ahead": 1,
                        "trainer.prox": "loglinear",
                        "loss.name": "decoupled"},
}
# A-3PO with its α floored (objectives/prox/loglinear_floor.py): not a preset, an arm to name with
# --methods, e.g. beside the three at high staleness (--ks 4,8,16)
A3PO_VARIANTS: dict[str, dict[str, object]] = {
    "async-a3po-floor": {**A3PO_METHODS["async-loglinear"], "trainer.prox": "loglinear_floor"},
}
ALL_METHODS = {**A3PO_METHODS, **A3PO_VARIANTS}
# A-3PO's error against the exact proximal log-probs is measured on every 10th step, so its wall
# time carries about a tenth of the extra pass it exists to avoid
A3PO_ERROR_EVERY = 10
QUICK_COMMON = {"eval.n_problems": 32, "eval.samples": 1, "eval.every": 0}


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    methods = request.methods or list(A3PO_METHODS)
    check_known("--methods", methods, ALL_METHODS)
    base, tail = suite.base(request), request.extra
    if request.ks is not None:
        return _stale_cells(methods, seed, request.ks, base, tail, request.config)
    return [Cell(f"{method}-s{seed}", method, seed, "train",
                 overrides(base, ALL_METHODS[method], {"run.seed": seed}) + tail,
                 params(ALL_METHODS[method]), request.config) for method in methods]


def _stale_cells(methods: list[str], seed: int, ks, base: dict, tail: tuple, config: str | None) -> list[Cell]:
    """Where the approximation is exercised: data arrive about K versions stale (W = K), not 1, so
    the log-linear proximal policy differs from the behavior policy."""
    bad = [k for k in ks if k < 1]
    if bad:
        raise ValueError(f"--ks: the a3po suite's async runs need K >= 1, got {bad[0]}")
    cells = []
    for method in methods:
        if method == "sync":  # the reference arm has no staleness to vary
            cells.append(Cell(f"sync-s{seed}", "sync", seed, "train",
                              overrides(base, A3PO_METHODS["sync"], {"run.seed": seed}) + tail,
                              params(A3PO_METHODS["sync"]), config))
            continue
        for k in ks:
            switches = {**ALL_METHODS[method], "async.max_staleness": k, "async.max_ahead": k}
            if prox_strategy(str(switches["trainer.prox"])).approximate:  # measured on 1 step in 10: the timing stays A-3PO's
                switches["trainer.prox_error"] = True
                switches["trainer.prox_error_every"] = A3PO_ERROR_EVERY
            cells.append(Cell(f"{method}-k{k}-s{seed}", f"{method}-k{k}", seed, "train",
                              overrides(base, switches, {"run.seed": seed}) + tail, params(switches), config))
    return cells


SUITE = Suite(
    name="a3po", help="sync vs async-recompute vs A-3PO (the A-3PO paper's comparison)",
    cells=_cells, quick={**QUICK_COMMON, "trainer.steps": 8},
    # cells that share a seed share their step-0 evaluation
    full={"eval.cache_initial": True}, seeds=3,
    report=build_a3po, headline=W.headline_a3po,
    method_order=("sync", "async-recompute", "async-loglinear", *A3PO_VARIANTS),
    takes=frozenset({"ks", "config", "repeats"}), validate=validate_train_cells)
