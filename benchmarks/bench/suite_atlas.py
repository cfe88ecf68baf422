"""The staleness atlas: every loss with the proximal policy it is meant to run with, × exact lag K
(simulated mode), plus a policy-buffer row and a forward-lag row for the arms where they tell most.
"""

from __future__ import annotations

from benchmarks.bench import wording as W
from benchmarks.bench.atlas_report import build_atlas
from benchmarks.bench.cells import Cell, check_known, overrides, params
from benchmarks.bench.suite_a3po import QUICK_COMMON
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells

# The loss parameters the atlas sets beyond a loss's defaults. opsm's δ has no published default
# (TRL's example value is used).
ATLAS_PARAMS: dict[str, dict[str, object]] = {"opsm": {"loss.params.delta": 0.5}}


def atlas_losses() -> dict[str, dict[str, object]]:
    """Every registered loss with the proximal policy it declares it is meant to run with
    (:func:`asyncrl.objectives.natural_prox`): decoupled is A-3PO (loglinear, no extra forward
    pass); the others act on ρ = π_θ/π_behav directly ("none": the coupled / bypass form), which is
    how they are used on stale data in their papers. So a new loss joins the atlas when it is
    registered. Two more arms: plain importance-weighted REINFORCE (TIS in its bypass form with a cap
    above e^20, the bound on any log-weight: ρ·A·∇ℓ, nothing truncated), and decoupled PPO with the
    exact proximal policy recomputed by an extra forward pass (the baseline A-3PO approximates); and A-3PO
    with the α floor (``loglinear_floor``) or the ESS-chosen α (``loglinear_ess``)."""
    from asyncrl.objectives import LOSSES, natural_prox

    arms = {name: {"loss.name": name, "trainer.prox": natural_prox(name), **ATLAS_PARAMS.get(name, {})}
            for name in LOSSES}
    arms["is_reinforce"] = {"loss.name": "tis", "trainer.prox": "none", "loss.params.cap": 1e9}
    arms["recompute"] = {"loss.name": "decoupled", "trainer.prox": "recompute"}
    # A-3PO with its α bounded from below, the proximal-side variants (the loss-side ones,
    # decoupled_bounded and a3po_seq, are registered losses and join above).
    arms["a3po_floor"] = {"loss.name": "decoupled", "trainer.prox": "loglinear_floor"}
    arms["a3po_ess"] = {"loss.name": "decoupled", "trainer.prox": "loglinear_ess"}
    # The floor's sweep: α_min = 1/8 and 1/2 beside the default 1/4.
    for denom in (8, 2):
        arms[f"a3po_floor{denom}"] = {"loss.name": "decoupled", "trainer.prox": "loglinear_floor",
                                      "trainer.prox_params.alpha_min": 1 / denom}
    return arms


ATLAS_LOSSES = atlas_losses()  # the arms at import time (a loss registered later joins the next build)
ATLAS_KS = (0, 1, 2, 4, 8, 16)
ATLAS_QUICK_KS = (0, 2, 8)
# The atlas's other two kinds of staleness, for the arms where they tell most (uncorrected, exact,
# approximate, VACO):
# - "buffer": each batch's behavior policy drawn uniformly from the last N versions (VACO's setup);
# - "forward": K = 0 but M minibatch updates per batch, so the m-th update sees data m - 1 updates
#   old (VACO's forward lag).
ATLAS_ROWS = ("lag", "buffer", "forward")
ATLAS_ROW_LOSSES = ("ppo", "is_reinforce", "recompute", "decoupled", "vaco")
ATLAS_BUFFERS = (4, 8, 16)
ATLAS_MINIBATCHES = (1, 16)  # with the config's own (4 in the presets), which the lag row's K = 0 holds


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    """One seed's cells: the lag row (every method × K), then the buffer and forward-lag rows
    (their methods among the chosen ones)."""
    arms = atlas_losses()
    methods = request.methods or list(arms)
    check_known("--methods", methods, arms)
    ks = request.ks if request.ks is not None else (ATLAS_QUICK_KS if request.quick else ATLAS_KS)
    rows = request.rows if request.rows is not None else (("lag",) if request.quick else ATLAS_ROWS)
    check_known("--rows", rows, ATLAS_ROWS)
    base, cells = suite.base(request), []

    def add(name: str, method: str, switches: dict, **extra) -> None:
        switches = {"run.mode": "simulated", **arms[method], **switches}
        cells.append(Cell(f"{name}-s{seed}", method, seed, "train",
                          overrides(base, switches, {"run.seed": seed}) + request.extra,
                          params(arms[method], mode="simulated", **extra), request.config))

    if "lag" in rows:
        for k in ks:
            if k < 0:
                raise ValueError(f"--ks: K must be >= 0, got {k}")
            for method in methods:
                add(f"{method}-k{k}", method, {"async.lag": k}, row="lag", K=k)
    row_methods = [m for m in methods if m in ATLAS_ROW_LOSSES]
    if "buffer" in rows:
        for n in ATLAS_BUFFERS:
            for method in row_methods:
                add(f"{method}-buf{n}", method, {"async.policy_buffer": n}, row="buffer", N=n)
    if "forward" in rows:
        for m in ATLAS_MINIBATCHES:
            for method in row_methods:
                add(f"{method}-mb{m}", method, {"async.lag": 0, "trainer.n_minibatches": m}, row="forward", M=m)
    return cells


SUITE = Suite(
    name="atlas", help="every loss × exact staleness K (simulated), plus policy-buffer and forward-lag rows",
    cells=_cells, quick={**QUICK_COMMON, "trainer.steps": 8, "rollout.prompts_per_step": 4},
    # the suite's report is the product: no per-run report.html or tracker files
    full={"trainer.steps": 100, "eval.every": 0, "eval.cache_initial": True, "run.report": False,
          "run.report_to": "[]"},
    seeds=3, report=build_atlas, headline=W.headline_atlas, takes=frozenset({"ks", "rows", "config"}),
    in_process=True, validate=validate_train_cells)
