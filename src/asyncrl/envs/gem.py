"""GEM's offline text games: the environments ``env.name=gem:<GEM id>``, the ``gem`` task's seed rows,
and the scripted experts whose games those rows demonstrate (docs/agents.md). Registered as the name
family ``gem:`` in asyncrl.agents.ENVIRONMENTS and as ``gem`` in asyncrl.tasks.TASKS.

**The environment** (:class:`GemEnv`). ``env.name=gem:game:Sudoku-v0-easy`` plays GEM's
``game:Sudoku-v0-easy`` (https://github.com/axon-rl/gem, the ``gem-llm`` package: ``pip install
asyncrl[envs]``) through the environment seam (asyncrl.agents.env); ``env.kwargs`` override the
game's registered settings (``{max_turns: 8}``). What GEM returns becomes the seam's:

* the observation: GEM's text, then ``info["suffix"]`` when there is one ("Enter your next guess."),
  joined as GEM's own ObservationWrapper joins them (a newline between, ``info["prefix"]`` before;
  no suffix on the last observation, which the episode does not show anyway);
* the reward: GEM's per-turn reward (1 on success, -0.1 for a turn GEM cannot parse, ...);
* done: ``terminated or truncated`` (the game's own turn limit; ``env.max_turns`` is ours);
* info: GEM's info plus ``terminated``, ``truncated`` and the ``seed`` the game started from.

**Every member of a group starts from the same game.** The game is reset with a seed taken from
the row: its ``seed`` column (the ``gem`` task's rows have one), else a hash of its uid (any task's
rows work). GEM games do not implement ``spawn(same_state=True)`` (only its dataset envs do), so the
first member's freshly reset game is kept and each member plays a deep copy of it.

**Randomness stays inside the game.** GEM's ``reset`` seeds Python's and NumPy's global generators
(``random.seed``, ``np.random.seed``; with no seed, from OS entropy, as ``gem.make`` does) and the
games draw from them while they play (2048's new tiles). Each game here owns a copy of both
states: they are swapped in around every GEM call and swapped out after, so a game's draws depend
on its seed alone, and the process's own generators are left as they were.

**Offline only.** :func:`refusal`, asked when the config is loaded (by :func:`env_entry`, the
resolver of the family ``gem:``), refuses in one line an id that needs the network (NLTK's word lists for Wordle, Hangman and
WordSearch; a dataset download for math, code, qa, logic and eval ids), GEM's reasoning-gym ids
(asyncrl runs reasoning-gym itself: asyncrl.envs.reasoning_gym), and a game that fails to start.

**The rows** (:class:`GemTask`, ``task=gem``). A GEM game makes its own problem: reset with a seed,
it draws the secret number, the board, the puzzle, and its first observation is the prompt. So a
row is a seed (its ``seed`` column), the same for every member of its group; train and eval seeds
never meet (train 0, 1, ...; eval from :data:`EVAL_SEED0`). The score is the game's: GEM's per-turn
rewards reach the episode's reward through the environment (discounted by ``env.turn_discount``),
and the task's own reward adds 0.

**Demonstrations.** When the run's game has a scripted expert (:data:`EXPERTS`: the GuessTheNumber
games), each train row is also a demonstrated episode for the embedded tiny model's warm start: the
expert plays the row's game (a real :class:`GemEnv` stepped with the row's seed, the run's
``env.kwargs``, at most ``env.max_turns`` turns: :func:`play`), the prompt is the game's first
observation and the segments are the expert's actions (trained) and the game's answers (observed),
rendered as an episode renders them (asyncrl.agents.render.PlainTurns). The config passes the game
to the task at load (``task.gem_env``, from ``env.*``: :meth:`GemTask.follow_env`). Eval rows never
carry solutions. Without an expert (or with ``task.gem_demos=false``) a row's prompt is a
placeholder that the environment's first observation replaces, and the warm start is the general one
(asyncrl.training.demonstrations). An expert plays from its observations alone, as the model has
to (``act(observation) -> action text``), and is imperfect on purpose: a warm start that already
plays the best policy leaves reinforcement learning nothing to find. A game family gets
demonstrations by one entry in :data:`EXPERTS` (``game:<Family>-v0-<mode>`` ids).
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import json
import logging
import numbers
import random
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from asyncrl.config.parts import GemFields
from asyncrl.core.user_code import first_line
from asyncrl.tasks.base import EOS_SEGMENT, Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["BISECT_PROB", "EVAL_SEED0", "EXPERTS", "GAMES", "env_entry", "OFFLINE_GAMES", "Expert", "GemConfig", "GemEnv",
           "GemFields", "GemTask", "GuessTheNumberExpert", "demonstrated_row", "expert_for", "family_of",
           "offline_ids", "play", "refusal", "seed_of"]

PREFIX = "gem:"
INSTALL = "pip install asyncrl[envs]"
# GEM's game families that run with no network, each tried by tests/agents/test_gem_env.py (make,
# reset, step with sockets refused); their ids are game:<Name>-v0-easy, -hard and -random
OFFLINE_GAMES = ("GuessTheNumber", "Mastermind", "Minesweeper", "FifteenPuzzle", "Sudoku", "TowerofHanoi",
                 "Game2048", "Sokoban", "Crosswords")
_OFFLINE_LIST = f"{', '.join(OFFLINE_GAMES)} (gem:game:<Name>-v0-easy, -hard or -random)"
# game families that call nltk.download("words") when made, or read that corpus (never shipped)
_NLTK_GAMES = {"Wordle": "downloads NLTK's word list at run time (nltk.download)",
               "Hangman": "downloads NLTK's word list at run time (nltk.download)",
               "WordSearch": "reads NLTK's word list, which is downloaded at run time"}
# id prefixes whose environments reach a service (GEM's tools and terminal wrap them)
_SERVICES = {"search": "calls a web search service", "mcp": "talks to MCP servers over the network",
             "terminal": "runs commands in a Docker container", "tool": "calls an external tool service"}
_STARTS_KEPT = 16  # freshly reset games kept for the next members of their group (rows × kwargs)


def _gem() -> Any:
    """The ``gem`` module; ImportError when it (or its reasoning_gym dependency) is missing."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import gem
    finally:
        # gem's __init__ calls logging.basicConfig(level=INFO): every library's INFO lines would be
        # printed by every process of the run from then on
        root.handlers[:] = handlers
        root.setLevel(level)
    return gem


