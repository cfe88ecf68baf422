"""Episodes, token for token: the trainer's row is the engine's sampled ids plus observation ids
(never a re-rendering), observations carry loss mask 0 and no version, an episode spanning a weight
update carries both versions and is admitted by its oldest trained token, and bad environments
end in one line."""

import pytest
import torch

from .episode_fakes import DROPS_THINK, LONE_NEWLINE, Countdown, ScriptedEngine, chat_tokenizer

from asyncrl.agents.env import EnvError
from asyncrl.agents.envs import FinalAnswer
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
from asyncrl.agents.render import ChatTurns, PlainTurns, PrefixBroken
from asyncrl.agents.tools import ToolBox
from asyncrl.agents.toolset import load_tools
from asyncrl.runtime.buffer import Group, StalenessBuffer
from asyncrl.tasks import Problem
from asyncrl.types import Batch

PROBLEM = Problem(uid="p0", prompt="What is 12 * 34?", answer="408", solution="", messages=(("user", "What is 12 * 34?"),))
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>'
LIMITS = EpisodeLimits(max_turns=4, turn_tokens=64, episode_tokens=400)


def runner(tokenizer, turns, env=Countdown, tools=None, limits=LIMITS):
    """Lock-step rounds: the scripted engine's k-th call answers the k-th round."""
    return EpisodeRunner(env, turns, tokenizer, limits, tools, Scheduling(schedule="rounds"))


def calculator_box():
    return ToolBox(load_tools(["calculator"]))


@pytest.mark.parametrize("template", [DROPS_THINK, LONE_NEWLINE], ids=["drops-think", "lone-newline"])
def test_trainer_ids_are_the_engines_ids_byte_for_byte(template):
    tok = chat_tokenizer(template)
    eot = tok.eos_token_id
    turn1 = tok("<think>12 times 34</think> " + CALL, add_special_tokens=False)["input_ids"] + [eot]
    turn2 = tok("<think>copy it</think> #### 408", add_special_tokens=False)["input_ids"] + [eot]
    engine = ScriptedEngine(tok, [[turn1], [turn2]])
    turns = ChatTurns(tok)
    episode, = runner(tok, turns, env=FinalAnswer, tools=calculator_box()).run(engine, [PROBLEM], 1)
    obs = episode.ids[len(turn1):len(episode.ids) - len(turn2)]
    # the row: prompt | the engine's turn 1 | observation | the engine's turn 2, nothing rewritten
    assert episode.ids == turn1 + obs + turn2
    assert engine.calls[1] == [episode.prompt_ids + turn1 + obs]  # the engine continued from its own ids
    assert tok.decode(obs).count("408") == 1 and episode.tool_calls[0]["content"] == "408"
    # re-rendering the conversation would have changed the tokens the engine sampled (the point of the test)
    rerendered = tok.apply_chat_template(episode.messages, tokenize=True)
    rerendered = list(rerendered["input_ids"] if hasattr(rerendered, "keys") else rerendered)
    assert rerendered != episode.prompt_ids + episode.ids
    text = tok.decode(episode.prompt_ids + episode.ids)
    assert "<think>12 times 34</think>" in text  # kept: the trainer sees what the engine wrote
    if template is LONE_NEWLINE:
        assert "<|im_end|>\ntool: 408<|im_end|>\nassistant:" in text  # one newline, not none, not two


def test_plain_turns_render_like_single_turn_chat_prompts(tiny_policy):
    _, tok, _ = tiny_policy
    turns = PlainTurns(tok)
    assert tok.decode(turns.prompt_ids([{"role": "user", "content": "hi"}]), skip_special_tokens=True) == \
        "user: hi\nassistant:"
    assert tok.decode(turns.observation_ids([{"role": "tool", "content": " 408 "}], [5])) == "\ntool: 408\nassistant:"


def test_a_turn_without_its_end_token_gets_one_as_an_observation():
    tok = chat_tokenizer(DROPS_THINK)
    turns = ChatTurns(tok)
    ids = turns.observation_ids([{"role": "tool", "content": "408"}], sampled=[7])  # stopped at a stop string
    assert ids[0] == tok.eos_token_id
    assert turns.observation_ids([{"role": "tool", "content": "408"}], sampled=[tok.eos_token_id]) == ids[1:]


