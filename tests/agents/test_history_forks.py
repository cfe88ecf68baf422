"""Histories that rewrite the past fork a new row of the same episode instead of ending it: a
template that renders earlier turns differently once messages follow, and (``env.history=template``)
a template that drops earlier ``<think>`` blocks. Every row of an episode trains on the episode's
reward and advantage; the group baseline counts each episode once."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from .episode_fakes import DROPS_THINK, Countdown, ScriptedEngine, chat_tokenizer

from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
from asyncrl.agents.render import ChatTurns
from asyncrl.agents.stats import EpisodeStats
from asyncrl.objectives.advantages import episode_advantages, group_advantages
from asyncrl.runtime.buffer import Group, concat_groups
from asyncrl.tasks import Problem
from asyncrl.types import Batch

PROBLEM = Problem(uid="p0", prompt="go", answer="", solution="", messages=(("user", "go"),))
LIMITS = EpisodeLimits(max_turns=4, turn_tokens=64, episode_tokens=400)
# numbers every earlier turn by the conversation's length: appending a message rewrites them all
COUNTS_TURNS = ("{% for m in messages %}{{ m.role }}{{ messages|length }}: {{ m.content }}<|im_end|>"
                "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def play(template, history, script):
    tok = chat_tokenizer(template)
    eot = tok.eos_token_id
    turns = [tok(text, add_special_tokens=False)["input_ids"] + [eot] for text in script]
    engine = ScriptedEngine(tok, [[t] for t in turns])
    runner = EpisodeRunner(Countdown, ChatTurns(tok), tok, LIMITS, scheduling=Scheduling(schedule="rounds"),
                           history=history)
    episode, = runner.run(engine, [PROBLEM], 1)
    return tok, engine, turns, episode


def test_a_template_that_drops_earlier_thinking_forks_under_history_template():
    tok, engine, turns, episode = play(DROPS_THINK, "template", ["<think>hm</think> more", "<think>ok</think> stop"])
    assert episode.end == "done" and episode.forks == 1 and len(episode.rows) == 2
    first, second = episode.rows
    assert first.ids == turns[0] and second.ids == turns[1]  # each row: the engine's own ids, trained
    # the second row starts from the conversation as the template shows it: turn 1's thinking dropped
    prompt = tok.decode(second.prompt_ids)
    assert "<think>hm</think>" not in prompt and "more" in prompt and "go on" in prompt
    assert engine.calls[1] == [second.prompt_ids]  # and the engine continued from exactly that


def test_the_same_episode_keeps_one_row_under_history_tokens():
    _, engine, turns, episode = play(DROPS_THINK, "tokens", ["<think>hm</think> more", "<think>ok</think> stop"])
    assert episode.forks == 0 and len(episode.rows) == 1
    assert episode.ids[:len(turns[0])] == turns[0] and episode.ids[-len(turns[1]):] == turns[1]
    assert engine.calls[1] == [episode.prompt_ids + episode.ids[:-len(turns[1])]]


def test_a_template_that_rewrites_earlier_turns_forks_instead_of_ending():
    tok, engine, turns, episode = play(COUNTS_TURNS, "tokens", ["more", "more", "stop"])
    assert episode.end == "done" and episode.turns == 3  # it used to end at the first observation
    assert episode.forks == 2 and [r.ids for r in episode.rows] == turns
    assert all(r.observed == [False] * len(r.ids) for r in episode.rows)
    assert tok.decode(episode.rows[2].prompt_ids).startswith("user5: go")  # rendered anew, 5 messages


def test_forked_rows_become_training_rows_with_their_episode():
    _, _, _, episode = play(COUNTS_TURNS, "tokens", ["more", "stop"])
    gen = episodes_to_generation(episode.rows, pad_id=0)
    assert gen.completion_ids.shape[0] == 2 and bool(gen.completion_mask.any(dim=1).all())
    stats = EpisodeStats()
    stats.add_episodes([episode], [0.0])
    metrics = stats.metrics()
    assert metrics["episode/rows"] == 2 and metrics["episode/forks"] == 1 and metrics["episode/count"] == 1


def test_hand_worked_episode_advantages():
    # group 0: episodes 0 (two rows, reward 1) and 1 (one row, reward 0); grpo over episodes:
    # mean 0.5, std (Bessel) 0.7071 -> ±0.7071 for every row of each episode
    rewards = torch.tensor([1.0, 1.0, 0.0])
    groups, episodes = torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])
    adv = episode_advantages(rewards, groups, episodes)
    assert torch.allclose(adv, torch.tensor([0.7071, 0.7071, -0.7071]), atol=1e-4)
    # counted per row instead, the forked episode would pull the baseline towards itself
    assert not torch.allclose(group_advantages(rewards, groups), adv, atol=1e-2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.floats(-2, 2)), min_size=1, max_size=12),
       st.sampled_from(["grpo", "drgrpo", "rloo"]))
def test_episode_advantages_equal_those_of_one_row_per_episode(spec, method):
    """Rows copied from one episode change nothing: each row gets what its episode gets alone."""
    rewards, groups, episodes, single_r, single_g = [], [], [], [], []
    for k, (group, copies, reward) in enumerate(spec):
        rewards += [reward] * copies
        groups += [group] * copies
        episodes += [k] * copies
        single_r.append(reward)
        single_g.append(group)
    adv = episode_advantages(torch.tensor(rewards), torch.tensor(groups), torch.tensor(episodes), method)
    alone = group_advantages(torch.tensor(single_r), torch.tensor(single_g), method)
    assert torch.allclose(adv, alone[torch.tensor(episodes)], atol=1e-6)


def _batch(rows: int, group: int, episode_ids):
    return Batch(prompt_ids=torch.zeros((rows, 1), dtype=torch.long), prompt_mask=torch.ones((rows, 1), dtype=torch.bool),
                 completion_ids=torch.zeros((rows, 2), dtype=torch.long), behav_logp=torch.zeros((rows, 2)),
                 versions=torch.zeros((rows, 2), dtype=torch.long), completion_mask=torch.ones((rows, 2), dtype=torch.bool),
                 rewards=torch.zeros(rows), group_ids=torch.full((rows,), group), advantages=torch.zeros(rows),
                 episode_ids=episode_ids)


def test_the_buffer_counts_episodes_not_rows():
    forked = Group(_batch(3, 7, torch.tensor([0, 0, 1])))
    plain = Group(_batch(2, 8, None))
    assert forked.n == 2 and plain.n == 2
    both = concat_groups([forked, plain], pad_id=0)
    assert both.episode_ids.tolist() == [0, 0, 1, 0, 1] and both.episodes == 4


@pytest.mark.parametrize("history", ["tokens", "template"])
def test_history_is_checked(history):
    tok = chat_tokenizer(DROPS_THINK)
    EpisodeRunner(Countdown, ChatTurns(tok), tok, LIMITS, history=history)
    with pytest.raises(ValueError, match="history"):
        EpisodeRunner(Countdown, ChatTurns(tok), tok, LIMITS, history="text")
