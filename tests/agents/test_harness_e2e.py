"""Harness episodes end to end, as subprocesses: the example agents (OpenAI-client loops) train
by ``asyncrl train`` and by ``asyncrl.train(harness=...)``, the guess example's return value being
the episode's reward; async with K = 0 equals sync bit for bit
through the endpoint; a harness that crashes on some rows and summarises its context on others
is counted (failed episodes, forked rows) while the run goes on."""

from pathlib import Path

import pytest
import torch

from .test_agents_e2e import CALCULATOR, ENV, SMALL, rows, train, train_by_api, weights

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = str(EXAMPLES / "harness_agent.py")
HARNESS = [*CALCULATOR, "env.tools=[]", f"env.harness={EXAMPLE}:agent"]

FLAKY = '''
import zlib
from openai import OpenAI


def agent(session):
    """Crashes on a quarter of the questions; summarises its context after the first turn on the others."""
    client = OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)
    question = session.row["prompt"][-1]["content"]
    kind = zlib.crc32(question.encode()) % 4
    first = client.chat.completions.create(model=session.model, messages=[{"role": "user", "content": question}])
    if kind == 0:
        raise RuntimeError("the harness's own bug")
    else:  # a compacted history: not an extension of the last request
        summary = [{"role": "user", "content": question + " (so far: " + (first.choices[0].message.content or "")[:8] + ")"}]
        client.chat.completions.create(model=session.model, messages=summary, max_tokens=8)
    return 1.0 if "####" in (first.choices[0].message.content or "") else 0.0
'''

TALKER = '''
from openai import OpenAI


def agent(session):
    """Two turns (the second extends the first: an observation in between); the harness's own
    reward, by the answers' lengths, so that groups differ and the weights move."""
    client = OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)
    messages = list(session.row["prompt"])
    length = 0
    for follow_up in ("check it", None):
        reply = client.chat.completions.create(model=session.model, messages=messages, max_tokens=12)
        text = reply.choices[0].message.content or ""
        length += reply.usage.completion_tokens
        if follow_up is None:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]
    session.reward(length % 3 / 2)
'''


def test_the_example_harness_trains_by_cli_in_sync_and_by_the_api_in_async(tmp_path, cache):
    _, records = train(tmp_path, cache, "cli", *HARNESS, "run.mode=sync", "trainer.steps=2")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2 and all(r["episode/count"] == 8 and r["episode/failed"] == 0 for r in steps)
    train_by_api(tmp_path, [*SMALL, "env.tools=[]", "run.mode=async", "trainer.steps=2", "run.name=api",
                            f"policy.cache_dir={cache}"], ENV,
                 call="asyncrl.train('calculator-agent', harness=agent, overrides=overrides)",  # the function itself
                 prelude=f"import sys\nsys.path.insert(0, {str(Path(EXAMPLE).parent)!r})\nfrom harness_agent import agent\n")
    api_rows = [r for r in rows(tmp_path / "runs" / "api" / "metrics.jsonl") if "episode/count" in r]
    assert api_rows and all(r["episode/failed"] == 0 for r in api_rows)


def test_the_guess_example_trains_by_the_api_and_its_return_is_the_reward(tmp_path, cache):
    """As docs/harness.md shows it: the preset's own environment set to none, the function passed."""
    # rounds: the episodes decode together in a fixed order, so what the tiny model samples (and
    # whether some of its 32 episodes find the number) does not depend on when each harness thread asked
    train_by_api(tmp_path, [*SMALL, "env.name=none", "run.mode=sync", "trainer.steps=2", "run.name=guess",
                            "env.schedule=rounds", "rollout.prompts_per_step=4",
                            "run.log_episodes_every=1", f"policy.cache_dir={cache}"], ENV,
                 call="asyncrl.train('guess-agent', harness=agent, overrides=overrides)",
                 prelude=f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\nfrom harness_guess import agent\n")
    episodes = rows(tmp_path / "runs" / "guess" / "episodes.jsonl")
    assert len(episodes) == 32 and all(e["end"] != "failed" and e["turns"] for e in episodes)
    # the harness's number: 0.8^(t-1) for the number found at turn t (then it stops asking), else 0
    for e in episodes:
        assert e["reward"] == pytest.approx(0.8 ** (len(e["turns"]) - 1) if e["reward"] else 0.0)
        assert e["reward"] == 0.0 or "<guess>" in e["turns"][-1]["assistant"]
    assert any(e["reward"] > 0 for e in episodes) and any(len(e["turns"]) > 1 for e in episodes)


def test_async_k0_equals_sync_through_the_endpoint(tmp_path, cache):
    (tmp_path / "talker.py").write_text(TALKER)
    args = [*CALCULATOR, "env.tools=[]", "env.harness=talker.py:agent", "trainer.steps=2", "env.schedule=rounds"]
    sync_dir, sync_rows = train(tmp_path, cache, "sync", *args, "run.mode=sync")
    async_dir, async_rows = train(tmp_path, cache, "async", *args, "run.mode=async", "async.max_staleness=0")
    a, b = weights(sync_dir), weights(async_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    for key in ("reward_mean", "episode/turns_mean", "episode/len_mean", "loss"):
        assert [r.get(key) for r in sync_rows] == [r.get(key) for r in async_rows], key
    assert any(r.get("loss") not in (None, 0.0) for r in sync_rows), "no update: the test is vacuous"


def test_a_crashing_and_summarising_harness_is_counted_and_the_run_goes_on(tmp_path, cache):
    (tmp_path / "flaky_agent.py").write_text(FLAKY)
    _, records = train(tmp_path, cache, "flaky", *CALCULATOR, "env.tools=[]", "env.harness=flaky_agent.py:agent",
                       "run.mode=sync", "trainer.steps=2", "env.max_failure_frac=0.9", "run.log_episodes_every=1")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2
    assert sum(r["episode/failed"] for r in steps) > 0 and sum(r["episode/forks"] for r in steps) > 0
    assert all(r["episode/rows"] == r["episode/count"] + r["episode/forks"] for r in steps)
    episodes = rows(tmp_path / "runs" / "flaky" / "episodes.jsonl")
    failed = [e for e in episodes if e["end"] == "failed"]
    assert failed and all(e["failure"] == "harness raised RuntimeError: the harness's own bug" for e in failed)
    assert any(e["rows"] == 2 and e["reward"] is not None for e in episodes)  # a forked episode was trained
