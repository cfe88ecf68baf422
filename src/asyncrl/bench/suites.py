"""Benchmark suites as data: each suite is a list of cells (method × seed [× K]), each cell one
training run described by dotted config overrides. The runner executes cells; the report turns
their summaries into figures. Nothing here runs anything.

Suites:
  a3po      sync vs async-recompute vs async-loglinear (A-3PO Table 1, Figs. 1-6)
  atlas     every loss with its natural proximal choice × exact lag K (simulated mode)
  peer-trl  TRL's GRPOTrainer beside asyncrl sync and async-loglinear, same model/task/batches
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The three A-3PO presets (configs/<name>.yaml hold the same switches; a test checks they agree).
A3PO_METHODS: dict[str, dict[str, object]] = {
    "sync": {"run.mode": "sync", "trainer.prox": "behav", "loss.name": "ppo"},
    "async-recompute": {"run.mode": "async", "async.max_staleness": 4, "async.max_ahead": 1,
                        "trainer.prox": "recompute",
                        "loss.name": "decoupled"},
    "async-loglinear": {"run.mode": "async", "async.max_staleness": 4, "async.max_ahead": 1,
                        "trainer.prox": "loglinear",
                        "loss.name": "decoupled"},
}

# Atlas: each loss with the proximal policy it is meant to run with. decoupled is A-3PO (loglinear,
# no extra forward pass); the others act on ρ = π_θ/π_behav directly ("none": the coupled / bypass
# form), which is how they are used on stale data in their papers. opsm's δ has no published
# default (TRL's example value is used).
ATLAS_LOSSES: dict[str, dict[str, object]] = {
    "ppo": {"loss.name": "ppo", "trainer.prox": "none"},
    "decoupled": {"loss.name": "decoupled", "trainer.prox": "loglinear"},
    "tis": {"loss.name": "tis", "trainer.prox": "none"},
    "mis": {"loss.name": "mis", "trainer.prox": "none"},
    "cispo": {"loss.name": "cispo", "trainer.prox": "none"},
    "opsm": {"loss.name": "opsm", "trainer.prox": "none", "loss.params.delta": 0.5},
    "m2po": {"loss.name": "m2po", "trainer.prox": "none"},
    "gspo": {"loss.name": "gspo", "trainer.prox": "none"},
    "vaco": {"loss.name": "vaco", "trainer.prox": "none"},
    "reinforce": {"loss.name": "reinforce", "trainer.prox": "none"},
    "ppo_kl": {"loss.name": "ppo_kl", "trainer.prox": "none"},
    "spo": {"loss.name": "spo", "trainer.prox": "none"},
}
# Two more rows of the same table: plain importance-weighted REINFORCE (TIS in its bypass form with
# a cap above e^20, the bound on any log-weight: ρ·A·∇ℓ, nothing truncated), and decoupled PPO with the exact proximal
# policy recomputed by an extra forward pass (the baseline A-3PO approximates).
ATLAS_LOSSES["is_reinforce"] = {"loss.name": "tis", "trainer.prox": "none", "loss.params.cap": 1e9}
ATLAS_LOSSES["recompute"] = {"loss.name": "decoupled", "trainer.prox": "recompute"}
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

# a3po --ks: A-3PO's error against the exact proximal log-probs is measured on every 10th step, so
# its wall time carries about a tenth of the extra pass it exists to avoid
A3PO_ERROR_EVERY = 10

PEER_METHODS: dict[str, dict[str, object]] = {
    "trl-grpo": {"run.mode": "sync"},  # run by asyncrl.bench.peer_trl (TRL decides the rest)
    "asyncrl-sync": A3PO_METHODS["sync"],
    "asyncrl-async-loglinear": A3PO_METHODS["async-loglinear"],
}

# --quick: a few minutes on 2 cores. Small eval, few steps; enough to exercise every code path.
QUICK_COMMON = {"eval.n_problems": 32, "eval.samples": 1, "eval.every": 0}
QUICK = {
    "a3po": {**QUICK_COMMON, "trainer.steps": 8},
    "atlas": {**QUICK_COMMON, "trainer.steps": 8, "rollout.prompts_per_step": 4},
    "peer-trl": {**QUICK_COMMON, "trainer.steps": 3},
}
# Full runs: the paper-style comparison at the default 200 steps; the atlas and the TRL peer are
# shorter so that the whole matrix fits in an afternoon on a laptop. These are defaults under a
# --config file: a key the file sets (the staleness testbed's steps) wins over them. Cells that
# share a seed share their step-0 evaluation (eval.cache_initial).
FULL = {
    "a3po": {"eval.cache_initial": True},
    # atlas cells: the suite's report is the product; a per-run report.html and tracker files are not
    "atlas": {"trainer.steps": 100, "eval.every": 0, "eval.cache_initial": True, "run.report": False,
              "run.report_to": "[]"},
    "peer-trl": {"trainer.steps": 100, "eval.every": 25},
}
DEFAULT_SEEDS = {"a3po": 3, "atlas": 3, "peer-trl": 1}
QUICK_SEEDS = {"a3po": 1, "atlas": 1, "peer-trl": 1}
SUITES = ("a3po", "atlas", "peer-trl")


@dataclass(frozen=True)
class Cell:
    """One training run of a suite."""

    name: str  # unique, also the run directory name: "<method>-s<seed>" or "<method>-k<K>-s<seed>"
    method: str
    seed: int
    runner: str  # "train" (asyncrl train) or "trl" (asyncrl.bench.peer_trl)
    overrides: tuple[str, ...]  # dotted key=value, applied on top of the defaults
    params: dict = field(default_factory=dict, compare=False)  # what varies across cells, for the report
    config: str | None = None  # YAML config file under the overrides (``asyncrl bench --config``)


def _overrides(*parts: dict[str, object]) -> tuple[str, ...]:
    merged: dict[str, object] = {}
    for part in parts:
        merged.update(part)
    return tuple(f"{key}={_render(value)}" for key, value in merged.items())


def _render(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _params(switches: dict[str, object], **extra) -> dict:
    short = {"run.mode": "mode", "trainer.prox": "prox", "loss.name": "loss", "async.max_staleness": "K",
             "async.max_ahead": "W"}
    return {**{short[k]: v for k, v in switches.items() if k in short}, **extra}


def build_cells(suite: str, *, quick: bool = False, seeds: int | None = None,
                methods: list[str] | None = None, ks: list[int] | None = None,
                extra: list[str] | None = None, config: str | None = None,
                rows: list[str] | None = None) -> list[Cell]:
    """The cells of ``suite``, in run order (seed-major, so a partial run covers every method).

    With ``ks``, the a3po suite runs its async methods at look-ahead W = K = each given K, A-3PO
    also logging its error against the exact proximal log-probs (``trainer.prox_error``).
    methods / ks / rows (atlas) filter the suite's matrix (unknown names raise ValueError); extra overrides apply
    to every cell last, so they win; ``config`` is a YAML file every cell starts from (the suite's
    switches and ``extra`` override it).
    """
    if suite not in SUITES:
        raise ValueError(f"suite: unknown {suite!r} (known: {', '.join(SUITES)})")
    table = {"a3po": A3PO_METHODS, "atlas": ATLAS_LOSSES, "peer-trl": PEER_METHODS}[suite]
    chosen = methods or list(table)
    unknown = [m for m in chosen if m not in table]
    if unknown:
        raise ValueError(f"--methods: unknown {', '.join(unknown)} for suite {suite} (known: {', '.join(table)})")
    n_seeds = seeds if seeds is not None else (QUICK_SEEDS if quick else DEFAULT_SEEDS)[suite]
    if n_seeds < 1:
        raise ValueError("--seeds: must be >= 1")
    base = _under_config((QUICK if quick else FULL)[suite], config, quick)
    tail = tuple(extra or ())
    cells = []
    for seed in range(n_seeds):
        if suite == "atlas":
            cells += _atlas_cells(chosen, seed, ks if ks is not None else (ATLAS_QUICK_KS if quick else ATLAS_KS),
                                  rows if rows is not None else (("lag",) if quick else ATLAS_ROWS), base, tail,
                                  config)
        elif suite == "a3po" and ks is not None:
            cells += _a3po_stale_cells(chosen, seed, ks, base, tail, config)
        else:
            for method in chosen:
                runner = "trl" if method == "trl-grpo" else "train"
                cells.append(Cell(f"{method}-s{seed}", method, seed, runner,
                                  _overrides(base, table[method], {"run.seed": seed}) + tail,
                                  _params(table[method]), config))
    return cells


def _under_config(base: dict[str, object], config: str | None, quick: bool) -> dict[str, object]:
    """The full suite's defaults without the keys ``config`` sets (the file's choice wins); --quick
    keeps all of its own, which exist to make the run short."""
    if config is None or quick:
        return base
    from asyncrl.config_loader import read_yaml
    from asyncrl.presets import resolve_config_path

    data = read_yaml(resolve_config_path(config))

    def is_set(key: str) -> bool:
        node: object = data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    return {key: value for key, value in base.items() if not is_set(key)}


def _atlas_cells(methods: list[str], seed: int, ks, rows, base: dict, tail: tuple, config: str | None
                 ) -> list[Cell]:
    """One seed's atlas cells: the lag row (every method × K), then the buffer and forward-lag rows
    (their methods among ``methods``)."""
    unknown = [r for r in rows if r not in ATLAS_ROWS]
    if unknown:
        raise ValueError(f"--rows: unknown {', '.join(unknown)} (known: {', '.join(ATLAS_ROWS)})")
    cells = []

    def add(name: str, method: str, switches: dict, **params) -> None:
        switches = {"run.mode": "simulated", **ATLAS_LOSSES[method], **switches}
        cells.append(Cell(f"{name}-s{seed}", method, seed, "train",
                          _overrides(base, switches, {"run.seed": seed}) + tail,
                          _params(ATLAS_LOSSES[method], mode="simulated", **params), config))

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
                add(f"{method}-mb{m}", method, {"async.lag": 0, "trainer.n_minibatches": m}, row="forward",
                    M=m)
    return cells


def _a3po_stale_cells(methods: list[str], seed: int, ks, base: dict, tail: tuple, config: str | None
                      ) -> list[Cell]:
    """The a3po suite where the approximation is exercised: data arrive about K versions stale
    (W = K), not 1, so the log-linear proximal policy differs from the behavior policy."""
    cells = []
    for k in ks:
        if k < 1:
            raise ValueError(f"--ks: the a3po suite's async runs need K >= 1, got {k}")
    for method in methods:
        if method == "sync":
            cells.append(Cell(f"sync-s{seed}", "sync", seed, "train",
                              _overrides(base, A3PO_METHODS["sync"], {"run.seed": seed}) + tail,
                              _params(A3PO_METHODS["sync"]), config))
            continue
        for k in ks:
            switches = {**A3PO_METHODS[method], "async.max_staleness": k, "async.max_ahead": k}
            if switches["trainer.prox"] == "loglinear":  # measured on 1 step in 10: the timing stays A-3PO's
                switches["trainer.prox_error"] = True
                switches["trainer.prox_error_every"] = A3PO_ERROR_EVERY
            cells.append(Cell(f"{method}-k{k}-s{seed}", f"{method}-k{k}", seed, "train",
                              _overrides(base, switches, {"run.seed": seed}) + tail, _params(switches), config))
    return cells
