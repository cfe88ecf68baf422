"""The built-in agent tasks and what their warm start learns from: deterministic disjoint splits,
demonstrated episodes whose observation segments are not trained, the guess feedback rule, and
the engines' per-call token budget and stop strings."""

import torch

from asyncrl.agents.guess import GuessNumber, read_guess
from asyncrl.tasks import build_task
from asyncrl.tasks.guess import feedback
from asyncrl.training.pretrain import sft_batch


def test_calculator_rows_are_deterministic_disjoint_and_demonstrate_both_habits():
    a, b = build_task("calculator"), build_task("calculator")
    train, evals = a.problems("train"), a.problems("eval")
    assert [p.prompt for p in train] == [p.prompt for p in b.problems("train")]
    assert not {p.prompt for p in train} & {p.prompt for p in evals}
    assert all("".join(t for t, _ in p.segments) == p.solution for p in train)
    with_tool = sum("<tool_call>" in p.solution for p in train) / len(train)
    assert 0.4 < with_tool < 0.6
    p = train[0]
    assert a.reward(f" #### {p.answer}", p) == 1.0 and a.reward(" #### 1", p) == 0.0


def test_a_demonstrated_episode_trains_on_the_policys_turns_only(tiny_policy):
    _, tok, _ = tiny_policy
    task = build_task("calculator")
    p = next(p for p in task.problems("train") if "<tool_call>" in p.solution)
    ids, _, labels = sft_batch(tok, [p])
    trained = tok.decode([i for i, lab in zip(ids[0].tolist(), labels[0].tolist()) if lab != -100])
    assert "<tool_call>" in trained and f"#### {p.answer}" in trained
    assert "tool:" not in trained  # the observation is context, not a target
    assert tok.decode(ids[0][labels[0] == -100].tolist()).count(p.answer) == 1  # the tool's result, as context


def test_guess_feedback_and_environment_hand_worked():
    assert feedback(10, 13, 1, 20) == ("higher: 11 to 20", 11, 20)
    assert feedback(15, 13, 11, 20) == ("lower: 11 to 14", 11, 14)
    assert read_guess(" I say <guess> 7 </guess>") == 7 and read_guess("guess 7") is None
    env = GuessNumber()
    assert env.reset({"answer": "13", "prompt": "p"}) == "p"
    assert env.step(" <guess>10</guess>") == ("higher: 11 to 20", 0.0, False, {"secret": 13, "solved": False,
                                                                              "guesses": 1})
    observation, reward, done, info = env.step("<guess>13</guess>")
    assert (reward, done, info["solved"], info["guesses"]) == (1.0, True, True, 2)


def test_guess_demonstrations_bisect_or_ignore_the_feedback():
    task = build_task("guess")
    train = task.problems("train")
    assert not {p.uid for p in train} & {p.uid for p in task.problems("eval")}
    bisect = [p for p in train if p.solution.startswith(" <guess>10</guess>")]
    assert 0.25 < len(bisect) / len(train) < 0.45  # 30 % bisect, plus random games that open with 10


def test_the_engine_stops_at_a_stop_string_and_a_per_call_budget(tiny_policy):
    from asyncrl.rollout import EngineSpec, make_engine

    model, tok, _ = tiny_policy
    engine = make_engine("transformers", EngineSpec(max_new_tokens=40, temperature=1.0, seed=0), model=model,
                         tokenizer=tok)
    prompts = [tok("Tom has 3 apples.")["input_ids"]] * 8
    free = engine.generate(prompts)
    stops = [" "]  # a random model writes spaces often
    gen = engine.generate(prompts, max_new_tokens=12, stop=stops)
    assert gen.completion_ids.shape[1] <= 12 and free.completion_ids.shape[1] > 12
    at_stop = 0
    for row in range(8):
        ids = gen.completion_ids[row][gen.completion_mask[row]].tolist()
        text = tok.decode(ids)
        before = tok.decode(ids[:-1])
        # it ends right after the token that completed the stop string, at eos, or at the budget
        assert (" " in text and " " not in before) or ids[-1] == tok.eos_token_id or len(ids) == 12
        at_stop += " " in text and " " not in before
    assert at_stop >= 1
    assert torch.equal(gen.versions >= 0, gen.completion_mask)
