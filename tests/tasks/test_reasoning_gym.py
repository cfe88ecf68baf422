"""reasoning-gym's datasets as a task (asyncrl.envs.reasoning_gym, ``task=reasoning_gym``) and
its retry environment (in the same file, ``env.name=rg_retry``): rows built from the
settings, deterministic, split without a shared question; answers scored by reasoning-gym's own
scorer on the last ``<answer>...</answer>``; bad settings refused in one line at config load
(unknown dataset names with the close ones); the retry environment's feedback; the ``rg-*`` rows of
docs/errors.md through the real CLI; and one tiny training of retried problems end to end."""

import json
import os
import sys
from pathlib import Path

import pytest

from asyncrl.agents.env import EnvError, env_reset, env_step
from asyncrl.config import ConfigError
from asyncrl.runtime.validate import load_run_config
from asyncrl.tasks import build_task, configured_task
from asyncrl.tasks.rewards import correct_answer
from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

REPO = Path(__file__).resolve().parents[2]
TWO = ["task=reasoning_gym", "task.rg_tasks=[leg_counting, basic_arithmetic]", "task.rg_size=60"]


@pytest.fixture(scope="module")
def rg():
    return pytest.importorskip("reasoning_gym")


@pytest.fixture(scope="module")
def task(rg):
    return configured_task(load_run_config(None, TWO).task)


def test_rows_are_built_from_the_settings_deterministically_and_split_without_a_shared_question(rg, task):
    again = configured_task(load_run_config(None, TWO).task)
    train, evals = task.problems("train"), task.problems("eval")
    assert [p.prompt for p in train] == [p.prompt for p in again.problems("train")]
    assert len(evals) == 6 and len(train) <= 54
    assert not {p.messages[-1] for p in train} & {p.messages[-1] for p in evals}
    assert {p.fields["rg_task"] for p in train} == {"leg_counting", "basic_arithmetic"}
    p = train[0]
    assert p.messages[0][0] == "system" and "<answer>answer here</answer>" in p.messages[0][1]
    assert p.messages[1] == ("user", p.fields["rg_entry"]["question"]) and p.answer == p.fields["rg_entry"]["answer"]
    assert p.solution == f" <answer>{p.answer}</answer>"  # the warm start's demonstration: the format
    assert len({p.uid for p in train + evals}) == len(train) + len(evals)


def test_weights_seed_settings_and_the_system_prompt(rg):
    def build(*extra):
        return configured_task(load_run_config(None, [*TWO, *extra]).task).problems("train")

    heavy = build("task.rg_weights=[9, 1]", "task.rg_size=200")
    assert sum(p.fields["rg_task"] == "leg_counting" for p in heavy) > 0.75 * len(heavy)
    assert [p.prompt for p in build("task.rg_seed=1")] != [p.prompt for p in build()]
    few = build("task.rg_configs={leg_counting: {min_animals: 1, max_animals: 2}}")
    legs = [p for p in few if p.fields["rg_task"] == "leg_counting"]
    assert legs and all(p.fields["rg_entry"]["metadata"]["num_animals"] <= 2 for p in legs)
    assert all(p.fields["rg_config"] == {"min_animals": 1, "max_animals": 2} for p in legs)
    from reasoning_gym.utils import SYSTEM_PROMPTS

    assert build("task.rg_system_prompt=direct")[0].messages[0] == ("system", SYSTEM_PROMPTS["direct"])
    assert build("task.rg_system_prompt=''")[0].messages[0][0] == "user"
    assert build("task.rg_system_prompt='Be brief.'")[0].messages[0] == ("system", "Be brief.")


def test_answers_are_scored_by_reasoning_gyms_scorer_on_the_last_answer_tag(rg, task):
    p = task.problems("train")[0]
    wrong = str(int(p.answer) + 1)
    assert task.reward(f"I think... <answer>{p.answer}</answer>", p) == 1.0
    assert task.reward(f"<answer>{wrong}</answer>", p) == 0.0
    assert task.reward(f"The answer is {p.answer}.", p) == 0.0  # no tags, no answer
    assert task.reward(f"<answer>{wrong}</answer> no: <answer>{p.answer}</answer>", p) == 1.0  # the last one
    assert task.reward(f"<answer>{p.answer}</answer> no: <answer>{wrong}</answer>", p) == 0.0
    completions = [[{"role": "assistant", "content": f"<answer>{p.answer}</answer>"}], "<answer>x</answer>"]
    assert correct_answer(completions, problems=[p, p], task=task) == [1.0, 0.0]  # the default reward.funcs


def test_a_scorer_that_fails_on_the_models_text_scores_it_zero(rg, task, monkeypatch):
    from asyncrl.envs import reasoning_gym as module

    def broken(name, key):
        def score_answer(answer, entry):
            raise IndexError("parse error")
        return score_answer

    monkeypatch.setattr(module, "_scorer", broken)
    p = task.problems("train")[0]
    assert task.reward(f"<answer>{p.answer}</answer>", p) == 0.0