def _registry() -> dict[str, Any]:
    _gem()
    from gem.envs.registration import ENV_REGISTRY

    return ENV_REGISTRY


def offline_ids() -> list[str]:
    """GEM's registered ids of the offline game families (a few of which may not start: :func:`refusal`)."""
    return [gem_id for gem_id in _registry()
            if gem_id.startswith("game:") and gem_id[5:].split("-v", 1)[0] in OFFLINE_GAMES]


def refusal(gem_id: str) -> str | None:
    """Why ``env.name=gem:<gem_id>`` cannot run here (one line, after "env.name: "), or None."""
    name = PREFIX + gem_id
    try:
        registry = _registry()
    except ImportError as err:
        missing = getattr(err, "name", None) or "gem"
        return f"{name} needs GEM (the gem-llm package), which is not installed (no module {missing!r}): {INSTALL}"
    family, _, rest = gem_id.partition(":")
    if family == "rg":
        return (f"{name} is reasoning-gym's {rest!r}, which asyncrl runs itself: task.name=reasoning_gym "
                f"task.rg_tasks=[{rest}] (single turn), with env.name=rg_retry for retries")
    why = _SERVICES.get(family)
    if why is None and gem_id not in registry:
        close = difflib.get_close_matches(gem_id, list(registry), n=3, cutoff=0.6)
        hint = f" (close: {', '.join(PREFIX + c for c in close)})" if close else ""
        return f"{name} is not a GEM id{hint}; GEM's offline games run here: {_OFFLINE_LIST}"
    if why is None and family == "game":
        game = rest.split("-v", 1)[0]
        why = _NLTK_GAMES.get(game)
        if why is None and game not in OFFLINE_GAMES:
            why = "is not one of the GEM games asyncrl has checked to run offline"
        if why is None:
            return _start_failure(gem_id)
    if why is None:
        dataset = registry[gem_id].kwargs.get("dataset_name")
        why = f"downloads the dataset {dataset} at run time" if dataset else "needs the network at run time"
    return f"{name} {why}; only GEM's offline games run here: {_OFFLINE_LIST}"


