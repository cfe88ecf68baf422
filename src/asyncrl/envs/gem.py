"""GEM's offline text games as environments: ``env.name=gem:<GEM id>`` (docs/agents.md).

``env.name=gem:game:Sudoku-v0-easy`` plays GEM's ``game:Sudoku-v0-easy``
(https://github.com/axon-rl/gem, the ``gem-llm`` package: ``pip install asyncrl[envs]``) through the
environment seam (asyncrl.agents.env); ``env.kwargs`` override the game's registered settings
(``{max_turns: 8}``). What GEM returns becomes the seam's:

* the observation: GEM's text, then ``info["suffix"]`` when there is one ("Enter your next guess."),
  joined as GEM's own ObservationWrapper joins them (a newline between, ``info["prefix"]`` before;
  no suffix on the last observation, which the episode does not show anyway);
* the reward: GEM's per-turn reward (1 on success, -0.1 for a turn GEM cannot parse, ...);
* done: ``terminated or truncated`` (the game's own turn limit; ``env.max_turns`` is ours);
* info: GEM's info plus ``terminated``, ``truncated`` and the ``seed`` the game started from.

**Every member of a group starts from the same game.** The game is reset with a seed taken from
the row: its ``seed`` column (the ``gem`` task's rows have one, asyncrl.tasks.gem), else a hash of its
uid (any task's rows work). GEM games do not implement ``spawn(same_state=True)`` (only its dataset
envs do), so the first member's freshly reset game is kept and each member plays a deep copy of it.

**Randomness stays inside the game.** GEM's ``reset`` seeds Python's and NumPy's global generators
(``random.seed``, ``np.random.seed``; with no seed, from OS entropy, as ``gem.make`` does) and the
games draw from them while they play (2048's new tiles). Each game here owns a copy of both
states: they are swapped in around every GEM call and swapped out after, so a game's draws depend
on its seed alone, and the process's own generators are left as they were.

**Offline only.** :func:`refusal`, asked when the config is loaded (asyncrl.agents.NameFamily),
refuses in one line an id that needs the network (NLTK's word lists for Wordle, Hangman and
WordSearch; a dataset download for math, code, qa, logic and eval ids), GEM's reasoning-gym ids
(asyncrl runs reasoning-gym itself: asyncrl.envs.reasoning_gym), and a game that fails to start.
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import logging
import numbers
import random
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["GAMES", "GemEnv", "OFFLINE_GAMES", "offline_ids", "refusal", "seed_of"]

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
        first = (str(err).strip().splitlines() or [""])[0][:160]
        return f"{PREFIX}{gem_id} does not start in GEM itself ({type(err).__name__}: {first}); pick another game"
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


class _Games:
    """The entry of ``gem:`` in asyncrl.agents.ENVIRONMENTS: attribute ``<id>`` builds the game's
    environment (called with ``env.kwargs``); :meth:`refusal` is asked at config load."""

    refusal = staticmethod(refusal)

    def __getattr__(self, gem_id: str):
        if gem_id.startswith("__"):  # copy, pickle and inspect probe dunders: not game ids
            raise AttributeError(gem_id)
        return functools.partial(GemEnv, gem_id)


GAMES = _Games()
