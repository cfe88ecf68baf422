"""TRL's ``environment_factory`` / ``tools`` (asyncrl.envs.trl, ``env.factory``): a class
written as TRL's docs write one plays episodes here. Unit tests of the adapter (tools run on the
episode's own instance, reset's text joins the prompt, get_reward is a reward of weight 1, each
member of a group has its own instance), the bad inputs of docs/errors.md (``env-factory-*`` rows,
run through the real CLI), ``--help-keys``, and tiny trainings by CLI and by ``asyncrl.train`` in
sync and async mode."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .episode_fakes import DROPS_THINK, ScriptedEngine, chat_tokenizer

from asyncrl.agents.env import EnvError
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
from asyncrl.agents.rollout import EpisodeRollout
from asyncrl.agents.tools import ToolBox
from asyncrl.envs.trl import GET_REWARD, get_reward, load_factory, tool_names, wrap
from asyncrl.config import ConfigError
from asyncrl.runtime.validate import load_run_config
from asyncrl.tasks import Problem
from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

REPO = Path(__file__).resolve().parents[2]

# The pattern of TRL's docs (docs/source/openenv.md, grpo_trainer.md): a class with reset(**kwargs)
# returning str | None, a tool method with type hints and a docstring with Args:, and get_reward.
ENVS = '''
class CounterEnv:
    def __init__(self):
        self.counter = 0
        self.resets = []

    def reset(self, **kwargs) -> str | None:
        assert "prompt" in kwargs and "target" in kwargs, sorted(kwargs)  # TRL passes the row's columns
        self.resets.append(kwargs)
        self.counter = 0
        self.target = int(kwargs["target"])
        return f" Reach {self.target}."

    def increment(self, step: int) -> int:
        """
        Increment the counter by a value.

        Args:
            step: The value to add

        Returns:
            The new counter value.
        """
        self.counter += step
        return self.counter

    def get_reward(self) -> float:
        return 1.0 if self.counter == self.target else 0.25


class Silent(CounterEnv):
    def reset(self, **kwargs) -> str | None:
        self.counter, self.target = 0, 3
        return None


class NoReset:
    def look(self) -> str:
        """Look around."""
        return "nothing"


class ResetStep:  # asyncrl's own seam (docs/agents.md, "Environments"), passed to the wrong one
    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        return "", 1.0, True, {}


class Untyped(CounterEnv):
    def peek(self, what):
        return self.counter


class RewardWithArgs(CounterEnv):
    def get_reward(self, scale) -> float:
        return scale


class Broken(CounterEnv):
    def reset(self, **kwargs):
        raise KeyError("board")
'''
ROW = {"target": "3"}
PROBLEM = Problem(uid="p0", prompt="Count.", answer="", solution="", messages=(("user", "Count."),), fields=ROW)
CALL = '<tool_call>{"name": "increment", "arguments": {"step": %d}}</tool_call>'


@pytest.fixture()
def envs(tmp_path) -> str:
    (tmp_path / "trl_envs.py").write_text(ENVS)
    return str(tmp_path / "trl_envs.py")


ROUNDS = Scheduling(schedule="rounds")
NO_SCHEMAS = ["env.tool_schemas=none"]  # the embedded tiny model has no chat template to show them


def runner(path: str, cls: str, tok, max_turns: int = 4, scheduling=ROUNDS):
    """The scripted engine's k-th call answers the k-th round: lock-step rounds."""
    factory, klass, tools = load_factory(f"{path}:{cls}")
    box = ToolBox(tools)
    env_class = wrap(factory, klass, f"{path}:{cls}")
    return EpisodeRunner(env_class, _turns(tok), tok, EpisodeLimits(max_turns, 64, 400), box, scheduling), box


def _turns(tok):
    from asyncrl.agents.render import ChatTurns

    return ChatTurns(tok)


# -- the adapter ------------------------------------------------------------------------------------


def test_public_methods_are_the_tools_as_in_trl(envs):
    _, cls, tools = load_factory(f"{envs}:CounterEnv")
    assert tool_names(cls) == ["increment"]  # not reset, get_reward, __init__
    schema = tools[0].schema["function"]
    assert schema["name"] == "increment" and schema["parameters"]["required"] == ["step"]
    assert schema["parameters"]["properties"]["step"] == {"type": "integer", "description": "The value to add"}