def test_a_template_that_rewrites_the_past_is_refused():
    tok = chat_tokenizer("{% for m in messages %}{{ m.role }}{{ messages|length }}: {{ m.content }}<|im_end|>"
                         "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    with pytest.raises(PrefixBroken):
        ChatTurns(tok).observation_ids([{"role": "user", "content": "more"}], [tok.eos_token_id])


def test_observations_have_loss_mask_0_no_version_and_are_attended(tiny_policy):
    _, tok, _ = tiny_policy
    engine = ScriptedEngine(tok, [[" go", " go"], [" stop", " go"], [" stop"]])
    episodes = runner(tok, PlainTurns(tok)).run(engine, [PROBLEM], 2)
    gen = episodes_to_generation(episodes, tok.pad_token_id)
    obs = gen.observation_mask
    assert obs.any() and not (obs & gen.completion_mask).any()
    assert (gen.versions[obs] == -1).all() and (gen.behav_logp[obs] == 0).all()
    assert torch.equal(gen.completion_attention, gen.completion_mask | obs)
    assert [e.turns for e in episodes] == [2, 3] and [e.end for e in episodes] == ["done", "done"]
    # the group starts from one state: both episodes got the same prompt ids
    assert episodes[0].prompt_ids == episodes[1].prompt_ids


def test_an_episode_spanning_a_weight_update_keeps_both_versions_and_is_admitted_by_its_oldest(tiny_policy):
    _, tok, _ = tiny_policy
    engine = ScriptedEngine(tok, [[" go"], [" stop"]], version=3)

    def between():  # the async worker's hook: newer weights arrived
        engine.update_weights(None, engine.version + 1)
        return True

    episode, = runner(tok, PlainTurns(tok)).run(engine, [PROBLEM], 1, between=between)
    gen = episodes_to_generation([episode], tok.pad_token_id)
    assert sorted(set(gen.versions[gen.completion_mask].tolist())) == [3, 4]
    batch = Batch(**{f: getattr(gen, f) for f in ("prompt_ids", "prompt_mask", "completion_ids", "behav_logp",
                                                  "versions", "completion_mask")},
                  observation_mask=gen.observation_mask, rewards=torch.zeros(1), group_ids=torch.zeros(1, dtype=torch.long),
                  advantages=torch.zeros(1))
    group = Group(batch)
    assert group.oldest_version == 3 and group.newest_version == 4
    buffer = StalenessBuffer(1, groups_per_batch=1, samples_per_group=1)
    buffer.add(group)
    assert not buffer.ready(5) and buffer.dropped == 1  # 5 − 3 > 1, though its newest token is 1 behind


def test_the_runner_stops_at_the_limits(tiny_policy):
    _, tok, _ = tiny_policy
    engine = ScriptedEngine(tok, [[" go"]] * 3)
    episode, = runner(tok, PlainTurns(tok), limits=EpisodeLimits(max_turns=3, turn_tokens=8,
                                                                  episode_tokens=400)).run(engine, [PROBLEM], 1)
    assert episode.end == "max_turns" and episode.turns == 3 and len(engine.calls) == 3
    engine = ScriptedEngine(tok, [[" go on and on and on"]] * 3)
    episode, = runner(tok, PlainTurns(tok), limits=EpisodeLimits(max_turns=3, turn_tokens=8,
                                                                  episode_tokens=12)).run(engine, [PROBLEM], 1)
    assert episode.end == "episode_tokens" and len(episode.ids) <= 12


def test_stop_strings_reach_the_engine(tiny_policy):
    _, tok, _ = tiny_policy

    class Stops(Countdown):
        stop = ("</guess>",)

    engine = ScriptedEngine(tok, [[" stop"]])
    runner(tok, PlainTurns(tok), env=Stops, limits=EpisodeLimits(1, 8, 100, stop=("\n\n",))).run(engine, [PROBLEM], 1)
    assert engine.stops == [("\n\n", "</guess>")]


class Raises(Countdown):
    def step(self, action):
        raise KeyError("board")


class BadObservation(Countdown):
    def step(self, action):
        return 42, 0.0, False, {}


class BadReward(Countdown):
    def step(self, action):
        return "ok", float("nan"), False, {}


class Hangs(Countdown):
    def step(self, action):
        import time

        time.sleep(30)


@pytest.mark.parametrize("env, message", [
    (Raises, "step raised KeyError: 'board'"),
    (BadObservation, "step's observation is int 42"),
    (BadReward, "rewards must be finite numbers"),
    (Hangs, "step took longer than env.step_timeout_s=0.3 s"),
])
def test_a_broken_environment_is_one_line_naming_it_and_the_row(tiny_policy, env, message):
    """A broken contract (observation, reward) stops at first sight; a call that raises or hangs
    stops once failures pass env.max_failure_frac (0 here: the first one)."""
    _, tok, _ = tiny_policy
    engine = ScriptedEngine(tok, [[" go"]])
    limits = EpisodeLimits(max_turns=2, turn_tokens=8, episode_tokens=100, step_timeout_s=0.3)
    strict = Scheduling(retries=0, max_failure_frac=0.0)
    with pytest.raises(EnvError) as err:
        EpisodeRunner(env, PlainTurns(tok), tok, limits, scheduling=strict).run(engine, [PROBLEM], 1)
    text = str(err.value)
    assert "\n" not in text and message in text and env.__qualname__ in text and "uid=p0" in text


def test_a_bad_tool_call_is_an_error_observation_not_a_crash(tiny_policy):
    _, tok, _ = tiny_policy
    engine = ScriptedEngine(tok, [[' <tool_call>{"name": "nope", "arguments": {}}</tool_call>'],
                                  [" <tool_call>{not json</tool_call>"], [" stop"]])
    box = calculator_box()
    episode, = runner(tok, PlainTurns(tok), tools=box).run(engine, [PROBLEM], 1)
    assert [c["reason"] for c in episode.tool_calls] == ["unknown_tool", "malformed"]
    assert "error: unknown tool 'nope'" in tok.decode(episode.ids) and episode.end == "done"
    counts = box.take_counts()
    assert sum(counts["failures"].values()) == 2


def test_trainer_logprobs_of_an_episode_equal_the_engines(tiny_policy):
    """Turn 2 was sampled with turn 1 and the observation in context: the trainer, attending to
    the observation tokens it does not train on, computes the engine's log-probs; without them it
    would not (so the test can fail)."""
    from asyncrl.policy.logprobs import completion_logprobs
    from asyncrl.rollout import EngineSpec, make_engine

    model, tok, _ = tiny_policy
    engine = make_engine("transformers", EngineSpec(max_new_tokens=6, temperature=1.0, seed=3), model=model,
                         tokenizer=tok)
    episodes = runner(tok, PlainTurns(tok), limits=EpisodeLimits(max_turns=3, turn_tokens=6,
                                                                  episode_tokens=200)).run(engine, [PROBLEM], 3)
    gen = episodes_to_generation(episodes, tok.pad_token_id)
    assert gen.observation_mask.any() and all(e.turns == 3 for e in episodes)
    mask = gen.completion_mask
    with torch.no_grad():
        logp, _ = completion_logprobs(model.eval(), gen.prompt_ids, gen.prompt_mask, gen.completion_ids, mask,
                                      completion_attn=gen.completion_attention)
        blind, _ = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, mask)
    assert (logp - gen.behav_logp)[mask].abs().max() < 1e-4
    assert (blind - gen.behav_logp)[mask].abs().max() > 1e-2