@functools.lru_cache(maxsize=None)
def _start_failure(gem_id: str) -> str | None:
    """Why an offline game does not start (GEM's own bugs: game:FifteenPuzzle-v0-random and
    game:Crosswords-v0-random of gem-llm 0.1.0 raise in ``make``), or None: found at config load,
    not in the middle of a run's first episodes."""
    try:
        _started(gem_id, {}, 0)
    except Exception as err:  # a game's own bug may raise anything
        return f"{PREFIX}{gem_id} does not start in GEM itself ({first_line(err, 160)}); pick another game"
    return None


def seed_of(row: dict) -> int:
    """The seed a row's game starts from: its ``seed`` column (a non-negative int), else a hash of
    its uid, stable across processes (Python's ``hash`` is salted per process)."""
    seed = row.get("seed")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0:  # NumPy's ints too
        return int(seed) % 2**32  # np.random.seed takes 32 bits
    return int.from_bytes(hashlib.sha256(str(row.get("uid")).encode()).digest()[:4], "big")


@contextmanager
def _own_generators(state: list) -> Iterator[None]:
    """Run GEM code with ``state`` ([random's state, NumPy's]; empty: the process's) as the global
    generators' state; ``state`` holds theirs afterwards and the process gets its own back."""
    import numpy as np

    saved = random.getstate(), np.random.get_state()
    try:
        if state:
            random.setstate(state[0])
            np.random.set_state(state[1])
        yield
    finally:
        state[:] = [random.getstate(), np.random.get_state()]
        random.setstate(saved[0])
        np.random.set_state(saved[1])


_STARTS: OrderedDict[tuple, tuple] = OrderedDict()


def _started(gem_id: str, kwargs: dict, seed: int) -> tuple[Any, list, str, dict]:
    """(a game just reset with ``seed``, its generators' state, the first observation, info): a deep
    copy of the one kept for (gem_id, kwargs, seed), made and reset on first use."""
    key = (gem_id, repr(sorted(kwargs.items())), seed)
    if key not in _STARTS:
        state: list = []
        with _own_generators(state):
            game = _gem().make(gem_id, **kwargs)
            observation, info = game.reset(seed=seed)
        _STARTS[key] = (game, state, observation, info)
        while len(_STARTS) > _STARTS_KEPT:
            _STARTS.popitem(last=False)
    _STARTS.move_to_end(key)
    return copy.deepcopy(_STARTS[key])


def _observation(text: Any, info: dict, done: bool = False) -> Any:
    """GEM's text with its info's prefix and suffix, joined as GEM's ObservationWrapper joins them
    (no suffix once the game is over: it asks for the next move); anything but text is passed on
    for the seam to refuse (it names the environment and the row)."""
    if not isinstance(text, str):
        return text
    suffix = "" if done else info.get("suffix") or ""
    if suffix and text and not text.endswith("\n"):
        text += "\n"
    return f"{info.get('prefix') or ''}{text}{suffix}"


class GemEnv:
    """One GEM game per episode; ``kwargs`` (``env.kwargs``) override the game's registered settings."""

    def __init__(self, gem_id: str, **kwargs: Any):
        self.gem_id, self.kwargs = gem_id, kwargs
        self.game: Any = None
        self.generators: list = []
        self.seed = 0

    def reset(self, row: dict):
        self.seed = seed_of(row)
        self.game, self.generators, observation, info = _started(self.gem_id, self.kwargs, self.seed)
        return _observation(observation, info)

    def step(self, action: str):
        with _own_generators(self.generators):
            observation, reward, terminated, truncated, info = self.game.step(action)
        done = bool(terminated or truncated)
        info = {**(info or {}), "terminated": bool(terminated), "truncated": bool(truncated), "seed": self.seed}
        return _observation(observation, info, done), reward, done, info


def env_entry(gem_id: str) -> str:
    """The resolver of the family ``gem:`` of asyncrl.agents.ENVIRONMENTS: the entry of
    ``env.name=gem:<gem_id>`` (the import path of its factory, :data:`GAMES`'s attribute), or
    ValueError with :func:`refusal`'s line for an id that cannot run here (asked at config load)."""
    why = refusal(gem_id)
    if why is not None:
        raise ValueError(why)
    return f"{__name__}:GAMES.{gem_id}"