def test_each_group_member_has_its_own_instance_and_tool_calls_run_on_it(envs):
    tok = chat_tokenizer(DROPS_THINK)
    eot = tok.eos_token_id
    run, box = runner(envs, "CounterEnv", tok)
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"] + [eot]  # noqa: E731
    engine = ScriptedEngine(tok, [[ids(CALL % 1), ids(CALL % 2)], [ids(CALL % 2), ids("done")], [ids("done")]])
    first, second = run.run(engine, [PROBLEM], 2)
    assert first.env is not second.env and first.env.instance is not second.env.instance
    assert (first.env.instance.counter, second.env.instance.counter) == (3, 2)  # 1 + 2; 2
    assert [c["content"] for c in first.tool_calls] == ["1", "3"] and second.tool_calls[0]["content"] == "2"
    assert (first.end, second.end) == ("done", "done") and (first.turns, second.turns) == (3, 2)
    # the same row for both: TRL's reset(**row), the row's columns with the prompt
    assert first.env.instance.resets == second.env.instance.resets
    assert first.env.instance.resets[0]["prompt"] == [{"role": "user", "content": "Count."}]
    assert box.take_counts()["calls"] == {"increment": 3}


def test_resets_text_is_appended_to_the_prompts_last_message(envs):
    _, cls, _ = load_factory(f"{envs}:CounterEnv")
    env_class = wrap(cls, cls, f"{envs}:CounterEnv")
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count."}]
    assert env_class().reset({"prompt": chat, "target": "7"}) == \
        [chat[0], {"role": "user", "content": "Count. Reach 7."}]  # TRL: content + observation, no separator
    assert env_class().reset({"prompt": "Count.", "target": "7"}) == "Count. Reach 7."
    silent_cls = load_factory(f"{envs}:Silent")[1]
    silent = wrap(silent_cls, silent_cls, f"{envs}:Silent")
    assert silent().reset({"prompt": chat}) == chat  # None: the prompt as it is


def test_errors_of_a_tool_method_are_observations_and_the_last_turn_runs_no_tool(envs):
    tok = chat_tokenizer(DROPS_THINK)
    eot = tok.eos_token_id
    run, _ = runner(envs, "CounterEnv", tok, max_turns=2)
    bad = '<tool_call>{"name": "increment", "arguments": {"step": 1, "extra": 2}}</tool_call>'
    engine = ScriptedEngine(tok, [[tok(bad, add_special_tokens=False)["input_ids"] + [eot]],
                                  [tok(CALL % 5, add_special_tokens=False)["input_ids"] + [eot]]])
    episode, = run.run(engine, [PROBLEM], 1)
    assert episode.tool_calls[0]["failed"] and episode.tool_calls[0]["content"].startswith("error: increment:")
    # turn 2 reached env.max_turns (TRL: max_tool_calling_iterations=1): its call is not run
    assert episode.end == "max_turns" and len(episode.tool_calls) == 1 and episode.env.instance.counter == 0


def test_get_reward_is_a_reward_of_weight_one_read_from_each_episodes_instance(envs):
    from asyncrl.rewards import RewardSet

    cfg = load_run_config(None, [f"env.factory={envs}:CounterEnv", f"reward.funcs=[{GET_REWARD}]", *NO_SCHEMAS])
    tok = chat_tokenizer(DROPS_THINK)
    rollout = EpisodeRollout(cfg, RewardSet.from_config(cfg.reward), tok)
    eot = tok.eos_token_id
    engine = ScriptedEngine(tok, [[tok(CALL % 3, add_special_tokens=False)["input_ids"] + [eot],
                                   tok("no", add_special_tokens=False)["input_ids"] + [eot]],
                                  [tok("done", add_special_tokens=False)["input_ids"] + [eot]]])
    out = rollout.run(engine, [PROBLEM], 2)
    assert out.batch.rewards.tolist() == [1.0, 0.25]  # counter reached the target in the first only
    assert out.batch.reward_parts.tolist() == [[1.0], [0.25]]
    assert out.stats.metrics()["tool/increment/calls"] == 1


def test_the_get_reward_function_reads_instances_and_counts_none_as_zero():
    class Env:
        def __init__(self, value):
            self.value = value

        def get_reward(self):
            return self.value

    assert get_reward(["a", "b"], environments=[Env(0.5), Env(None)]) == [0.5, 0.0]
    assert get_reward(["a", "b"]) == [0.0, 0.0]  # the start-up check: no episode played
    with pytest.raises(TypeError, match="has no get_reward method"):
        get_reward(["a"], environments=[object()])


