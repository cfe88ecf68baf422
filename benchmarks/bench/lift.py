"""A run's eval-reward lift (eval reward after its last step minus at step 0, the same run), and the
lift over an upper bound of its standard error, the endpoints of the learning studies' plans
(``eval_lift``, ``eval_lift_z``: :mod:`benchmarks.bench.plan_file`).

The bound needs no second run: a score is the mean over ``n`` eval problems of each problem's mean
reward, which lies in [low, high], so by Bhatia-Davis its variance is at most (high − m)(m − low)
and the lift's SE is at most √(((high − m₀)(m₀ − low) + (high − m₁)(m₁ − low)) / n), the two scores
treated as independent (different policies' samples). GEM's games reward a malformed action with
−0.1, so their episodes lie in [−0.1, 1].
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.bench import stats as S

GEM_LOW = -0.1  # GEM's LanguageGameReward.format_error_reward, its games' lowest reward


def reward_bounds(env_name: str) -> tuple[float, float]:
    """The range an eval problem's reward can take: [−0.1, 1] for a GEM game, else [0, 1]."""
    return (GEM_LOW, 1.0) if str(env_name or "").startswith("gem:") else (0.0, 1.0)


def lift_z(start: float, end: float, n: int, low: float = 0.0, high: float = 1.0) -> float:
    """The lift ``end - start`` over its standard error's upper bound (module docstring)."""
    se = math.sqrt(((high - start) * (start - low) + (high - end) * (end - low)) / n)
    return (end - start) / se if se > 0 else math.copysign(math.inf, end - start) if end != start else 0.0


def start_and_end(run: Mapping[str, Any]) -> tuple[float, float]:
    """(step-0 eval reward, final eval reward) of a results.json run: the summary's, else the
    first and last points of its eval curve."""
    summary = run.get("summary") or {}
    start, end = S.as_float(summary.get("initial_eval_reward")), S.as_float(summary.get("final_eval_reward"))
    points = sorted((float(r["step"]), S.as_float(r.get("eval_reward"))) for r in S.eval_records(run))
    if not math.isfinite(start) and points and points[0][0] == 0:
        start = points[0][1]
    if not math.isfinite(end) and points:
        end = points[-1][1]
    return start, end


def eval_lift(run: Mapping[str, Any]) -> float:
    """Final eval reward minus the step-0 eval reward of the same run; NaN without both."""
    start, end = start_and_end(run)
    return end - start


def eval_lift_z(run: Mapping[str, Any]) -> float:
    """The lift over its SE bound, from the eval problems and reward range the study recorded in the
    run's params (``eval_problems``, ``reward_low``, ``reward_high``); NaN without them."""
    params = run.get("params") or {}
    start, end = start_and_end(run)
    n = S.as_float(params.get("eval_problems"))
    if not (math.isfinite(start) and math.isfinite(end) and n >= 1):
        return math.nan
    low, high = S.as_float(params.get("reward_low", 0.0)), S.as_float(params.get("reward_high", 1.0))
    return lift_z(start, end, int(n), low, high)


def lift_params(cfg: Any) -> dict[str, Any]:
    """What eval_lift_z needs of a run's loaded config, recorded in its cell's params."""
    low, high = reward_bounds(cfg.env.name)
    return {"eval_problems": int(cfg.eval.n_problems), "reward_low": low, "reward_high": high}


def run_dir_lift_z(run_dir: Path) -> float:
    """The lift z of a run directory (its summary.json and config.yaml), as eval_lift_z computes it
    for a study's run: how the committed runs of the scripts' era are checked."""
    import yaml

    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    low, high = reward_bounds(str((config.get("env") or {}).get("name") or ""))
    return lift_z(S.as_float(summary["initial_eval_reward"]), S.as_float(summary["final_eval_reward"]),
                  int(config["eval"]["n_problems"]), low, high)
