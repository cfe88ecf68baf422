"""The built-in agent tasks and what their warm start learns from: deterministic disjoint splits,
demonstrated episodes whose observation segments are not trained, the guess feedback rule, the
heavy-tailed ranges of guess_tail, and the engines' per-call token budget and stop strings."""

import hashlib
import json
import re
from collections import Counter

import pytest
import torch

from asyncrl.config import load_config
from asyncrl.envs.guess import TAIL_MAX_GUESSES, GuessNumber, feedback, read_guess, tail_probabilities
from asyncrl.tasks import build_task
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



def test_the_guess_rows_are_pinned():
    """guess_tail is an option beside guess: the guess rows (and so its warm start) stay byte for byte."""
    task = build_task("guess")
    rows = [(p.uid, p.prompt, p.answer, p.solution, p.messages, dict(p.fields))
            for split in ("train", "eval") for p in task.problems(split)]
    digest = hashlib.sha256(json.dumps([r[:5] for r in rows]).encode()).hexdigest()
    assert digest == "62bb431e877703b6fc9d7569c2664e00f3b7ef03faf7de6c1895788340d84474"
    assert all(not r[5] for r in rows) and task.name == "guess"


def test_guess_tail_ranges_follow_the_stated_power_law():
    task = build_task("guess_tail")
    train, evals = task.problems("train"), task.problems("eval")
    assert task.name == "guess_tail" and not {p.uid for p in train} & {p.uid for p in evals}
    probs = tail_probabilities()
    assert list(probs) == list(range(2, 9)) and probs[2] == pytest.approx(0.25 / sum(k ** -2 for k in range(2, 9)))
    counts = Counter(p.fields["high"] for p in train)
    assert set(counts) == {2 ** k for k in probs}
    for k, prob in probs.items():  # 2,000 rows: a share's SE is at most 0.011
        assert counts[2 ** k] / len(train) == pytest.approx(prob, abs=0.04), k
    for p in train + evals:
        low, high = p.fields["low"], p.fields["high"]
        assert low == 1 and low <= int(p.answer) <= high
        assert p.messages == (("user", f"Guess my number from {low} to {high}."),)
        guesses = [int(g) for g in re.findall(r"<guess>(\d+)</guess>", p.solution)]
        assert 1 <= len(guesses) <= TAIL_MAX_GUESSES and all(low <= g <= high for g in guesses)


def _bisects(p) -> bool:
    """Every guess of the demonstrated game is the middle of the range still possible."""
    low, high, secret = p.fields["low"], p.fields["high"], int(p.answer)
    for guess in map(int, re.findall(r"<guess>(\d+)</guess>", p.solution)):
        if guess != (low + high) // 2:
            return False
        _, low, high = feedback(guess, secret, low, high) if guess != secret else (None, low, high)
    return True


def test_guess_tail_demonstrations_bisect_a_third_of_the_time_in_about_k_turns():
    train = build_task("guess_tail").problems("train")
    bisect = [p for p in train if _bisects(p)]
    assert 0.25 < len(bisect) / len(train) < 0.4  # 30 % bisect, plus random games that happen to halve
    # bisection solves 1 to 2^k within k + 1 guesses: the turns follow k's law
    assert all(p.solution.endswith(f"<guess>{p.answer}</guess>") for p in bisect)
    assert all(p.solution.count("<guess>") <= p.fields["high"].bit_length() for p in bisect)


def test_the_guess_environment_plays_the_rows_range():
    env = GuessNumber()
    env.reset({"answer": "100", "prompt": "p", "low": 1, "high": 128})
    assert env.step("<guess>64</guess>")[0] == "higher: 65 to 128"
    assert "from 65 to 128" in env.step("no guess")[0]
    env.reset({"answer": "13", "prompt": "p"})  # a row without a range: the constructor's, 1 to 20
    assert env.step("<guess>10</guess>")[0] == "higher: 11 to 20"
    with pytest.raises(ValueError, match="row field 'high': must be an integer"):
        env.reset({"answer": "3", "prompt": "p", "low": 1})
    with pytest.raises(ValueError, match="row field 'high': 2 is below low=5"):
        env.reset({"answer": "3", "prompt": "p", "low": 5, "high": 2})


def test_the_guess_tail_preset_fits_the_longest_game_in_the_context():
    cfg = load_config("guess-tail")
    assert (cfg.task.name, cfg.env.name, cfg.env.max_turns) == ("guess_tail", "guess", 10)
    assert cfg.env.max_turns >= max(tail_probabilities()) + 1  # bisection's worst case at the largest k
    assert cfg.env.episode_tokens + 16 <= cfg.model.max_positions  # a 16-token prompt at most

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
