"""reasoning-gym's procedural datasets: the ``reasoning_gym`` task (``task.rg_tasks=[...]``) and the
``rg_retry`` environment that retries its problems (docs/agents.md). Registered as ``reasoning_gym``
in asyncrl.tasks.TASKS and ``rg_retry`` in asyncrl.agents.ENVIRONMENTS.

reasoning-gym (https://github.com/open-thought/reasoning-gym, ``pip install asyncrl[envs]``)
generates problems from a seed and scores answers with each dataset's own ``score_answer``. Here:

* **Rows.** ``task.rg_tasks`` (dataset names: ``leg_counting``, ``basic_arithmetic``, ...) mixed by
  ``task.rg_weights`` into one of reasoning-gym's composite datasets of ``task.rg_size`` entries from
  ``task.rg_seed`` (``task.rg_configs``: a dataset's own settings, ``{leg_counting: {max_animals:
  5}}``). The last tenth of the entries (at least one) is the eval split; a train entry with the
  question of an eval entry is dropped, so the splits never share a question.
* **Prompt.** A chat prompt: reasoning-gym's system prompt (``task.rg_system_prompt``: a key of
  ``reasoning_gym.utils.SYSTEM_PROMPTS``, ``default`` unless set, other text as written, ``""`` for
  none), then the question. reasoning-gym's prompts ask for the answer between ``<answer>`` and
  ``</answer>``, and its own training code reads the answer that way: the **last**
  ``<answer>...</answer>`` of the completion (``reasoning_gym.utils.extract_answer``).
* **Reward.** The dataset's ``score_answer(answer, entry)``: 1.0 for a right answer, partial credit
  where the dataset gives it, 0.0 without an answer. The task's reward is the default of
  ``reward.funcs`` (asyncrl.tasks.rewards:correct_answer). Each row carries its entry
  (``rg_entry``: question, answer, metadata), its dataset (``rg_task``) and that dataset's settings
  (``rg_config``): reward functions receive them as keyword arguments, and the ``rg_retry``
  environment scores with them.
* **Warm start** (the embedded tiny model): each row's solution is ``" <answer>{answer}</answer>"``,
  the format, not the reasoning.

**Retries** (:class:`RetryEnv`, ``task=reasoning_gym env.name=rg_retry``). The first turn is the
single-turn task's: the row's prompt, an answer between ``<answer>`` and ``</answer>`` (a turn ends
there). The environment scores each answer with reasoning-gym's scorer (:func:`score`, the task's
own reward). A right answer (score 1) ends the episode. Otherwise the observation gives the scorer's
verdict and asks for another try: "Your answer 12 is not correct (score 0.00). Try again ...", or,
for a turn without an answer, how to write one. ``env.max_turns`` bounds the tries.

The reward is the final answer's, once. The environment's per-turn rewards are 0. The episode is
scored by the reward functions on its last assistant turn, as a single completion is: by default
the task's reward, reasoning-gym's score of the final answer. So a wrong first try followed by a
right one scores 1, the same reward functions serve single-turn and retry runs, and no try is
counted twice (a per-turn score plus the task's score of the final turn would be). To pay for
solving in fewer tries, add a reward function that reads its ``turns`` keyword argument
(docs/rewards.md).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from asyncrl.config.parts import ReasoningGymFields
from asyncrl.core.user_code import first_line
from asyncrl.tasks.base import Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["ReasoningGymConfig", "ReasoningGymFields", "ReasoningGymTask", "RetryEnv", "extract", "score"]

INSTALL = "pip install asyncrl[envs]"
EVAL_SHARE = 10  # the last 1/EVAL_SHARE of the entries is the eval split
SOLVED = 1.0 - 1e-9  # rg_retry: a score this high is a right answer (reasoning-gym gives 1.0)


@dataclass(frozen=True)
class ReasoningGymConfig:
    """What :class:`ReasoningGymTask` is built with (checked by :meth:`ReasoningGymTask.config_from`)."""

    tasks: tuple[str, ...]
    weights: tuple[float, ...]
    size: int = 2000
    seed: int = 0
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    system_prompt: str = "default"


def _rg() -> Any:
    """The ``reasoning_gym`` module; ValueError naming task.name (and the install line) when missing."""
    try:
        import reasoning_gym
    except ImportError as err:
        raise ValueError(f"name: reasoning_gym needs the reasoning-gym package, which is not installed "
                         f"({type(err).__name__}: {err}): {INSTALL}") from None
    return reasoning_gym


def _check_names(names: list[str], known: list[str]) -> None:
    """Every name is a reasoning-gym dataset, once; ValueError ``rg_tasks...: ...`` otherwise."""
    if not names:
        raise ValueError("rg_tasks: name at least one reasoning-gym dataset, e.g. task.rg_tasks=[leg_counting]")
    for i, name in enumerate(names):
        if name == "composite":
            raise ValueError(f"rg_tasks[{i}]: 'composite' is what rg_tasks builds; list its datasets instead")
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=4, cutoff=0.6)
            hint = (f"close: {', '.join(close)}" if close
                    else f"none close; {len(known)} in reasoning_gym.factory.DATASETS")
            raise ValueError(f"rg_tasks[{i}]: unknown reasoning-gym dataset {name!r} ({hint})")
        if name in names[:i]:
            raise ValueError(f"rg_tasks[{i}]: {name!r} is listed twice; give it a larger weight instead")


def _check_settings(keys: ReasoningGymFields) -> None:
    """The weights, size, seed and per-dataset settings; ValueError ``field: message``."""
    if keys.rg_weights is not None:
        if len(keys.rg_weights) != len(keys.rg_tasks):
            raise ValueError(f"rg_weights: {len(keys.rg_weights)} weight(s) for {len(keys.rg_tasks)} dataset(s) "
                             "of rg_tasks; give one per dataset (or none: all 1)")
        if not all(math.isfinite(w) and w > 0 for w in keys.rg_weights):
            raise ValueError("rg_weights: must be > 0 each")
    if keys.rg_size < 2:
        raise ValueError("rg_size: must be >= 2 (train and eval entries)")
    if keys.rg_seed < 0:
        raise ValueError("rg_seed: must be >= 0")
    for name, value in keys.rg_configs.items():
        if name not in keys.rg_tasks:
            raise ValueError(f"rg_configs: {name!r} is not in rg_tasks ({', '.join(keys.rg_tasks)})")
        if not isinstance(value, Mapping):
            raise ValueError(f"rg_configs: {name}'s settings must be a mapping, got {type(value).__name__}")


def extract(completion: str) -> str | None:
    """The answer a completion gives: its last ``<answer>...</answer>``, stripped (reasoning-gym's rule)."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(completion) if isinstance(completion, str) else None


def _config_key(config: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(config or {}), sort_keys=True, default=str)


@functools.lru_cache(maxsize=64)
def _scorer(name: str, config_key: str):
    """Dataset ``name``'s ``score_answer``, its dataset built once per process with those settings."""
    return _rg().create_dataset(name, **json.loads(config_key)).score_answer


def _check_configs(names: list[str], configs: Mapping[str, Any]) -> None:
    """Each dataset builds with its settings (reasoning-gym checks them when it builds one): a bad
    setting fails at config load, naming the dataset, not when the rows are generated."""
    for name in names:
        try:
            _scorer(name, _config_key(configs.get(name)))
        except Exception as err:  # reasoning-gym's checks raise TypeError, AssertionError, ValueError
            settings = dict(configs.get(name) or {})
            raise ValueError(f"rg_configs: reasoning-gym refused the settings of {name} {settings} "
                             f"({first_line(err)})") from None


def score(completion: str, entry: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> float:
    """reasoning-gym's score of ``completion`` on ``entry``, by its dataset built with ``config``
    (its ``rg_configs`` settings: a few scorers read them). Never raises: a scorer that fails on
    the model's text (reasoning-gym's parse what the model wrote) scores it 0, a wrong answer."""
    scorer = _scorer(entry["metadata"]["source_dataset"], _config_key(config))
    try:
        value = float(scorer(answer=extract(completion), entry=dict(entry)))
    except Exception:  # a scorer's parser meeting model text it did not expect
        return 0.0
    return value if math.isfinite(value) else 0.0


class ReasoningGymTask:
    """Single-turn reasoning-gym problems (see the module docstring)."""

    name = "reasoning_gym"

    @classmethod
    def config_from(cls, keys: ReasoningGymFields) -> ReasoningGymConfig:
        """The task's settings out of the run config's ``task`` section, checked at config load:
        ValueError ``"field: message"``, the field relative to ``task.``."""
        _check_names(list(keys.rg_tasks), sorted(_rg().factory.DATASETS))
        _check_settings(keys)
        _check_configs(list(keys.rg_tasks), keys.rg_configs)
        weights = tuple(keys.rg_weights) if keys.rg_weights is not None else (1.0,) * len(keys.rg_tasks)
        return ReasoningGymConfig(tasks=tuple(keys.rg_tasks), weights=weights, size=keys.rg_size, seed=keys.rg_seed,
                                  configs={k: dict(v) for k, v in keys.rg_configs.items()},
                                  system_prompt=keys.rg_system_prompt)

    def __init__(self, cfg: ReasoningGymConfig | Mapping[str, Any] | None = None):
        if cfg is None:
            raise ValueError("rg_tasks: the reasoning_gym task needs datasets: task.rg_tasks=[leg_counting, ...]")
        if isinstance(cfg, Mapping):  # build_task("reasoning_gym", {"rg_tasks": [...], ...})
            known = {f.name for f in fields(ReasoningGymFields)}
            unknown = sorted(set(cfg) - known)
            if unknown:
                raise ValueError(f"unknown reasoning_gym setting(s): {', '.join(map(str, unknown))} "
                                 f"(known: {', '.join(sorted(known))})")
            cfg = self.config_from(ReasoningGymFields(**cfg))
        self.cfg = cfg
        self._splits = self._build()

    def _system_prompt(self) -> str:
        from reasoning_gym.utils import SYSTEM_PROMPTS

        return SYSTEM_PROMPTS.get(self.cfg.system_prompt, self.cfg.system_prompt)

    def _entries(self) -> list[dict]:
        from reasoning_gym.composite import DatasetSpec

        specs = [DatasetSpec(name=name, weight=weight, config=dict(self.cfg.configs.get(name, {})))
                 for name, weight in zip(self.cfg.tasks, self.cfg.weights)]
        data = _rg().create_dataset("composite", size=self.cfg.size, seed=self.cfg.seed, datasets=specs)
        return [data[i] for i in range(self.cfg.size)]

    def _build(self) -> dict[str, tuple[Problem, ...]]:
        entries = self._entries()
        n_eval = max(1, len(entries) // EVAL_SHARE)
        evals, train = entries[len(entries) - n_eval:], entries[:len(entries) - n_eval]
        held_out = {e["question"] for e in evals}
        system = self._system_prompt()
        return {"train": tuple(self._problem("train", i, e, system) for i, e in enumerate(train)
                               if e["question"] not in held_out),
                "eval": tuple(self._problem("eval", i, e, system) for i, e in enumerate(evals))}

    def _problem(self, split: str, i: int, entry: dict, system: str) -> Problem:
        name = entry["metadata"]["source_dataset"]
        answer = "" if entry.get("answer") is None else str(entry["answer"])
        messages = ((("system", system),) if system else ()) + (("user", entry["question"]),)
        return Problem(uid=f"rg-{split}-{i}", prompt=render_plain(messages), answer=answer,
                       solution=f" <answer>{answer}</answer>" if answer else "", messages=messages,
                       fields={"rg_task": name, "rg_entry": entry, "rg_config": dict(self.cfg.configs.get(name, {}))})

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"reasoning_gym: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """reasoning-gym's score of the completion's last ``<answer>...</answer>``; never raises."""
        return score(completion, problem.fields["rg_entry"], problem.fields["rg_config"])


class RetryEnv:
    """One reasoning-gym row (``rg_entry``, ``rg_config``: the task's columns) per episode."""

    stop = ("</answer>",)  # a turn ends with its answer

    def __init__(self):
        self.entry: dict = {}
        self.config: dict = {}
        self.tries = 0

    def reset(self, row: dict):
        if "rg_entry" not in row:
            raise ValueError(f"row {row.get('uid')!r} has no rg_entry column: env.name=rg_retry plays "
                             "task.name=reasoning_gym rows")
        self.entry, self.config = row["rg_entry"], row.get("rg_config") or {}
        self.tries = 0
        return row["prompt"]

    def step(self, action: str):
        self.tries += 1
        value = score(action, self.entry, self.config)
        info = {"score": value, "tries": self.tries, "solved": value >= SOLVED}
        if info["solved"]:
            return "", 0.0, True, info
        answer = extract(action)
        if answer is None:
            return ("No answer found. Write your final answer between <answer> and </answer>, and try again.",
                    0.0, False, info)
        shown = answer if len(answer) <= 200 else answer[:200] + "…"
        return (f"Your answer {shown} is not correct (score {value:.2f}). Try again: think it over and give "
                "your final answer between <answer> and </answer>."), 0.0, False, info
