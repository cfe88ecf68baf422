"""A study's plan, declared before any run (``python -m benchmarks study --plan FILE``, docs/benchmarks.md).

A plan file says what will be run and what will be concluded from it, so the conclusions cannot
be chosen after the results are seen::

    name: corrections-k16
    question: Which corrections keep sync's reward at 16 versions of staleness?
    config: staleness-testbed          # preset or YAML every arm starts from
    common: {trainer.steps: 100, eval.every: 10}
    seeds: 20                          # runs per arm, seeds 0..19
    warm_starts: 4                     # seed s starts from warm start pretrain.seed = s % 4
    first_warm_start: 0                # optional: warm start b is pretrain.seed = first_warm_start + b
    arms:
      sync: {run.mode: sync}
      a3po: {run.mode: simulated, async.lag: 16, trainer.prox: loglinear, loss.name: decoupled}
    primary:
      endpoint: final_eval_reward      # or eval_auc (the mean of the eval curve over the run)
      test: welch                      # or paired (by seed: same warm start, same eval set)
      margin: 0.03                     # equivalence within ±margin (TOST)
      family: [a3po - sync]            # the ONE Holm family: "arm - reference"
    exploratory: [a3po - sync]         # reported without verdicts (optional)

A learning study judges each arm against a bar instead of (or beside) comparing arms::

    seeds: [1, 2]                      # the seeds themselves, instead of a count from 0
    primary:
      endpoint: eval_lift              # final eval reward minus the same run's step-0 eval reward
      bar: 0.15                        # each arm passes when its lift is >= 0.15; or {arm: bar, ...}
      bar_over: mean                   # the arm's mean over seeds (default), or each_seed: every seed

``eval_lift_z`` is the lift over an upper bound of its standard error (:mod:`benchmarks.bench.lift`),
its bar a z. A bar is not a test: one seed per arm gets the bar alone. A plan with neither a family
nor a bar reports its numbers without verdicts.

The study copies the plan into its output folder before the first run and refuses to continue
under a different one; the report gives verdicts for the primary family and the bar only and marks
every other number exploratory.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENDPOINTS = ("final_eval_reward", "eval_auc", "eval_lift", "eval_lift_z")
LIFT_ENDPOINTS = ("eval_lift", "eval_lift_z")
TESTS = ("welch", "paired")
BAR_OVER = ("mean", "each_seed")
PLAN_COPY = "plan.yaml"  # the frozen copy in the study's output folder


class PlanError(ValueError):
    """A plan file that cannot be used; one line naming the file and the field."""


@dataclass(frozen=True)
class Comparison:
    """``arm - reference``: the difference of their endpoint, arm minus reference."""

    arm: str
    reference: str

    @property
    def label(self) -> str:
        return f"{self.arm} - {self.reference}"


@dataclass(frozen=True)
class StudyPlan:
    """The parsed plan file (module docstring)."""

    name: str
    arms: dict[str, dict[str, Any]]
    family: tuple[Comparison, ...]
    seeds: int
    warm_starts: int = 1
    endpoint: str = "final_eval_reward"
    test: str = "welch"
    margin: float = 0.03
    question: str = ""
    config: str | None = None
    common: dict[str, Any] = field(default_factory=dict)
    exploratory: tuple[Comparison, ...] = ()
    sha256: str = ""  # of the file's bytes: what the study folder's copy must match
    seed_values: tuple[int, ...] = ()  # the seeds a list named; () = 0 .. seeds - 1
    bars: dict[str, float] = field(default_factory=dict)  # arm -> its bar on the endpoint
    bar_over: str = "mean"
    first_warm_start: int = 0  # warm start b is pretrain.seed first_warm_start + b (fresh ones: no pilot's)

    def pretrain_seed(self, seed: int) -> int:
        """The warm start (``pretrain.seed``) that RL seed ``seed`` starts from."""
        return self.first_warm_start + seed % self.warm_starts

    @property
    def seed_ids(self) -> tuple[int, ...]:
        """The seeds every arm runs, in order."""
        return self.seed_values or tuple(range(self.seeds))

    def as_dict(self) -> dict[str, Any]:
        """What results.json stores, so ``--report-only`` needs no plan file."""
        primary: dict[str, Any] = {"endpoint": self.endpoint, "test": self.test, "margin": self.margin,
                                   "family": [c.label for c in self.family]}
        if self.bars:  # absent otherwise: the plans of the committed studies store what they stored
            primary.update(bar=dict(self.bars), bar_over=self.bar_over)
        fresh = {"first_warm_start": self.first_warm_start} if self.first_warm_start else {}
        return {**fresh, "name": self.name, "question": self.question, "config": self.config, "common": self.common,
                "seeds": list(self.seed_values) if self.seed_values else self.seeds,
                "warm_starts": self.warm_starts, "arms": self.arms, "primary": primary,
                "exploratory": [c.label for c in self.exploratory], "sha256": self.sha256}


def _comparisons(where: str, items: Any, arms: dict) -> tuple[Comparison, ...]:
    if not isinstance(items, list):
        raise PlanError(f"{where}: must be a list of \"arm - reference\" strings")
    out = []
    for i, item in enumerate(items):
        parts = [p.strip() for p in str(item).split(" - ")]
        if len(parts) != 2 or not all(parts):
            raise PlanError(f"{where}[{i}]: {item!r} is not \"arm - reference\"")
        for part in parts:
            if part not in arms:
                raise PlanError(f"{where}[{i}]: unknown arm {part!r} (arms: {', '.join(arms)})")
        if parts[0] == parts[1]:
            raise PlanError(f"{where}[{i}]: an arm compared with itself")
        out.append(Comparison(*parts))
    return tuple(out)


def _number(where: str, value: Any, kind: type, low: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise PlanError(f"{where}: must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if not value >= low:
        raise PlanError(f"{where}: must be >= {low}, got {value!r}")
    return kind(value)


def _mapping(where: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise PlanError(f"{where}: must be a mapping")
    return value


def _seeds(where: str, value: Any) -> tuple[int, tuple[int, ...]]:
    """(count, the seeds a list named or ()) of ``seeds:``, a count or a list of distinct seeds."""
    if not isinstance(value, list):
        return _number(f"{where}: seeds", value, int, 1), ()
    seeds = tuple(_number(f"{where}: seeds[{i}]", v, int, 0) for i, v in enumerate(value))
    if not seeds or len(set(seeds)) != len(seeds):
        raise PlanError(f"{where}: seeds: a list must name at least one seed, each once, got {value!r}")
    return len(seeds), seeds


def _bars(where: str, primary: dict, arms: dict) -> tuple[dict[str, float], str]:
    """({arm: bar}, bar_over) of ``primary.bar``: one number for every arm, or a mapping arm -> number."""
    bar_over = primary.get("bar_over", "mean")
    if bar_over not in BAR_OVER:
        raise PlanError(f"{where}: primary.bar_over: {bar_over!r} is not one of {', '.join(BAR_OVER)}")
    raw = primary.get("bar")
    if raw is None:
        return {}, bar_over
    named = raw if isinstance(raw, dict) else dict.fromkeys(arms, raw)
    bars = {}
    for arm, value in named.items():
        field_name = f"primary.bar.{arm}" if isinstance(raw, dict) else "primary.bar"
        if arm not in arms:
            raise PlanError(f"{where}: {field_name}: unknown arm {arm!r} (arms: {', '.join(arms)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise PlanError(f"{where}: {field_name}: must be a finite number or a mapping arm -> number, got {value!r}")
        bars[arm] = float(value)
    return bars, bar_over


def _primary(where: str, data: dict, arms: dict) -> dict[str, Any]:
    """The StudyPlan fields ``primary:`` sets."""
    primary = _mapping(f"{where}: primary", data["primary"])
    unknown = sorted(set(primary) - {"endpoint", "test", "margin", "family", "bar", "bar_over"})
    if unknown:
        raise PlanError(f"{where}: primary: unknown field {unknown[0]!r}")
    endpoint = primary.get("endpoint", "final_eval_reward")
    if endpoint not in ENDPOINTS:
        raise PlanError(f"{where}: primary.endpoint: {endpoint!r} is not one of {', '.join(ENDPOINTS)}")
    test = primary.get("test", "welch")
    if test not in TESTS:
        raise PlanError(f"{where}: primary.test: {test!r} is not one of {', '.join(TESTS)}")
    bars, bar_over = _bars(where, primary, arms)
    family: tuple[Comparison, ...] = ()
    if "family" in primary or not (bars or endpoint in LIFT_ENDPOINTS):
        family = _comparisons(f"{where}: primary.family", primary.get("family"), arms)
        if not family:
            raise PlanError(f"{where}: primary.family: name at least one comparison")
    if family and endpoint == "eval_lift_z":
        raise PlanError(f"{where}: primary.family: arms are compared in reward points; eval_lift_z is a z "
                        f"(compare eval_lift, or judge eval_lift_z by a bar)")
    return {"endpoint": endpoint, "test": test, "family": family, "bars": bars, "bar_over": bar_over,
            "margin": _number(f"{where}: primary.margin", primary.get("margin", 0.03), float, 0)}


def parse_plan(data: Any, *, sha256: str = "", where: str = "plan") -> StudyPlan:
    """A StudyPlan from the file's parsed YAML; PlanError naming ``where``'s field otherwise."""
    data = _mapping(where, data)
    known = {"name", "question", "config", "common", "seeds", "warm_starts", "first_warm_start", "arms", "primary",
             "exploratory"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise PlanError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(known))})")
    for key in ("name", "arms", "seeds", "primary"):
        if key not in data:
            raise PlanError(f"{where}: missing field {key!r}")
    arms = _mapping(f"{where}: arms", data["arms"])
    if len(arms) < 2:
        raise PlanError(f"{where}: arms: a study needs at least two arms")
    for name, switches in arms.items():
        if not isinstance(name, str) or not name or " " in name:
            raise PlanError(f"{where}: arms: {name!r} is not a name (no spaces)")
        _mapping(f"{where}: arms.{name}", switches if switches is not None else {})
    seeds, seed_values = _seeds(where, data["seeds"])
    return StudyPlan(
        name=str(data["name"]), question=str(data.get("question") or ""), config=data.get("config"),
        common=_mapping(f"{where}: common", data.get("common") or {}),
        arms={k: dict(v or {}) for k, v in arms.items()}, seeds=seeds, seed_values=seed_values,
        warm_starts=_number(f"{where}: warm_starts", data.get("warm_starts", 1), int, 1),
        first_warm_start=_number(f"{where}: first_warm_start", data.get("first_warm_start", 0), int, 0),
        exploratory=_comparisons(f"{where}: exploratory", data.get("exploratory") or [], arms), sha256=sha256,
        **_primary(where, data, arms))


def load_plan(path: str | Path) -> StudyPlan:
    """The plan in ``path`` (PlanError, one line, naming the file and field)."""
    from asyncrl.core.loader import read_yaml

    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise PlanError(f"--plan: cannot read {path} ({err.strerror or err})") from None
    try:
        data = read_yaml(path)
    except Exception as err:  # noqa: BLE001 - any YAML error is the file's, said in one line
        raise PlanError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse_plan(data, sha256=hashlib.sha256(raw).hexdigest(), where=str(path))


def freeze_plan(plan_path: str | Path, plan: StudyPlan, out_dir: Path) -> None:
    """Copy the plan into ``out_dir`` before the first run; PlanError when the folder already holds
    a different plan (a study's plan cannot change once its runs began)."""
    copy = out_dir / PLAN_COPY
    if copy.exists():
        frozen = hashlib.sha256(copy.read_bytes()).hexdigest()
        if frozen != plan.sha256:
            raise PlanError(f"--plan: {out_dir} was started under another plan ({copy}, sha256 {frozen[:12]}); "
                            f"a plan cannot change once its runs began: use a new --out")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = copy.with_name(copy.name + ".tmp")
    shutil.copyfile(plan_path, tmp)
    tmp.replace(copy)


def stored_plan(results: dict) -> StudyPlan:
    """The plan a results.json recorded (PlanError when it has none)."""
    data = results.get("plan")
    if not isinstance(data, dict):
        raise PlanError("results.json: no plan recorded (a study suite's results carry their plan)")
    primary = data.get("primary") or {}
    spec = {k: data[k] for k in ("name", "question", "config", "common", "seeds", "warm_starts", "first_warm_start",
                                 "arms") if k in data}
    spec["primary"] = {k: primary[k] for k in ("endpoint", "test", "margin", "family", "bar", "bar_over")
                       if k in primary and not (k == "family" and primary[k] == [])}  # a bar-only plan's
    spec["exploratory"] = data.get("exploratory") or []
    return parse_plan(json.loads(json.dumps(spec)), sha256=str(data.get("sha256", "")), where="results.json plan")
