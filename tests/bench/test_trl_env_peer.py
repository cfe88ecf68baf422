"""TRL's GRPOTrainer(environment_factory=...) on the calculator agent (``benchmarks/trl_env_peer.py``):
TRL renders and parses the model's plain-turn Hermes calls as asyncrl does, runs the tool of each
call, and the peer records TRL's and its own tool counts per step."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from asyncrl.config import load_config  # noqa: E402
from cli_forks import checkout_env  # noqa: E402  (tests/: the checkout on PYTHONPATH)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# the agents end-to-end test's small calculator warm start (tests/agents/test_agents_e2e.py): one build a test run
SMALL = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=128", "model.vocab_size=400",
    "pretrain.steps=60", "pretrain.batch_size=32", "pretrain.lr=0.003", "pretrain.warmup_steps=5",
    "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "trainer.n_minibatches=2", "trainer.lr=0.001",
    "eval.n_problems=0", "run.progress=false", "run.report_to=[]",
]


def _scripted_first_turns(build, call_text: str):
    """``build_trainer`` whose trainers' first turn of every episode is ``call_text`` (the warm start
    of a test run hardly calls yet); the turns after a tool result are the model's."""

    def build_scripted(*args, **kwargs):
        trainer = build(*args, **kwargs)
        tok, model_turn = trainer.processing_class, trainer._generate_single_turn
        call = tok(call_text, add_special_tokens=False)["input_ids"]

        def first_turn_calls(prompt_ids, images, fields, num_generations, **kw):
            if num_generations == 1:
                return model_turn(prompt_ids, images, fields, num_generations, **kw)
            return [list(call) for _ in prompt_ids], None

        trainer._generate_single_turn = first_turn_calls
        return trainer

    return build_scripted


def test_trl_calls_the_tool_of_a_plain_turn_call_and_counts_it(tiny_policy, tmp_path):
    """The first turn of every episode is a scripted call in the warm start's form; the rest is TRL:
    parsing it, the environment's tool, the observation's ids, the model's next turn, the training step."""
    from trl import GRPOConfig

    from asyncrl.envs.calculator import CalculatorTask, tool_call_text
    from benchmarks.bench.peer_trl import _time_method
    from benchmarks.trl_env_peer import (build_trainer, check_rendering, dataset, environment_class, options,
                                         trl_tokenizer)

    model, tokenizer, _ = tiny_policy
    cfg = load_config("calculator-agent", ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=4",
                                           "trainer.n_minibatches=2", "trainer.steps=1", "env.turn_tokens=8",
                                           "env.episode_tokens=192"])
    problems = CalculatorTask().problems("train")[:16]
    counts = {"gen": 0.0, "tool": 0.0, "tool_calls": 0, "tool_failures": 0}
    tok, close_id = trl_tokenizer(tokenizer)
    seen = []

    def reward(completions, **_):
        seen.extend(completions)
        return [0.0] * len(completions)

    build = _scripted_first_turns(build_trainer, " " + tool_call_text("calculator", {"expression": "48 * 937"}))
    trainer = build(copy.deepcopy(model), tok, close_id, environment_class(cfg, counts), reward,
                    GRPOConfig(**options(cfg, str(tmp_path / "trl"))), dataset(cfg, problems))
    check_rendering(trainer, tokenizer, problems, close_id)  # prompts, a call, a tool result: asyncrl's ids
    _time_method(trainer, "_generate_single_turn", counts, "gen")
    trainer.train()
    assert counts["tool_calls"] == 8 and counts["tool_failures"] == 0 and counts["tool"] > 0
    logged = next(r for r in trainer.state.log_history if "tools/call_frequency" in r)
    assert logged["tools/call_frequency"] >= 1.0 and logged["tools/failure_frequency"] == 0.0
    assert len(seen) == 8
    for episode in seen:
        call = episode[0]["tool_calls"][0]["function"]
        assert call == {"name": "calculator", "arguments": {"expression": "48 * 937"}}
        assert episode[1] == {"role": "tool", "name": "calculator", "content": "44976"}


def test_trl_env_peer_bad_config_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.trl_env_peer", "--config", "calculator-agent",
                           "env.parallel_tool_calls=on"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=checkout_env())
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "env.parallel_tool_calls" in proc.stderr


@pytest.mark.slow  # a warm start and two TRL steps against the HTTP calculator: make test-all
def test_trl_env_peer_records_the_tool_calls_of_each_step(tmp_path, cache, monkeypatch, capsys):
    """The program (its main) on the calculator agent whose tool is the HTTP service, every episode's
    first turn a call: per step, TRL's call count, ours and the service's agree, with their time."""
    import torch

    import benchmarks.trl_env_peer as peer
    from asyncrl.envs.calculator import tool_call_text

    monkeypatch.syspath_prepend(str(BENCHMARKS))  # remote_calculator, as env_latency.sh puts it on PYTHONPATH
    from remote_calculator import ADDRESS, serve

    server = serve(0.01, 1.0)
    monkeypatch.setenv(ADDRESS, f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(peer, "build_trainer", _scripted_first_turns(
        peer.build_trainer, " " + tool_call_text("calculator", {"expression": "48 * 937"})))
    threads = torch.get_num_threads()
    try:
        code = peer.main(["--config", "calculator-agent", *SMALL, "env.tools=[remote_calculator:calculator]",
                          "trainer.steps=2", f"policy.cache_dir={cache}", f"run.out_dir={tmp_path}", "run.name=trl"])
    finally:
        torch.set_num_threads(threads)
        server.shutdown()
        server.server_close()
    assert code == 0
    summary = json.loads((tmp_path / "trl" / "summary.json").read_text())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary
    assert summary["mode"] == "trl-grpo-env" and summary["steps"] == 2 and summary["samples_per_s_after_first"] > 0
    assert summary["tool"] == "remote_calculator:calculator" and summary["tool_calls"] >= 16
    records = [json.loads(line) for line in (tmp_path / "trl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]  # no eval: no step 0
    for r in records:
        assert r["batch_samples"] == 8 and r["step_time_s"] > r["tool_time_s"] > 0
        assert r["tool_calls"] == r["trl_tool_calls"] >= 8 and r["tool_failures"] == 0  # each TRL call answered
        assert r["call_stops"] >= 8 and r["episode/env_wait_s"] == r["tool_time_s"]
    args = json.loads((tmp_path / "trl" / "trl_args.json").read_text())
    assert args["max_completion_length"] == 128 and args["max_tool_calling_iterations"] == 2
    assert args["generation_kwargs"] == {"max_new_tokens": 48}