class _Games:
    """Attribute ``<id>`` builds the game's environment (called with ``env.kwargs``)."""

    def __getattr__(self, gem_id: str):
        if gem_id.startswith("__"):  # copy, pickle and inspect probe dunders: not game ids
            raise AttributeError(gem_id)
        return functools.partial(GemEnv, gem_id)


GAMES = _Games()


# Scripted experts: their games are the gem task's demonstrations

BISECT_PROB = 0.7  # GuessTheNumber: the midpoint this often, else a uniform draw in the range still possible


class Expert(Protocol):
    def act(self, observation: str) -> str:
        """The action text answering ``observation`` (the game's first observation, then each answer)."""
        ...


_RANGE = re.compile(r"between (\d+) and (\d+) \(inclusive\)")
_HINT = re.compile(r"you guessed (\d+), and the target number is (higher|lower) than")


class GuessTheNumberExpert:
    """A noisy binary search: the range comes from the game's instructions ("between 1 and 10
    (inclusive)") and shrinks with each hint ("... the target number is higher than 5"); each guess
    is the midpoint with probability ``bisect_prob``, else a uniform draw in the range still possible
    (never a number already ruled out, so every guess is a valid one)."""

    def __init__(self, rng: random.Random, bisect_prob: float = BISECT_PROB):
        self.rng, self.bisect_prob = rng, bisect_prob
        self.low = self.high = 0

    def act(self, observation: str) -> str:
        bounds = _RANGE.search(observation)
        if bounds:
            self.low, self.high = int(bounds.group(1)), int(bounds.group(2))
        hint = _HINT.search(observation)
        if hint:
            guessed = int(hint.group(1))
            if hint.group(2) == "higher":
                self.low = max(self.low, guessed + 1)
            else:
                self.high = min(self.high, guessed - 1)
        self.high = max(self.high, self.low)  # a contradicting hint: keep guessing in a one-number range
        if self.rng.random() < self.bisect_prob:
            guess = (self.low + self.high) // 2
        else:
            guess = self.rng.randint(self.low, self.high)
        return f"\\boxed{{{guess}}}"


# game family (the <Family> of game:<Family>-v0-<mode>) -> an expert built with the game's own generator
EXPERTS: dict[str, Callable[[random.Random], Expert]] = {"GuessTheNumber": GuessTheNumberExpert}


def family_of(gem_id: str) -> str:
    """``game:GuessTheNumber-v0-easy`` -> ``GuessTheNumber`` (the id itself when it is not a game's)."""
    family, _, rest = gem_id.partition(":")
    return rest.split("-v", 1)[0] if family == "game" else gem_id


def expert_for(gem_id: str) -> Callable[[random.Random], Expert] | None:
    """The expert of ``gem_id``'s game family, or None when it has none."""
    return EXPERTS.get(family_of(gem_id))


def play(gem_id: str, kwargs: dict, seed: int, max_turns: int) -> tuple[str, list[tuple[str, str | None]]]:
    """(the game's first observation, [(action, the game's answer or None when the episode ends
    there)]): the expert of ``gem_id`` plays the game reset with ``seed`` for at most ``max_turns``
    turns (``env.max_turns``), as an episode would; the answer that ends it is not shown, as in an
    episode. The expert draws from its own generator, seeded from ``seed`` through a string: the
    game seeds Python's generator with ``seed`` itself, and the same stream would tell the expert
    the game's draws (the secret number)."""
    make = expert_for(gem_id)
    if make is None:
        raise ValueError(f"gem:{gem_id} has no scripted expert (games with one: {', '.join(EXPERTS)})")
    expert, env = make(random.Random(f"expert-{seed}")), GemEnv(gem_id, **kwargs)
    observation = first = env.reset({"seed": seed})
    turns: list[tuple[str, str | None]] = []
    for turn in range(1, max_turns + 1):
        action = expert.act(observation)
        observation, _, done, _ = env.step(action)
        ends = done or turn == max_turns
        turns.append((action, None if ends else observation))
        if ends:
            break
    return first, turns


# The gem task: seed rows, demonstrated where the game has an expert