BAD = [
    (["task.rg_tasks=[leg_count]"], "task.rg_tasks[0]: unknown reasoning-gym dataset 'leg_count' (close: leg_counting"),
    (["task.rg_tasks=[leg_counting, qqqqqq]"], "task.rg_tasks[1]: unknown reasoning-gym dataset 'qqqqqq' (none close;"),
    (["task.rg_tasks=[]"], "task.rg_tasks: name at least one reasoning-gym dataset"),
    (["task.rg_tasks=[composite]"], "task.rg_tasks[0]: 'composite' is what rg_tasks builds"),
    (["task.rg_tasks=[gcd, gcd]"], "task.rg_tasks[1]: 'gcd' is listed twice"),
    (["task.rg_tasks=[gcd]", "task.rg_weights=[1, 2]"], "task.rg_weights: 2 weight(s) for 1 dataset(s)"),
    (["task.rg_tasks=[gcd]", "task.rg_weights=[0]"], "task.rg_weights: must be > 0 each"),
    (["task.rg_tasks=[gcd]", "task.rg_size=1"], "task.rg_size: must be >= 2"),
    (["task.rg_tasks=[gcd]", "task.rg_configs={lcm: {}}"], "task.rg_configs: 'lcm' is not in rg_tasks"),
    (["task.rg_tasks=[gcd]", "task.rg_configs={gcd: {nope: 1}}"],
     "task.rg_configs: reasoning-gym refused the settings of gcd {'nope': 1} (TypeError"),
]


@pytest.mark.parametrize("overrides, expected", BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_settings_are_one_line_at_config_load(rg, overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["task=reasoning_gym", *overrides])
    assert "\n" not in str(err.value) and str(err.value).startswith(f"config error: {expected}")


def test_reasoning_gym_not_installed_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` fails, as without it
    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["task=reasoning_gym", "task.rg_tasks=[gcd]"])
    text = str(err.value)
    assert "\n" not in text and text.startswith("config error: task.name: reasoning_gym needs the reasoning-gym")
    assert text.endswith("pip install asyncrl[envs]")


def test_the_retry_environment_gives_the_scorers_verdict_and_another_try(rg, task):
    from asyncrl.agents import ENVIRONMENTS
    from asyncrl.agents.env import build_env
    from asyncrl.core.import_path import resolve

    p = task.problems("train")[0]
    env = build_env(resolve(ENVIRONMENTS["rg_retry"]), {})
    assert env_reset(env, p, 10)[-1] == {"role": "user", "content": p.messages[-1][1]}
    assert "</answer>" in env.stop
    result = env_step(env, p, "I am not sure", 10)
    assert not result.done and result.reward == 0.0 and result.messages[0]["content"].startswith("No answer found")
    wrong = str(int(p.answer) + 1)
    result = env_step(env, p, f"<answer>{wrong}</answer>", 10)
    assert not result.done and result.reward == 0.0
    assert result.messages[0]["content"].startswith(f"Your answer {wrong} is not correct (score 0.00). Try again")
    assert result.info == {"score": 0.0, "tries": 2, "solved": False}
    result = env_step(env, p, f"<answer>{p.answer}</answer>", 10)
    assert result.done and result.reward == 0.0 and result.info == {"score": 1.0, "tries": 3, "solved": True}
    other = build_task("arithmetic").problems("train")[0]
    with pytest.raises(EnvError, match=r"reset raised ValueError: row .* has no rg_entry column: env.name=rg_retry"):
        env_reset(build_env(resolve(ENVIRONMENTS["rg_retry"]), {}), other, 10)


ERRORS_MD = REPO / "docs" / "errors.md"


def _error_rows() -> list[tuple[str, list[str], str]]:
    """docs/errors.md's ``rg-*`` rows: (case, arguments, expected substring)."""
    rows = []
    for line in ERRORS_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `rg-") and len(cells) == 3:
            rows.append((cells[0].strip("`"), cells[1].split("`")[1].split(), cells[2].split("`")[1]))
    return rows


@pytest.mark.parametrize("case, args, expected", _error_rows(), ids=[r[0] for r in _error_rows()])
def test_the_rg_rows_of_docs_errors_are_one_line(rg, tmp_path, case, args, expected):
    proc = run_cli([*args, "run.progress=false"], tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert expected in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_there_are_rg_rows_in_the_docs():
    assert {r[0] for r in _error_rows()} == {"rg-unknown-task"}


def test_retried_reasoning_gym_problems_train_end_to_end(rg, tmp_path, cache):
    """Two steps of GRPO, sync, on the embedded tiny model (its warm start demonstrates the answer
    format): leg_counting problems with up to two tries each (env.name=rg_retry), scored by
    reasoning-gym's scorer on the final answer."""
    args = ["train", "task=reasoning_gym", "task.rg_tasks=[leg_counting]", "task.rg_size=64",
            "task.rg_system_prompt=direct", "task.rg_configs={leg_counting: {min_animals: 1, max_animals: 2}}",
            "env.name=rg_retry", "env.max_turns=2", "env.turn_tokens=12", "env.episode_tokens=96",
            "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
            "model.intermediate_size=128", "model.vocab_size=400", "model.max_positions=512", "pretrain.steps=30",
            "pretrain.batch_size=16", "pretrain.warmup_steps=3", "pretrain.lr=0.003", "pretrain.torch_threads=1",
            "rollout.prompts_per_step=2",
            "rollout.samples_per_prompt=2", "rollout.max_new_tokens=12", "trainer.n_minibatches=1", "trainer.steps=2",
            "eval.n_problems=2", "eval.every=0", "run.mode=sync", "run.progress=false", "run.report_to=[]",
            "run.name=rg", f"policy.cache_dir={cache}"]
    proc = run_cli(args, tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "rg"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2 and all(1 <= r["episode/turns_mean"] <= 2 for r in steps)
    assert all(0.0 <= r["reward_mean"] <= 1.0 for r in steps)
    completions = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert completions and all("how many legs" in c["prompt"] for c in completions)
