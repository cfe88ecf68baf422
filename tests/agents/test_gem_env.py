"""GEM's games through the environment seam (asyncrl.envs.gem, ``env.name=gem:<id>``): a game
plays turn by turn through the checked seam and the episode runner; every member of a group starts
from the same game and draws the same randomness; each offline game runs with the network refused;
every id of GEM's registry is run or refused in one line naming why (and none outside the offline
list is run); a missing ``gem`` package is one line with the install command; the ``gem-*`` rows
of docs/errors.md run through the real CLI; and one tiny training plays a GEM game end to end."""

import json
import os
import random
import socket
import sys
from pathlib import Path

import pytest

from .episode_fakes import LONE_NEWLINE, ScriptedEngine, chat_tokenizer

from asyncrl.agents import ENVIRONMENTS
from asyncrl.agents.env import build_env, env_reset, env_step
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
from asyncrl.agents.render import make_turns
from asyncrl.config import ConfigError
from asyncrl.core.import_path import resolve
from asyncrl.runtime.validate import load_run_config
from asyncrl.tasks import build_task
from cli_forks import run_cli, shared_forks  # tests/: the CLI forked from one imported copy

REPO = Path(__file__).resolve().parents[2]
EASY = "game:GuessTheNumber-v0-easy"


def gem_env(gem_id: str, **kwargs):
    """An environment as the rollout builds one: ENVIRONMENTS[env.name], resolved, env.kwargs."""
    return build_env(resolve(ENVIRONMENTS[f"gem:{gem_id}"]), kwargs)


@pytest.fixture(scope="module")
def gem():
    return pytest.importorskip("gem")


@pytest.fixture(scope="module")
def rows():
    return build_task("gem").problems("train")


def test_a_game_plays_through_the_seam(gem, rows):
    cfg = load_run_config(None, ["task=gem", f"env.name=gem:{EASY}"])
    assert cfg.env.name == f"gem:{EASY}" and cfg.env.episodes
    env, row = gem_env(EASY), rows[0]
    prompt = env_reset(env, row, 10)
    assert prompt[0]["role"] == "user" and "Guess The Number" in prompt[0]["content"]
    assert prompt[0]["content"].endswith("\nEnter your next guess.")  # GEM's info["suffix"], on a line of its own
    secret = env.game.game_number
    wrong = 1 if secret != 1 else 2
    result = env_step(env, row, f"I guess \\boxed{{{wrong}}}", 10)
    assert not result.done and result.reward == 0.0
    assert "higher" in result.messages[0]["content"] or "lower" in result.messages[0]["content"]
    assert result.messages[0]["content"].endswith("Enter your next guess.")
    result = env_step(env, row, f"\\boxed{{{secret}}}", 10)
    assert result.done and result.reward == 1.0
    assert result.messages[0]["content"].startswith("Congratulations")  # not shown: the episode ends here
    assert "next guess" not in result.messages[0]["content"]
    assert result.info["terminated"] and not result.info["truncated"] and result.info["seed"] == row.fields["seed"]


def test_a_turn_gem_cannot_read_ends_the_game_with_its_penalty(gem, rows):
    env = gem_env(EASY)
    env_reset(env, rows[0], 10)
    result = env_step(env, rows[0], "seven", 10)
    assert result.done and result.reward == pytest.approx(-0.1)  # GEM's format_error_reward


def test_group_members_share_the_start_state_and_the_draws(gem, rows):
    """Each member has its own instance reset with the row's seed: same game, same randomness (2048
    adds a random tile after every move), whatever else used the process's generators between."""
    a, b = gem_env("game:Game2048-v0-easy"), gem_env("game:Game2048-v0-easy")
    assert env_reset(a, rows[5], 10) == env_reset(b, rows[5], 10)
    assert a.game is not b.game
    random.seed(123)
    before = random.getstate()
    moves = ["\\boxed{left}", "\\boxed{up}", "\\boxed{right}", "\\boxed{down}"] * 3
    seen_a = [env_step(a, rows[5], m, 10).messages for m in moves]
    assert random.getstate() == before  # GEM's draws never touch the process's generators
    random.random()  # the process draws between the members' turns
    seen_b = [env_step(b, rows[5], m, 10).messages for m in moves]
    assert seen_a == seen_b
    others = {env_reset(gem_env("game:Game2048-v0-easy"), r, 10)[0]["content"] for r in rows[:8]}
    assert len(others) > 1  # other rows, other games