def test_a_get_reward_that_raises_stops_the_run_like_any_reward_function():
    from asyncrl.rewards import RewardFunctionError, RewardSet

    class Bad:
        def get_reward(self):
            raise ValueError("no board")

    rewards = RewardSet.from_config(load_run_config(None, [f"reward.funcs=[{GET_REWARD}]"]).reward)
    with pytest.raises(RewardFunctionError, match=f"reward function {GET_REWARD} raised ValueError: no board on "
                                                  "a batch of 1 rows starting at row uid=p0"):
        rewards.score(["x"], [PROBLEM], extra={"environments": [Bad()]})


def test_get_reward_joins_reward_funcs_at_load_by_cli_as_trl_adds_it(envs):
    assert load_run_config(None, [f"env.factory={envs}:CounterEnv", *NO_SCHEMAS]).reward.funcs == [GET_REWARD]  # alone
    cfg = load_run_config(None, [f"env.factory={envs}:CounterEnv", *NO_SCHEMAS,
                             "reward.funcs=[asyncrl.tasks.rewards:correct_answer]", "reward.weights=[0.5]"])
    assert cfg.reward.funcs[-1] == GET_REWARD and cfg.reward.weights == [0.5, 1.0]
    again = load_run_config(cfg.to_dict())  # a resumed run's saved config: added once
    assert again.reward.funcs == cfg.reward.funcs and again.reward.weights == cfg.reward.weights


def test_a_trl_reward_function_written_environments_first_is_called_by_keyword(tmp_path, monkeypatch):
    from asyncrl.rewards import RewardSet

    (tmp_path / "trl_rewards.py").write_text(
        "def solved(environments, **kwargs):\n    return [float(e.value) for e in environments]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rewards = RewardSet.from_config(load_run_config(None, ["reward.funcs=[trl_rewards:solved]"]).reward)

    class Env:
        value = 0.5

    scores = rewards.score(["a completion"], [PROBLEM], extra={"environments": [Env()]})
    assert scores.total == [0.5]


def test_an_environment_that_breaks_names_the_users_class(envs):
    tok = chat_tokenizer(DROPS_THINK)
    run, _ = runner(envs, "Broken", tok, scheduling=Scheduling(retries=0, max_failure_frac=0))  # the first failure stops
    with pytest.raises(EnvError, match=r"environment .*trl_envs\.Broken on row uid=p0: .* reset raised KeyError: 'board'"):
        run.run(ScriptedEngine(tok, [[[1]]]), [PROBLEM], 1)


# -- bad inputs: one line each ------------------------------------------------------------------------


@pytest.mark.parametrize("cls, expected", [
    ("NoReset", "has no reset method; an environment_factory class needs reset(self, **row)"),
    ("Untyped", "Untyped.peek: public methods are tools (TRL's rule), and this one cannot be: every argument "
                "needs a type hint"),
    ("RewardWithArgs", "RewardWithArgs.get_reward takes arguments; it must take none"),
    ("ResetStep", "ResetStep looks like an asyncrl environment (reset(row), step(action) -> (observation, reward, "
                  "done, info)), not a TRL environment_factory class"),
    ("Missing", "has no attribute 'Missing'"),
])
def test_a_class_that_breaks_trls_contract_is_refused_at_load(envs, cls, expected):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"env.factory={envs}:{cls}"])
    assert str(err.value).startswith("config error: env.factory: ") and expected in str(err.value)
    assert "\n" not in str(err.value)


def test_a_factory_method_named_like_a_tool_and_a_factory_with_an_env_are_refused(envs, tmp_path):
    (tmp_path / "clash.py").write_text('def increment(step: int) -> int:\n    """Add.\n\n    Args:\n'
                                       '        step: how much\n    """\n    return step\n')
    with pytest.raises(ConfigError, match=r"env.factory: .*CounterEnv.increment has the name of the tool of "
                                          r"env.tools\[0\]"):
        load_run_config(None, [f"env.factory={envs}:CounterEnv", f"env.tools=[{tmp_path}/clash.py:increment]"])
    with pytest.raises(ConfigError, match="env.factory: is the environment itself; it does not go with env.name=guess"):
        load_run_config(None, [f"env.factory={envs}:CounterEnv", "env=guess"])


