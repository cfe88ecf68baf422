"""Scoring with the configured reward functions: call each once per batch, check what it returns,
combine the values into the total reward (weighted sum), and report each function's own values.

``None`` means "does not apply to this row", as in TRL: the row's total leaves that function out
and so does the function's mean (``reward/<name>``); a row where every function returns None gets
a total of 0, with a warning printed once per process (TRL warns too). A function that raises, or
returns anything else that is not a finite number (NaN, a string), is named in one line with the
row it failed on (``reward.on_error=raise``, the default), or its value for that row becomes 0 and
is counted in ``reward/errors`` (``reward.on_error=zero``). Never a silent fallback: a broken
reward changes the objective, so it must be visible.

A call that takes longer than ``reward.timeout_s`` is stopped and handled the same way (the batch's
rows, named by the first). A function that calls ``sys.exit`` or raises ``KeyboardInterrupt`` is
named in one line whatever ``on_error`` says (:mod:`asyncrl.core.user_code`): it asked to end the
process, which no score stands in for.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from asyncrl.core.loader import ConfigError
from asyncrl.core.user_code import Exited, TimedOut, call_guarded, finite_number, first_line
from asyncrl.rewards.resolve import CONTEXT, RewardFunction, load_function
from asyncrl.rewards.reward_model import reward_models
from asyncrl.tasks import Problem
from asyncrl.tasks.chat import as_dicts

__all__ = ["DEFAULT_REWARD", "RewardFunctionError", "RewardSet", "Scores"]

# the tasks' own correctness reward (exact match or math-verify): what an empty reward.funcs means
DEFAULT_REWARD = "asyncrl.tasks.rewards:correct_answer"
_ROW_ATTRS = ("uid", "answer", "solution")
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
_NOT_A_NUMBER = "; a reward must be a finite number, or None where it does not apply (reward.on_error=zero " \
                "counts it 0 instead)"


class _Failed(float):
    """The NaN of a value that failed (counted in ``reward/errors``), told apart from the NaN of a
    None (not applicable)."""

    def __new__(cls):
        return super().__new__(cls, math.nan)


class RewardFunctionError(ConfigError):
    """A reward function failed: one line naming it and the row (exit 2, in a worker too)."""

    def __init__(self, message: str):
        ValueError.__init__(self, message)
        self.key = "reward.funcs"


@dataclass
class Scores:
    """``total[i]``: the weighted sum for row i; ``parts[i][j]``: function j's raw value for row i
    (NaN where it returned None, or failed and ``on_error=zero`` made it 0 in the total);
    ``failed[i][j]``: whether that NaN is a failure; ``errors``: how many failures."""

    total: list[float]
    parts: list[list[float]]
    errors: int
    failed: list[list[bool]] | None = None


def _row_attr(problem: Problem, attr: str):
    """The problem's own ``attr``; a column of that name where the problem has none (no gold)."""
    value = getattr(problem, attr, None)
    if value in ("", None):
        value = (getattr(problem, "fields", None) or {}).get(attr, value)
    return value


def unique_names(functions: Sequence[RewardFunction]) -> list[str]:
    """Metric names: the function names, with ``_2``, ``_3``... for repeats."""
    seen: dict[str, int] = {}
    out = []
    for f in functions:
        seen[f.name] = seen.get(f.name, 0) + 1
        out.append(f.name if seen[f.name] == 1 else f"{f.name}_{seen[f.name]}")
    return out