N_TRAIN, N_EVAL = 2000, 200
EVAL_SEED0 = 1_000_000  # eval seeds start here, far past any train seed
PLACEHOLDER = "Play the game."  # replaced by the game's first observation (the environment's reset)


@dataclass(frozen=True)
class GemConfig:
    """What :class:`GemTask` is built with: the game (None: no demonstrations), its settings, the turn limit."""

    game: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 4


def _segments(turns: list[tuple[str, str | None]]) -> tuple[tuple[str, bool], ...]:
    """The expert's actions (trained) and the game's answers (observed), as an episode renders them
    without a chat template: " <action>" and eos (a GEM turn has no stop string: it ends at eos),
    then "\\n<role>: <answer>\\nassistant:"; the last action's eos is the row's own."""
    segments: list[tuple[str, bool]] = []
    for action, answer in turns:
        segments.append((f" {action}", True))
        if answer is not None:
            segments.append((EOS_SEGMENT, True))
            segments.append((f"\nuser: {answer.strip()}\nassistant:", False))
    return tuple(segments)


def demonstrated_row(uid: str, seed: int, game: str, kwargs: dict, max_turns: int) -> Problem:
    """A train row whose prompt is the game's first observation and whose segments are the expert's game."""
    try:
        first, turns = play(game, kwargs, seed, max_turns)
    except Exception as err:  # the game's own error on these settings (GEM raises anything)
        raise ValueError(f"gem_env: gem:{game} with env.kwargs={kwargs} did not play its seed {seed} "
                         f"({type(err).__name__}: {str(err).strip()[:160]})") from None
    messages = (("user", first),)
    segments = _segments(turns)
    solution = "".join(text for text, _ in segments if text != EOS_SEGMENT)
    return Problem(uid=uid, prompt=render_plain(messages), answer="", solution=solution,
                   fields={"seed": seed}, messages=messages, segments=segments)


@functools.lru_cache(maxsize=4)
def _demonstrated(game: str, kwargs_json: str, max_turns: int, count: int) -> tuple[Problem, ...]:
    # a run builds its task several times (config load, warm start, each worker): one play-through each
    kwargs = json.loads(kwargs_json)
    return tuple(demonstrated_row(f"gem-train-{i}", i, game, kwargs, max_turns) for i in range(count))


def _seed_rows(split: str, first: int, count: int) -> tuple[Problem, ...]:
    messages = (("user", PLACEHOLDER),)
    return tuple(Problem(uid=f"gem-{split}-{i}", prompt=render_plain(messages), answer="", solution="",
                         fields={"seed": first + i}, messages=messages) for i in range(count))


class GemTask:
    name = "gem"

    @classmethod
    def config_from(cls, keys: GemFields) -> GemConfig:
        """The task's settings out of the run config's ``task`` section (``gem_env`` filled at load)."""
        env = keys.gem_env or {}
        game = env.get("id") if keys.gem_demos else None
        return GemConfig(game=game, kwargs=dict(env.get("kwargs") or {}), max_turns=int(env.get("max_turns") or 4))

    @staticmethod
    def follow_env(task: Any, env: Any) -> None:
        """``task.gem_env`` from ``env.*`` (the id, ``env.kwargs``, ``env.max_turns``), so that the train
        rows can demonstrate the game the episodes play; always rewritten, so it never names another
        game. Asked of the task's factory when the run's config is validated (asyncrl.runtime.validate)."""
        name = env.name
        task.gem_env = ({"id": name[len(PREFIX):], "kwargs": dict(env.kwargs), "max_turns": env.max_turns}
                        if name.startswith(PREFIX) else {})

    def __init__(self, cfg: GemConfig | None = None):
        cfg = cfg if cfg is not None else GemConfig()
        if cfg.game is not None and expert_for(cfg.game) is not None:
            train = _demonstrated(cfg.game, json.dumps(cfg.kwargs, sort_keys=True), cfg.max_turns, N_TRAIN)
        else:
            train = _seed_rows("train", 0, N_TRAIN)
        self._splits = {"train": train, "eval": _seed_rows("eval", EVAL_SEED0, N_EVAL)}

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"gem: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """0: the game scores the episode with its per-turn rewards (:class:`GemEnv`)."""
        del completion, problem
        return 0.0