def test_the_api_refuses_what_cannot_travel_or_be_a_tool_in_one_line(tmp_path):
    import threading

    from asyncrl.api import build_config

    class Locked:  # a class (here a local one, which cloudpickle sends by value) holding a lock
        lock = threading.Lock()

        def reset(self, **kwargs):
            return None

    base = {"run.out_dir": str(tmp_path)}
    with pytest.raises(ConfigError) as err:
        build_config(base, environment_factory=Locked)
    assert str(err.value).startswith("config error: environment_factory: ") and "\n" not in str(err.value)
    assert "Locked cannot be sent to the rollout worker processes (TypeError: cannot pickle" in str(err.value)
    with pytest.raises(ConfigError, match=r"config error: tools\[0\]: tool .*<lambda>: every argument needs a type "
                                          "hint and an 'Args:' line"):
        build_config(base, tools=[lambda x: x])
    with pytest.raises(ConfigError, match="environment_factory: a dict of environments"):
        build_config(base, environment_factory={"a": Locked})
    with pytest.raises(ConfigError, match="environment_factory: .*Nope has no reset method"):
        build_config(base, environment_factory=type("Nope", (), {}))


def test_the_api_adds_get_reward_as_trl_does(envs, tmp_path):
    from asyncrl.api import build_config

    base = {"run.out_dir": str(tmp_path), "env.tool_schemas": "none"}
    cfg = build_config(base, environment_factory=f"{envs}:CounterEnv")
    assert cfg.env.factory == f"{envs}:CounterEnv" and cfg.reward.funcs == [GET_REWARD]  # alone: no task default
    exact = "asyncrl.tasks.rewards:exact_answer"
    cfg = build_config(base, environment_factory=f"{envs}:CounterEnv", reward_funcs=[exact], reward__weights=[0.5])
    assert cfg.reward.funcs == [exact, GET_REWARD] and cfg.reward.weights == [0.5, 1.0]


def test_the_apis_tools_travel_like_reward_functions(tmp_path):
    from asyncrl.agents.toolset import load_tools
    from asyncrl.api import build_config

    def add(a: int, b: int) -> int:  # a local function: no import path reaches it, so it is pickled
        """Add two integers.

        Args:
            a: the first number
            b: the second number
        """
        return a + b

    cfg = build_config({"run.out_dir": str(tmp_path), "env.tool_schemas": "none"}, tools=[add, "calculator"])
    assert cfg.env.tools[0].startswith(str(tmp_path / ".inputs" / "tool-")) and cfg.env.tools[0].endswith(".pkl:add")
    assert cfg.env.tools[1] == "calculator" and cfg.env.episodes  # tools alone: the answer environment
    tool, _ = load_tools(cfg.env.tools)
    assert tool.name == "add" and ToolBox([tool]).call(_call("add", {"a": 2, "b": 3})).content == "5"


def _call(name: str, arguments: dict):
    from asyncrl.agents.tools import ToolCall

    return ToolCall(name, arguments)


ERRORS_MD = REPO / "docs" / "errors.md"


def _error_rows() -> list[tuple[str, list[str], str]]:
    """docs/errors.md's ``env-factory-*`` rows: (case, arguments, expected substring)."""
    rows = []
    for line in ERRORS_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `env-factory-") and len(cells) == 3:
            args = cells[1].split("`")[1].split()
            rows.append((cells[0].strip("`"), args, cells[2].split("`")[1]))
    return rows