def test_a_row_without_a_seed_column_starts_from_a_hash_of_its_uid(gem):
    from asyncrl.envs.gem import seed_of

    arithmetic = build_task("arithmetic").problems("train")[:2]
    assert seed_of({"uid": "a"}) == seed_of({"uid": "a"}) != seed_of({"uid": "b"})
    assert seed_of({"uid": "a", "seed": 7}) == 7 and seed_of({"uid": "a", "seed": True}) == seed_of({"uid": "a"})
    x, y = gem_env("game:Mastermind-v0-easy"), gem_env("game:Mastermind-v0-easy")
    env_reset(x, arithmetic[0], 10), env_reset(y, arithmetic[0], 10)
    assert x.game.game_code == y.game.game_code


def test_the_episode_runner_plays_a_group_from_one_start(gem, rows):
    tok = chat_tokenizer(LONE_NEWLINE)
    turns = make_turns(tok, None, ())
    limits = EpisodeLimits(max_turns=3, turn_tokens=64, episode_tokens=2000, step_timeout_s=10)
    runner = EpisodeRunner(lambda: gem_env("game:Mastermind-v0-easy"), turns, tok, limits,
                           scheduling=Scheduling(schedule="rounds"))  # the script's k-th call answers round k
    engine = ScriptedEngine(tok, [[" \\boxed{1 2}", " \\boxed{1 2}", " nothing"]] * 3)
    episodes = runner.run(engine, [rows[1]], 3)
    assert len({tuple(e.prompt_ids) for e in episodes}) == 1
    assert [e.turns for e in episodes] == [3, 3, 1]  # GEM ends a game at a turn it cannot read
    assert episodes[0].messages == episodes[1].messages  # same start, same moves: same game
    assert episodes[2].rewards == [pytest.approx(-0.1)] and episodes[2].end == "done"


def _offline_ids() -> list[str]:
    """GEM's ids of the offline families (none without gem: the tests that take them are skipped)."""
    from asyncrl.envs.gem import offline_ids

    try:
        return offline_ids()
    except ImportError:
        return []


@pytest.mark.parametrize("gem_id", _offline_ids())
def test_each_offline_game_runs_with_the_network_refused(gem, rows, gem_id, monkeypatch):
    from asyncrl.envs import gem as adapter

    def refuse(*args, **kwargs):
        raise OSError(f"{gem_id} tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    adapter._STARTS.clear()  # made now, not copied from an earlier test's game
    why = adapter.refusal(gem_id)
    if why is not None:  # GEM's own bugs in two -random ids (gem-llm 0.1.0): refused, not run
        assert gem_id in ("game:FifteenPuzzle-v0-random", "game:Crosswords-v0-random") and "does not start" in why
        return
    env = gem_env(gem_id)
    prompt = env_reset(env, rows[0], 60)
    assert prompt[0]["content"].strip()
    result = env_step(env, rows[0], "\\boxed{1}", 60)
    assert isinstance(result.reward, float)


REFUSED = [
    ("qa:HotpotQA", "downloads the dataset axon-rl/HotpotQA at run time"),
    ("math:GSM8K", "downloads the dataset axon-rl/GSM-8k at run time"),
    ("code:CodeContest", "downloads the dataset axon-rl/CodeContest at run time"),
    ("logic:RuleTaker-d0", "downloads the dataset"),
    ("eval:AIME24", "downloads the dataset axon-rl/math-eval at run time"),
    ("game:Wordle-v0-easy", "downloads NLTK's word list"),
    ("game:Hangman-v0-hard", "downloads NLTK's word list"),
    ("game:WordSearch-v0-easy", "reads NLTK's word list"),
    ("terminal:docker", "runs commands in a Docker container"),
    ("search:wiki", "calls a web search service"),
    ("rg:leg_counting", "task.name=reasoning_gym task.rg_tasks=[leg_counting]"),
    ("game:GuessTheNumbr-v0-easy", "is not a GEM id (close: gem:game:GuessTheNumber-v0-easy"),
    ("game:FifteenPuzzle-v0-random", "does not start in GEM itself (TypeError"),
]


@pytest.mark.parametrize("gem_id, why", REFUSED, ids=[r[0] for r in REFUSED])
def test_an_id_that_cannot_run_offline_is_refused_at_config_load_in_one_line(gem, gem_id, why):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["task=gem", f"env.name=gem:{gem_id}"])
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: env.name: gem:{gem_id} ") and why in text
    if "not a GEM id" not in text and "does not start" not in text and not gem_id.startswith("rg:"):
        assert "only GEM's offline games run here: GuessTheNumber, Mastermind" in text


