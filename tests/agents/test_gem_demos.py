"""Demonstrated GEM games (asyncrl.envs.gem): the GuessTheNumber expert
wins most games within the game's turn limit without always bisecting; a demonstrated train row is,
token for token, the episode the runner plays with the same actions; the warm start of
``task=gem env.name=gem:game:GuessTheNumber-v0-easy`` learns from those games, while a game with no
expert still gets the general warm start; eval rows never carry solutions."""

import random

import pytest

from .episode_fakes import ScriptedEngine

from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner
from asyncrl.agents.render import PlainTurns
from asyncrl.runtime.validate import load_run_config
from asyncrl.envs.gem import GemEnv, expert_for, family_of, play
from asyncrl.tasks.base import EOS_SEGMENT
from asyncrl.training.demonstrations import warm_start_source
from asyncrl.training.pretrain import sft_batch
from asyncrl.tasks import configured_task

EASY = "game:GuessTheNumber-v0-easy"


@pytest.fixture(scope="module")
def gem():
    return pytest.importorskip("gem")


@pytest.fixture(scope="module")
def easy_task(gem):
    return configured_task(load_run_config(None, ["task=gem", f"env.name=gem:{EASY}"]).task)


@pytest.mark.parametrize("gem_id", [EASY, "game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0-random"])
def test_the_expert_wins_most_games_within_the_turn_limit(gem, gem_id):
    wins, off_midpoint = 0, 0
    for seed in range(150):
        env, expert = GemEnv(gem_id), expert_for(gem_id)(random.Random(seed))
        observation, done, reward = env.reset({"seed": seed}), False, 0.0
        low, high = env.game.min_number, env.game.max_number
        while not done:
            action = expert.act(observation)
            guess = int(action[len("\\boxed{"):-1])
            off_midpoint += guess != (expert.low + expert.high) // 2
            assert low <= guess <= high  # never outside the game's range
            observation, reward, done, info = env.step(action)
        wins += reward == 1.0 and info["terminated"]
    assert wins >= 0.8 * 150
    assert off_midpoint > 20  # imperfect on purpose: RL has something to improve


def test_a_demonstrated_row_is_the_episode_of_its_actions_token_for_token(gem, easy_task, tiny_policy):
    _, tok, _ = tiny_policy
    rows = easy_task.problems("train")
    row = next(p for p in rows if len(p.segments) >= 5)  # three turns at least
    assert row.fields["seed"] == int(row.uid.rsplit("-", 1)[1])
    actions = [text for text, trained in row.segments if trained]
    runner = EpisodeRunner(lambda: GemEnv(EASY), PlainTurns(tok), tok, EpisodeLimits(max_turns=4, turn_tokens=64,
                                                                                      episode_tokens=4096))
    # an engine ends each GEM turn with eos (no stop string), as the demonstration does
    actions = [a for a in actions if a != EOS_SEGMENT]
    engine = ScriptedEngine(tok, [[tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
                                  for a in actions])
    episode, = runner.run(engine, [row], 1)
    assert episode.end in ("done", "max_turns") and episode.turns == len(actions)
    ids, _, labels = sft_batch(tok, [row])
    assert ids[0].tolist() == episode.prompt_ids + episode.ids
    trained = [i for i, lab in zip(ids[0].tolist(), labels[0].tolist()) if lab != -100]
    assert trained == [i for i, seen in zip(episode.ids, episode.observed) if not seen]
    assert trained.count(tok.eos_token_id) == len(actions)  # every turn ends at eos, as sampled
    assert "Guess The Number" in row.prompt
    assert row.solution == "".join(t for t, _ in row.segments if t != EOS_SEGMENT)


def test_demonstrations_are_cheap_deterministic_and_train_only(gem, easy_task):
    again = configured_task(load_run_config(None, ["task=gem", f"env.name=gem:{EASY}"]).task)
    assert easy_task.problems("train") == again.problems("train")
    assert all(p.segments for p in easy_task.problems("train"))
    assert all(not p.solution and not p.segments for p in easy_task.problems("eval"))
    first, turns = play(EASY, {"max_turns": 2}, 3, max_turns=2)  # env.kwargs and env.max_turns are kept
    assert "within 2 turns" in first and len(turns) <= 2 and turns[-1][1] is None
    assert family_of(EASY) == "GuessTheNumber" and expert_for("game:Mastermind-v0-easy") is None


def test_the_warm_start_plays_the_game_and_others_fall_back(gem):
    cfg = load_run_config(None, ["task=gem", f"env.name=gem:{EASY}"])
    source = warm_start_source(cfg)
    assert not source.general and len(source.demonstrations) == 2000
    assert all("\\boxed{" in p.solution for p in source.demonstrations)
    off = load_run_config(None, ["task=gem", f"env.name=gem:{EASY}", "task.gem_demos=false"])
    assert warm_start_source(off).general
    other = load_run_config(None, ["task=gem", "env.name=gem:game:Mastermind-v0-easy"])
    assert other.task.gem_env["id"] == "game:Mastermind-v0-easy"
    assert warm_start_source(other).general  # no expert: the general (arithmetic) warm start