class RewardSet:
    """The reward functions of a run, their weights and the error policy, bound to the task."""

    def __init__(self, functions: list[RewardFunction], weights: list[float], on_error: str, task=None,
                 completion_format: str = "auto", timeout_s: float | None = None):
        if len(weights) != len(functions):
            raise ValueError(f"weights: {len(weights)} weights for {len(functions)} reward functions")
        self.functions, self.weights, self.on_error, self.task = functions, weights, on_error, task
        self.timeout_s = timeout_s  # per call; None: unbounded
        self.conversational = completion_format == "auto"  # TRL's format for chat prompts
        self.names = unique_names(functions)
        self._warned_unscored = False

    @classmethod
    def from_config(cls, cfg, task=None) -> "RewardSet":
        """``cfg``: a RewardConfig (funcs, models, weights, on_error, completion_format); resolved in
        this process. Reward models (``reward.models``, asyncrl.rewards.reward_model) follow the
        functions, and alone replace the task's correctness reward as functions do. With neither, a
        task that cannot score its rows itself (no gold answers) says why: a ConfigError naming
        ``reward.funcs``."""
        models = reward_models(cfg) if getattr(cfg, "models", None) else []  # after the functions, as weights go
        if not cfg.funcs and not models and task is not None:
            unavailable = getattr(task, "default_reward_unavailable", None)
            reason = unavailable() if unavailable is not None else None
            if reason:
                raise ConfigError("reward.funcs", reason)
        functions = [load_function(p) for p in list(cfg.funcs) or ([] if models else [DEFAULT_REWARD])] + models
        weights = list(cfg.weights) if cfg.weights is not None else [1.0] * len(functions)
        return cls(functions, [float(w) for w in weights], cfg.on_error, task,
                   getattr(cfg, "completion_format", "auto"), getattr(cfg, "timeout_s", None))

    def without_needing(self, fields) -> "RewardSet | None":
        """These functions less those that require one of ``fields`` (None when none is left)."""
        keep = [i for i, f in enumerate(self.functions) if not (f.required & set(fields))]
        if not keep:
            return None
        if len(keep) == len(self.functions):
            return self
        out = RewardSet([self.functions[i] for i in keep], [self.weights[i] for i in keep], self.on_error,
                        self.task, timeout_s=self.timeout_s)
        out.conversational = self.conversational
        return out

    @classmethod
    def for_task(cls, task) -> "RewardSet":
        """The default: the task's own correctness reward alone (an empty ``reward.funcs``)."""
        return cls([load_function(DEFAULT_REWARD)], [1.0], "raise", task)

    # -- scoring --

    def context(self, problems: Sequence[Problem]) -> dict:
        """The keyword arguments a call can receive: each row field as a list aligned with the
        completions (dataset columns, then the problem's uid/answer/solution, which win unless the
        problem has none), plus ``prompts`` (a chat row's messages when conversational),
        ``problems`` and ``task``."""
        columns: dict[str, None] = {}
        for p in problems:
            columns.update(dict.fromkeys(getattr(p, "fields", None) or {}))
        ctx: dict = {name: [(getattr(p, "fields", None) or {}).get(name) for p in problems] for name in columns}
        ctx.update({attr: [_row_attr(p, attr) for p in problems] for attr in _ROW_ATTRS})
        ctx.update(prompts=[self._prompt(p) for p in problems], problems=list(problems), task=self.task)
        return ctx

    def _prompt(self, problem: Problem):
        messages = getattr(problem, "messages", None)
        return as_dicts(messages) if self.conversational and messages is not None else problem.prompt

    def _shown(self, completions: list[str], problems: Sequence[Problem]) -> list:
        """Completions as functions receive them: a chat row's as ``[{"role": "assistant", ...}]``."""
        if not self.conversational:
            return completions
        return [[{"role": "assistant", "content": c}] if getattr(p, "messages", None) is not None else c
                for c, p in zip(completions, problems)]

    def score(self, completions: list[str], problems: Sequence[Problem], *, shown: list | None = None,
              extra: dict[str, list] | None = None) -> Scores:
        """Every function on every row; the weighted total per row. ``shown``: the completions as
        functions receive them, when not the default form (an episode's conversation); ``extra``:
        more keyword arguments, one list aligned with the rows each (an episode's ``tool_calls``,
        ``env_info``, ``env_reward``, ``turns``)."""
        if len(completions) != len(problems):
            raise ValueError(f"score: {len(completions)} completions for {len(problems)} problems")
        ctx = self.context(problems)
        ctx.update(extra or {})
        shown = self._shown(completions, problems) if shown is None else shown
        columns = [self._values(f, shown, problems, ctx) for f in self.functions]
        parts = [list(row) for row in zip(*columns)] if columns else []
        total = [sum(w * (0.0 if math.isnan(v) else v) for w, v in zip(self.weights, row)) for row in parts]
        for value, row, problem in zip(total, parts, problems):
            if not abs(value) <= _FLOAT32_MAX:  # NaN too: the trainer's rewards are float32
                raise RewardFunctionError(
                    f"reward.weights: {self.weights} × the values {row} on {self._where(problem)}: the total "
                    f"{value:g} is not finite in float32 (|total| <= {_FLOAT32_MAX:.3g})")
        failed = [[isinstance(v, _Failed) for v in row] for row in parts]
        self._warn_unscored(parts, failed, problems)
        return Scores(total, [[float(v) for v in row] for row in parts], sum(map(sum, failed)), failed)

    def _warn_unscored(self, parts: list[list[float]], failed: list[list[bool]], problems: Sequence[Problem]) -> None:
        """Once per reward set: a row to which no function applies (all returned None) has a total
        of 0, as in TRL, which warns about it too."""
        if self._warned_unscored:
            return
        for row, row_failed, problem in zip(parts, failed, problems):
            if row and all(math.isnan(v) for v in row) and not any(row_failed):
                self._warned_unscored = True
                print(f"asyncrl: warning: every reward function returned None on {self._where(problem)}, so its "
                      f"reward is 0 (reward functions: {', '.join(self.names)}); make at least one score "
                      "every row (said once)", file=sys.stderr)
                return

    def totals(self, completions: list[str], problems: Sequence[Problem]) -> list[float]:
        return self.score(completions, problems).total

    def _where(self, problem: Problem) -> str:
        where = f"row uid={problem.uid}"
        source = getattr(self.task, "source", None)
        if source is not None:
            shown = source(problem.uid)
            if shown != problem.uid:
                where += f" ({shown})"
        return where

    def _fail(self, f: RewardFunction, problem: Problem, what: str, why: str = "") -> float:
        if self.on_error == "raise":
            raise RewardFunctionError(f"reward function {f.path} {what} on {self._where(problem)}{why}")
        return _Failed()

    def _values(self, f: RewardFunction, completions: list[str], problems: Sequence[Problem],
                ctx: dict) -> list[float]:
        missing = sorted(f.required - ctx.keys())
        if missing:
            known = ", ".join(sorted(k for k in ctx if k not in CONTEXT)) + ", " + ", ".join(CONTEXT)
            raise RewardFunctionError(f"reward function {f.path} needs argument(s) {', '.join(missing)}, "
                                      f"which the rows do not have (available: {known})")
        try:
            out = call_guarded(lambda: f(completions, ctx), self.timeout_s)
        except TimedOut:  # not retried row by row: that could take a timeout per row
            return [self._fail(f, problems[0], self._too_long(), "" if len(problems) == 1 else
                               f" (a batch of {len(problems)} rows starting there)")] + \
                [_Failed() for _ in problems[1:]]
        except Exception as err:  # a user's function may raise anything: find the row it fails on
            return self._row_by_row(f, completions, problems, err)
        if isinstance(out, (str, bytes)) or not isinstance(out, Sequence) and not hasattr(out, "__len__"):
            raise RewardFunctionError(f"reward function {f.path} returned {type(out).__name__}, expected a "
                                      f"list of {len(completions)} floats")
        out = list(out)
        if len(out) != len(completions):  # a contract bug, not a row's: never zeroed
            raise RewardFunctionError(f"reward function {f.path} returned {len(out)} values for "
                                      f"{len(completions)} completions (starting at {self._where(problems[0])})")
        return [self._checked(f, value, problem) for value, problem in zip(out, problems)]

    def _checked(self, f: RewardFunction, value: object, problem: Problem) -> float:
        """One returned value as a float: NaN for None (the function does not apply to the row)."""
        if value is None:
            return math.nan
        number = finite_number(value)
        return number if number is not None else self._fail(f, problem, f"returned {value!r}", _NOT_A_NUMBER)

    def _row_by_row(self, f: RewardFunction, completions: list[str], problems: Sequence[Problem],
                    err: Exception) -> list[float]:
        """A call on the whole batch raised: call it on each row alone to name (or zero) the rows
        that fail. When no single row fails, the batch as a whole is named (or zeroed)."""
        values, failed = [], 0
        for i, problem in enumerate(problems):
            try:
                one = list(call_guarded(lambda: f(completions[i:i + 1], self.context([problem])), self.timeout_s))
                value = one[0] if len(one) == 1 else one
            except Exited as exited:  # never zeroed: the function asked to end the process
                raise RewardFunctionError(f"reward function {f.path} {exited} on {self._where(problem)}") from None
            except TimedOut:
                failed += 1
                values.append(self._fail(f, problem, self._too_long()))
                continue
            except Exception as row_err:
                failed += 1
                values.append(self._fail(f, problem, f"raised {first_line(row_err)}"))
                continue
            values.append(self._checked(f, value, problem))
        if failed == 0:
            if isinstance(err, Exited):
                raise RewardFunctionError(f"reward function {f.path} {err} on a batch of {len(problems)} rows "
                                          f"starting at {self._where(problems[0])}")
            if self.on_error == "raise":
                raise RewardFunctionError(f"reward function {f.path} raised {first_line(err)} on a batch of "
                                          f"{len(problems)} rows starting at {self._where(problems[0])}")
            values = [_Failed() for _ in problems]
        return values

    def _too_long(self) -> str:
        return f"took longer than reward.timeout_s={self.timeout_s:g} s"

    # -- reporting --

    def parts_tensor(self, scores: Scores) -> torch.Tensor:
        return torch.tensor(scores.parts, dtype=torch.float32).reshape(len(scores.total), len(self.functions))

    def failed_tensor(self, scores: Scores) -> torch.Tensor:
        """[B, F] bool: which NaNs of :meth:`parts_tensor` are failures (the others: None)."""
        failed = scores.failed if scores.failed is not None else [[False] * len(self.functions)] * len(scores.total)
        return torch.tensor(failed, dtype=torch.bool).reshape(len(scores.total), len(self.functions))

    def metrics(self, reward_parts: torch.Tensor | None, reward_failed: torch.Tensor | None = None) -> dict[str, float]:
        """Per step, per function: ``reward/<name>``, the mean raw value over the rows it applies to
        (a None leaves the row out, a failure counts as its 0; NaN when it applied to none), and
        ``reward_std/<name>``, their standard deviation (n - 1, as TRL's ``rewards/<name>/std``);
        ``reward/errors`` (failed values zeroed this step) under ``on_error=zero``.
        ``reward_failed``: :meth:`failed_tensor`'s mask; None = no failure."""
        if reward_parts is None or reward_parts.shape[-1] != len(self.functions) or not len(reward_parts):
            return {}
        failed = torch.zeros_like(reward_parts, dtype=torch.bool) if reward_failed is None else reward_failed.bool()
        values = torch.where(failed, 0.0, reward_parts.double())
        applies = ~torch.isnan(values)
        count = applies.sum(dim=0)
        mean = values.nan_to_num(0.0).sum(dim=0) / count
        square = torch.where(applies, (values - mean) ** 2, 0.0).sum(dim=0)
        std = (square / (count - 1)).sqrt().where(count > 1, math.nan)
        out = {f"reward/{name}": float(m) for name, m in zip(self.names, mean)}
        out.update({f"reward_std/{name}": float(sd) for name, sd in zip(self.names, std)})
        if self.on_error == "zero":
            out["reward/errors"] = int(failed.sum())
        return out