@pytest.mark.parametrize("case, args, expected", _error_rows(), ids=[r[0] for r in _error_rows()])
def test_bad_input_rows_of_the_docs_are_one_line(tmp_path, case, args, expected):
    (tmp_path / "trl_envs.py").write_text(ENVS)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_cli([*args, "run.progress=false"], tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert expected.replace("{tmp}", str(tmp_path)) in lines[0]
    assert not (tmp_path / "runs").exists()


def test_there_are_error_rows():
    assert {r[0] for r in _error_rows()} >= {"env-factory-not-importable", "env-factory-no-reset",
                                              "env-factory-method-not-a-tool"}


# -- names: --help-keys, TRL's own names, the docs table ---------------------------------------------


def test_help_keys_finds_the_trl_agent_names():
    from asyncrl.config.help import describe_keys

    text = describe_keys("environment_factory")
    assert "TRL environment_factory  ->  env.factory" in text and re.search(r"^  env\.factory\s", text, re.M)
    assert re.search(r"^  env\.max_turns\s", describe_keys("max_tool_calling_iterations"), re.M)
    assert re.search(r"^  env\.tools\s", describe_keys("tools"), re.M)


def test_the_agent_names_are_trls_and_the_docs_table():
    import dataclasses
    import inspect

    from asyncrl.config.peers import AGENT_PEER_NAMES

    trl = pytest.importorskip("trl")
    known = {f.name for f in dataclasses.fields(trl.GRPOConfig)} | set(inspect.signature(trl.GRPOTrainer).parameters)
    cited = {n for theirs, _ in AGENT_PEER_NAMES["TRL"] for n in re.findall(r"`([^`]+)`", theirs)}
    assert cited == {"environment_factory", "tools", "max_tool_calling_iterations"} and cited <= known
    text = (REPO / "docs" / "agents.md").read_text().split("## TRL users", 1)[1].split("\n## ", 1)[0]
    rows = tuple(tuple(c.strip() for c in line.strip().strip("|").split(" | ")) for line in text.splitlines()
                 if line.startswith("| `"))
    assert rows[:len(AGENT_PEER_NAMES["TRL"])] == AGENT_PEER_NAMES["TRL"]


# -- end to end: a tiny model trains with the class, by CLI and by asyncrl.train ---------------------

SMALL = ["run.progress=false", "run.report_to=[]", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
         "rollout.max_new_tokens=6", "trainer.steps=2", "trainer.n_minibatches=1", "eval.n_problems=2",
         "eval.samples=1", "eval.every=0", "task.eval_fraction=0.25",
         "env.tool_schemas=none"]  # the tiny model has no chat template to show the methods' schemas
ROWS = [{"prompt": [{"role": "user", "content": f"Count to {i}."}], "target": "3"} for i in range(8)]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _check(run_dir: Path, mode: str) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["mode"] == mode
    records = [r for r in _metrics(run_dir) if r["step"] > 0]
    steps = [r for r in records if "episode/turns_mean" in r]
    assert steps  # async: a step's episode metrics are those of the episodes that arrived during it
    # the tiny model calls no tool: every episode ends at its first turn, and get_reward, the only
    # reward, scores it 0.25 (the counter never reaches the target)
    assert all(r["episode/end_done"] == 1.0 and r["episode/turns_max"] == 1 for r in steps)
    assert [r["reward/get_reward"] for r in records] == [0.25, 0.25]
    assert [r["reward_mean"] for r in records] == [0.25, 0.25]


def test_a_trl_class_trains_by_cli_in_async_mode(tmp_path, model_dir):
    (tmp_path / "trl_envs.py").write_text(ENVS)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    # the module from the current directory (each rollout worker process imports it there too)
    args = ["train", *SMALL, "task.path=rows.jsonl", "env.factory=trl_envs:CounterEnv",
            f"policy.model_path={model_dir}", "run.mode=async", "run.name=cli"]
    proc = run_cli(args, tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(tmp_path / "runs" / "cli", "async")


SCRIPT = '''
import json
import asyncrl
{envs}

def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b

if __name__ == "__main__":
    for mode in ("sync", "async"):
        summary = asyncrl.train({{"policy.model_path": {model!r}, "run.mode": mode, "run.name": mode}},
                                train_dataset=json.loads({rows!r}), environment_factory=CounterEnv,
                                tools=[add], overrides=json.loads({overrides!r}))
        print("SUMMARY", summary["steps"], summary["mode"])
'''


def run_script(tmp_path: Path, model_dir, rows: list[dict], overrides: dict, modes=("sync", "async")):
    """SCRIPT (the class and a tool defined in ``__main__``) run as a user runs it; its process."""
    script = SCRIPT.replace('for mode in ("sync", "async")', f"for mode in {tuple(modes)!r}")
    (tmp_path / "train_it.py").write_text(script.format(envs=textwrap.dedent(ENVS), model=str(model_dir),
                                                        rows=json.dumps(rows), overrides=json.dumps(overrides)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "train_it.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_a_trl_class_from_the_script_trains_by_the_api_in_sync_and_async_mode(tmp_path, model_dir):
    """The class and a tool are defined in the script (``__main__``): pickled into .inputs/ for the
    worker, and get_reward joins reward.funcs by itself (no reward function given), as TRL adds it."""
    import yaml

    overrides = {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in SMALL)}
    proc = run_script(tmp_path, model_dir, ROWS, overrides)
    assert "SUMMARY 2 sync" in proc.stdout and "SUMMARY 2 async" in proc.stdout
    for mode in ("sync", "async"):
        _check(tmp_path / "runs" / mode, mode)
        saved = yaml.safe_load((tmp_path / "runs" / mode / "config.yaml").read_text())
        assert saved["env"]["factory"].endswith(".pkl:CounterEnv")  # from __main__: pickled, read by every process
        assert saved["reward"]["funcs"] == [GET_REWARD] and saved["env"]["tools"][0].endswith(".pkl:add")