@pytest.mark.slow  # every GEM id (an optional integration's registry): make test-all
def test_every_registered_gem_id_is_run_or_refused_and_only_the_offline_games_run(gem):
    from asyncrl.envs.gem import OFFLINE_GAMES, refusal
    from gem.envs.registration import ENV_REGISTRY

    verdicts = {gem_id: refusal(gem_id) for gem_id in ENV_REGISTRY}
    assert all(why is None or ("\n" not in why and why.startswith(f"gem:{gem_id} "))
               for gem_id, why in verdicts.items())
    run = {gem_id for gem_id, why in verdicts.items() if why is None}
    assert run == set(_offline_ids()) - {"game:FifteenPuzzle-v0-random", "game:Crosswords-v0-random"}
    assert len(run) == 26 and "game:Game2048-v0-extreme-hard" in run
    assert {g.split(":")[1].split("-v0")[0] for g in run} == set(OFFLINE_GAMES)


def test_gem_not_installed_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gem", None)  # `import gem` now fails, as without the package
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"env.name=gem:{EASY}"])
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: env.name: gem:{EASY} needs GEM")
    assert text.endswith("pip install asyncrl[envs]")
    assert load_run_config(None, ["env.name=guess"]).env.name == "guess"  # the other names never import gem


def test_the_root_logger_is_left_as_it_was(gem):
    """gem's __init__ calls logging.basicConfig(level=INFO); the adapter puts the root logger back."""
    import logging

    from asyncrl.envs.gem import _gem

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    _gem()
    assert (list(root.handlers), root.level) == before


ERRORS_MD = REPO / "docs" / "errors.md"
NO_GEM = "import sys; sys.modules['gem'] = None"  # the CLI child, as if gem-llm were not installed


def _error_rows() -> list[tuple[str, list[str], str]]:
    """docs/errors.md's ``gem-*`` rows: (case, arguments, expected substring)."""
    rows = []
    for line in ERRORS_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `gem-") and len(cells) == 3:
            rows.append((cells[0].strip("`"), cells[1].split("`")[1].split(), cells[2].split("`")[1]))
    return rows


@pytest.mark.parametrize("case, args, expected", _error_rows(), ids=[r[0] for r in _error_rows()])
def test_the_gem_rows_of_docs_errors_are_one_line(tmp_path, case, args, expected):
    if case != "gem-not-installed":
        pytest.importorskip("gem")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    args = [*args, "run.progress=false"]
    proc = (shared_forks().run(args, tmp_path, env, prelude=NO_GEM, timeout=120, replace_env=True)
            if case == "gem-not-installed" else run_cli(args, tmp_path, env, timeout=120))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert expected in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_there_are_gem_rows_in_the_docs():
    assert {r[0] for r in _error_rows()} == {"gem-needs-network", "gem-not-installed"}


def test_a_gem_game_trains_end_to_end(gem, tmp_path, cache):
    """Two steps of GRPO on GEM's Mastermind, sync, on the embedded tiny model (no warm-start steps:
    the prompts are the game's, and nothing here demonstrates its moves). The untrained policy
    writes no ``\\boxed{...}`` move, so GEM ends each game at its first turn with its format penalty
    (-0.1): the game's prompt reached the policy and its reward the batch. Several turns of a game
    are played in test_the_episode_runner_plays_a_group_from_one_start."""
    args = ["train", "task=gem", "env.name=gem:game:Mastermind-v0-easy", "env.max_turns=3", "env.turn_tokens=8",
            "env.episode_tokens=64", "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4",
            "model.num_kv_heads=2", "model.intermediate_size=128", "model.vocab_size=400", "model.max_positions=1024",
            "pretrain.steps=0", "pretrain.torch_threads=1", "rollout.prompts_per_step=2",
            "rollout.samples_per_prompt=2",
            "trainer.n_minibatches=1", "trainer.steps=2", "eval.n_problems=2", "eval.every=0", "run.mode=sync",
            "run.progress=false", "run.report_to=[]", "run.name=gem", f"policy.cache_dir={cache}"]
    proc = run_cli(args, tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "gem"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2 and all(r["episode/turns_mean"] >= 1 for r in steps)
    assert all(r["reward_mean"] == pytest.approx(-0.1) for r in steps)  # GEM's format penalty, every episode
    completions = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert completions and all("You are playing Mastermind" in c["prompt"] for c in completions)
