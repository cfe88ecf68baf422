"""The study suite: the arms, seeds and conclusions a plan file declares before any run
(:mod:`benchmarks.bench.plan_file`), run like any suite and reported by :mod:`benchmarks.bench.study_report`.

Seed ``s`` of every arm starts from warm start ``pretrain.seed = first_warm_start + s % warm_starts``, so the spread
between warm starts is part of what the seeds sample, and the same seed of two arms shares its warm
start and its evaluation problems (what a paired test pairs).

A value naming a Python file relative to the repository (``env.harness: examples/harness_guess.py:agent``)
is made absolute against the repository root when that file is there, so a study finds it from any
working directory.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.bench.cells import Cell, overrides
from benchmarks.bench.plan_file import PLAN_COPY, PlanError, StudyPlan, freeze_plan, load_plan
from benchmarks.bench.study_report import build_study, headline_study
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells


def plan_path(request: CellRequest) -> Path:
    """``--plan``, else the copy frozen in ``--out`` (how a committed study is re-rendered)."""
    if request.plan:
        return Path(request.plan)
    if request.out and (Path(request.out) / PLAN_COPY).exists():
        return Path(request.out) / PLAN_COPY
    raise PlanError("--plan: the study suite needs a plan file (none given, none frozen in --out)")


def request_plan(request: CellRequest) -> StudyPlan:
    """The plan the request names (read each time it is asked for: a few lines of YAML)."""
    return load_plan(plan_path(request))


def _seeds(request: CellRequest) -> int:
    plan = request_plan(request)
    if request.seeds is not None:
        raise PlanError(f"--seeds: a study runs the seeds its plan fixes ({plan.seeds}); use --only to run a part")
    if request.methods is not None:
        raise PlanError("--methods: a study runs the arms its plan fixes; use --only to run a part")
    return plan.seeds


REPO = Path(__file__).resolve().parents[2]
_FILE_ATTR = re.compile(r"(?P<file>[^:\s]+\.py):(?P<attr>[A-Za-z_][\w.]*)")


def in_repo(value: object) -> object:
    """``path/file.py:attr`` relative to the repository, as an absolute path when the file is there;
    any other value as it is."""
    match = _FILE_ATTR.fullmatch(value) if isinstance(value, str) else None
    if match is None or Path(match["file"]).is_absolute() or not (REPO / match["file"]).is_file():
        return value
    return f"{REPO / match['file']}:{match['attr']}"


def _lift_params(config: str | None, switches: tuple[str, ...]) -> dict:
    """The eval problems and reward range eval_lift_z reads from a run's params."""
    from asyncrl.runtime.validate import load_run_config
    from benchmarks.bench.lift import lift_params

    return lift_params(load_run_config(config, list(switches)))


def _cells(suite: Suite, request: CellRequest, index: int) -> list[Cell]:
    plan = request_plan(request)
    if plan.config is not None and request.config is not None and request.config != plan.config:
        raise PlanError(f"--config: the plan fixes config {plan.config!r}")
    config = request.config or plan.config
    seed = plan.seed_ids[index]
    block = seed % plan.warm_starts
    base = {**suite.base(request), **plan.common}
    cells = []
    for arm, switches in plan.arms.items():
        merged = {k: in_repo(v) for k, v in {**base, **switches}.items()}
        args = overrides(merged, {"run.seed": seed, "pretrain.seed": plan.pretrain_seed(seed)}) + request.extra
        params = {"arm": arm, "warm_start": block}
        if plan.first_warm_start:
            params["pretrain_seed"] = plan.pretrain_seed(seed)
        if plan.endpoint == "eval_lift_z":
            params.update(_lift_params(config, args))
        cells.append(Cell(f"{arm}-s{seed}", arm, seed, "train", args, params, config))
    return cells


def _header(request: CellRequest) -> dict:
    return {"plan": request_plan(request).as_dict()}


def _prepare(request: CellRequest, out_dir: Path) -> None:
    freeze_plan(plan_path(request), request_plan(request), out_dir)


SUITE = Suite(
    name="study", help="the arms, seeds, endpoint and Holm family a plan file declares (--plan FILE)",
    cells=_cells, quick={"trainer.steps": 8, "eval.n_problems": 32, "eval.samples": 1},
    full={"eval.cache_initial": True}, seeds=1, report=build_study, headline=headline_study,
    takes=frozenset({"config", "plan"}), validate=validate_train_cells, header=_header, prepare=_prepare,
    seeds_of=_seeds)
