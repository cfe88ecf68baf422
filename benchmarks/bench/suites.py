"""The bench suites: one record per suite, found by name in a registry of import paths.

A suite is data plus two functions: how its cells are built (method × seed [× K ...], each one
training run described by config overrides) and how its report is written. The runner
(:mod:`benchmarks.bench.runner`) runs any suite's cells the same way, and the CLI offers every
registered suite. A new suite is one file defining ``SUITE = Suite(...)`` and one entry in
``SUITES`` (its import path, so a suite is imported only when used): a line here, or, from outside
the package, a plugin module named on the command line as ``run.plugins=[...]``, which ``python -m
benchmarks`` imports before it reads the suite's name and passes on to every cell::

    from benchmarks.bench.suites import SUITES
    SUITES["mine"] = "my_pkg.bench:SUITE"
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench.cells import Cell, under_config
from asyncrl.core.import_path import resolve
from asyncrl.core.registry import Registry

# name -> "module:attribute" of its Suite; imported only when the suite is used
SUITES: Registry[str] = Registry("suite", {
    "a3po": "benchmarks.bench.suite_a3po:SUITE",
    "atlas": "benchmarks.bench.suite_atlas:SUITE",
    "peer-trl": "benchmarks.bench.suite_peer_trl:SUITE",
    "control": "benchmarks.bench.suite_control:SUITE",
    "scale": "benchmarks.bench.suite_scale:SUITE",
    "study": "benchmarks.bench.suite_study:SUITE",
    "agent": "benchmarks.bench.suite_agent:SUITE",
})
OPTIONS = ("ks", "rows", "envs", "config", "plan", "repeats")  # what a suite may take besides --methods/--seeds


@dataclass(frozen=True)
class CellRequest:
    """What the user asked for: ``None`` means the suite's default."""

    quick: bool = False
    seeds: int | None = None
    methods: list[str] | None = None
    ks: list[int] | None = None
    rows: list[str] | None = None
    envs: list[str] | None = None
    extra: tuple[str, ...] = ()  # dotted key=value applied to every cell last
    config: str | None = None  # YAML config file or preset every cell starts from
    only: list[str] | None = None  # fnmatch globs over cell names without the "-s<seed>" suffix
    plan: str | None = None  # a study's plan file (the study suite)
    out: str | None = None  # the study's output folder (where a suite may keep its own files)
    repeats: int | None = None  # every cell this many times, interleaved (suites that report speed)
    only_seeds: list[int] | None = None  # only these seeds' cells: a part of a study run in parts (--merge)


Builder = Callable[["Suite", CellRequest, int], list[Cell]]  # (suite, request, seed) -> that seed's cells
ReportBuilder = Callable[[Mapping[str, Any], Path, dict], tuple[dict, str, list]]


@dataclass(frozen=True)
class Suite:
    """One benchmark suite."""

    name: str
    help: str  # one line for ``python -m benchmarks --help``
    cells: Builder
    quick: Mapping[str, object]  # --quick: overrides that make every cell short
    full: Mapping[str, object]  # the full run's defaults (a key the --config file sets wins)
    seeds: int  # default seeds per cell
    quick_seeds: int = 1
    report: ReportBuilder | None = None  # -> (summary entries, Markdown table, figures); generic writer
    headline: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]] | None = None
    write_report: Callable[[Path, dict], dict] | None = None  # a writer of its own instead of ``report``
    method_order: tuple[str, ...] = ()
    takes: frozenset[str] = field(default_factory=frozenset)  # which of OPTIONS it accepts
    in_process: bool = False  # serial runs start its asyncrl cells in the bench process
    validate: Callable[[list[Cell]], None] | None = None  # refuse bad cells before anything runs
    done_line: Callable[[Cell, Mapping[str, Any]], str] | None = None  # progress line from a summary
    # what results.json records beside the runs (a study's plan), and a check + copy into the output
    # folder before the first run (a study's plan is frozen there)
    header: Callable[[CellRequest], dict] | None = None
    prepare: Callable[[CellRequest, Path], None] | None = None
    seeds_of: Callable[[CellRequest], int] | None = None  # seeds the request fixes (a study's plan)

    def base(self, request: CellRequest) -> dict[str, object]:
        """The quick or full defaults every cell starts from."""
        return under_config(dict(self.quick if request.quick else self.full), request.config, request.quick)

    def n_seeds(self, request: CellRequest) -> int:
        if self.seeds_of is not None:
            return self.seeds_of(request)
        return request.seeds if request.seeds is not None else (self.quick_seeds if request.quick else self.seeds)


def suite_names() -> list[str]:
    return list(SUITES)


def get_suite(name: str) -> Suite:
    """The registered suite called ``name`` (ValueError listing the known ones otherwise)."""
    return resolve(SUITES.lookup(name))