def test_guess_episode_rewards_hand_worked(tiny_policy):
    from asyncrl.agents.rollout import EpisodeRollout
    from asyncrl.config import load_config
    from asyncrl.rewards import RewardSet
    from asyncrl.tasks import build_task

    _, tok, _ = tiny_policy
    cfg = load_config("guess-agent", ["env.turn_tokens=40", "env.episode_tokens=1000"])
    task = build_task("guess")
    problem = next(p for p in task.problems("train") if p.answer == "13")
    # 10 → "higher: 11 to 20", 15 → "lower: 11 to 14", 13 solved at turn 3: 0.8² = 0.64; the other
    # episode never reads a guess and runs out of turns: 0
    script = [[" <guess>10</guess>", " I think"], [" <guess>15</guess>", " hm"], [" <guess>13</guess>", " no"],
              [" still"], [" nothing"]]
    engine = ScriptedEngine(tok, script)
    out = EpisodeRollout(cfg, RewardSet.for_task(task), tok).run(engine, [problem], 2, first_group_id=7)
    assert out.batch.rewards.tolist() == pytest.approx([0.64, 0.0])
    assert out.batch.group_ids.tolist() == [7, 7]
    assert "higher: 11 to 20" in out.texts[0] and "lower: 11 to 14" in out.texts[0]
    assert "no guess read" in out.texts[1]
    metrics = out.stats.metrics()
    assert metrics["episode/turns_mean"] == 4.0 and metrics["episode/end_done"] == 0.5
    assert metrics["episode/end_max_turns"] == 0.5 and 0 < metrics["episode/masked_token_frac"] < 1


def test_a_template_whose_turns_end_before_eos_stops_there(tiny_policy):
    """A base checkpoint's eos is not its template's end-of-turn token: the turn still ends there."""
    tok = chat_tokenizer(DROPS_THINK)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]})
    tok.eos_token = "<|endoftext|>"
    turns = ChatTurns(tok)
    assert turns.end_of_turn == tok.convert_tokens_to_ids("<|im_end|>")
    engine = ScriptedEngine(tok, [[" stop"]])
    runner(tok, turns).run(engine, [PROBLEM], 1)
    assert "<|im_end|>" in engine.stops[0]