def _check_options(suite: Suite, request: CellRequest) -> None:
    for option in OPTIONS:
        if getattr(request, option) is not None and option not in suite.takes:
            takers = [n for n in SUITES if option in get_suite(n).takes]
            raise ValueError(f"--{option}: suite {suite.name} does not take it (suites that do: "
                             f"{', '.join(takers) or 'none'})")


def build_cells(name: str, request: CellRequest | None = None, **kwargs) -> list[Cell]:
    """The cells of suite ``name``, in run order: seed-major, so a partial run covers every method.

    ``request`` (or its fields as keyword arguments) filters the suite's matrix; an unknown
    method, K, row or env, or an option the suite does not take, raises ValueError naming it."""
    suite = get_suite(name)
    request = request or CellRequest(**{**kwargs, "extra": tuple(kwargs.get("extra") or ())})
    _check_options(suite, request)
    n_seeds = suite.n_seeds(request)
    if n_seeds < 1:
        raise ValueError("--seeds: must be >= 1")
    cells = [cell for seed in range(n_seeds) for cell in _repeated(suite.cells(suite, request, seed), request)]
    cells = cells if request.only is None else keep_only(cells, request.only)
    return cells if request.only_seeds is None else keep_seeds(cells, request.only_seeds)


def _repeated(cells: list[Cell], request: CellRequest) -> list[Cell]:
    """One seed's cells, ``--repeats`` times each in interleaved order (benchmarks.bench.repeats)."""
    if request.repeats is None:
        return cells
    from benchmarks.bench.repeats import repeat_cells

    return repeat_cells(cells, request.repeats)


def cell_stem(cell: Cell) -> str:
    """The cell's name without its ``-s<seed>`` (and ``-r<repeat>``) suffix: what ``--only`` matches."""
    name = cell.name
    if cell.repeat is not None and name.endswith(f"-r{cell.repeat}"):
        name = name[:-len(f"-r{cell.repeat}")]
    return name[:-len(f"-s{cell.seed}")] if name.endswith(f"-s{cell.seed}") else name


def keep_only(cells: list[Cell], globs: list[str]) -> list[Cell]:
    """The cells whose name without its ``-s<seed>`` suffix matches one of ``globs`` (fnmatch), in
    order; ValueError naming a glob that matches no cell (a typo would otherwise drop cells silently)."""
    stem = cell_stem
    for glob in globs:
        if not any(fnmatch.fnmatchcase(stem(c), glob) for c in cells):
            raise ValueError(f"--only: {glob!r} matches no cell (e.g. {', '.join(stem(c) for c in cells[:3])})")
    return [c for c in cells if any(fnmatch.fnmatchcase(stem(c), glob) for glob in globs)]


def keep_seeds(cells: list[Cell], seeds: list[int]) -> list[Cell]:
    """The cells of ``seeds``, in order; ValueError naming a seed that no cell has."""
    have = sorted({c.seed for c in cells})
    for seed in seeds:
        if seed not in have:
            raise ValueError(f"--only-seeds: no cell has seed {seed} (the seeds: {', '.join(map(str, have))})")
    return [c for c in cells if c.seed in seeds]


def validate_train_cells(cells: list[Cell]) -> None:
    """Load every cell's config (ConfigError naming the key, before anything runs), and refuse a
    speed comparison whose best synchronous arm has fewer cores than an asynchronous one."""
    from asyncrl.runtime.validate import load_run_config

    configs = {cell.name: load_run_config(cell.config, list(cell.overrides)) for cell in cells}
    check_fair_threads(cells, configs)


def check_fair_threads(cells: list[Cell], configs: Mapping[str, Any], cores: int | None = None) -> None:
    """ValueError when no sync cell uses as many of the machine's ``cores`` as some async cell does:
    sync is one process, and with one thread on two cores it is a baseline given half the machine.
    Threads beyond the cores buy nothing, so each cell counts at most ``cores``."""
    from asyncrl.config.threads import available_cores, thread_plan

    cores = cores or available_cores(honour_env=False)  # the machine's, not a test runner's cap
    used = {}
    for cell in cells:
        cfg = configs[cell.name]
        if cfg.run.mode in ("sync", "async"):
            plan = thread_plan(cfg, ranks=int(cell.params.get("world", 1)), cores=cores)
            used[cell.name] = (cfg.run.mode, min(plan.total, cores), plan.describe())
    syncs = [(n, u) for n, u in used.items() if u[0] == "sync"]
    asyncs = [(n, u) for n, u in used.items() if u[0] == "async"]
    if not syncs or not asyncs:
        return
    best_sync = max(syncs, key=lambda item: item[1][1])
    widest = max(asyncs, key=lambda item: item[1][1])
    if best_sync[1][1] < widest[1][1]:
        raise ValueError(
            f"policy.torch_threads: the sync baseline {best_sync[0]} uses {best_sync[1][1]} of {cores} cores "
            f"({best_sync[1][2]}) where {widest[0]} uses {widest[1][1]} ({widest[1][2]}); give sync the "
            f"whole machine (policy.torch_threads=0, the default, or {widest[1][1]})")
