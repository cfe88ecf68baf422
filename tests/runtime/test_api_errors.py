"""One exception family for the Python API (docs/python-api.md, "Errors"): the same fault raises the
same class through ``asyncrl.train(...)`` in every ``run.mode``, whether it struck in the trainer
(sync, simulated) or in a rollout worker process (async), and every class derives from
``asyncrl.AsyncRLError``. Each run is a script in a subprocess, as a user's would be."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# fails from its third call in the trainer (its first two: the pre-run check and the step-0
# evaluation) or its first in a rollout worker: in every mode, during the first step
REWARDS = textwrap.dedent('''
    import multiprocessing
    CALLS = 0

    def fails(completions, **kw):
        global CALLS
        CALLS += 1
        if CALLS >= 3 or multiprocessing.parent_process() is not None:
            raise ValueError("boom")
        return [0.0] * len(completions)
''')

SCRIPT = textwrap.dedent('''
    import sys
    import asyncrl

    if __name__ == "__main__":
        try:
            asyncrl.train({{"policy.model_path": {model!r}, "run.mode": sys.argv[1]}},
                          reward_funcs=["my_rewards:fails"], run__name="r", run__progress=False, run__report_to=[], rollout__prompts_per_step=2,
                          rollout__samples_per_prompt=2, rollout__max_new_tokens=4, trainer__steps=2,
                          trainer__n_minibatches=1, eval__n_problems=2, eval__every=0)
        except asyncrl.AsyncRLError as err:
            print("RAISED", type(err).__module__ + "." + type(err).__qualname__)
            print("LINE", str(err))
            print("FAMILY", isinstance(err, asyncrl.RewardFunctionError), isinstance(err, asyncrl.ConfigError))
''')


def _run_script(tmp: Path, model: Path, mode: str) -> subprocess.CompletedProcess:
    (tmp / "my_rewards.py").write_text(REWARDS)
    (tmp / "train_it.py").write_text(SCRIPT.format(model=str(model)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)  # the reward module is found in the current directory
    return subprocess.run([sys.executable, "train_it.py", mode], capture_output=True, text=True, cwd=tmp, env=env,
                          timeout=240)


@pytest.mark.parametrize("mode", ["sync", "async", "simulated"])
def test_a_reward_error_raises_the_same_class_in_every_mode(tmp_path, model_dir, mode):
    proc = _run_script(tmp_path, model_dir, mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in
                 ("RAISED", "LINE", "FAMILY"))
    assert lines.get("RAISED") == "asyncrl.rewards.scorer.RewardFunctionError", proc.stdout + proc.stderr[-3000:]
    assert lines["FAMILY"] == "True True"
    assert lines["LINE"].startswith("reward function my_rewards:fails raised ValueError: boom on row uid=")
    assert not (tmp_path / "runs" / "r" / "summary.json").exists()


def test_a_workers_error_is_raised_again_as_its_own_class():
    """What a rollout worker sends for an error (asyncrl.core.errors) comes back as that class, with
    its message and key; a class this process cannot find comes back as the fallback."""
    from asyncrl.agents.env import EnvError
    from asyncrl.core.errors import AsyncRLError, as_payload, from_payload
    from asyncrl.runtime.pool import InputError

    env_error = EnvError("my_env.Maze", None, "step raised KeyError: 'board'")
    again = from_payload(as_payload(env_error), InputError)
    assert type(again) is EnvError and str(again) == str(env_error) and again.key == "env.name"
    lost = from_payload({"cls": "no_such_module:Gone", "message": "config error: x: y", "attrs": {}}, InputError)
    assert type(lost) is InputError and str(lost) == "config error: x: y"
    not_ours = from_payload({"cls": "builtins:OSError", "message": "m", "attrs": {}}, InputError)
    assert type(not_ours) is InputError and isinstance(not_ours, AsyncRLError)


def test_every_documented_class_is_one_of_the_family():
    """docs/python-api.md's table names each class and its base; each is importable from asyncrl and
    derives from what the table says."""
    import asyncrl

    doc = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    rows = [line.split("|")[1:3] for line in doc.split("## Errors", 1)[1].splitlines()
            if line.startswith("| `asyncrl.")]
    assert len(rows) >= 8
    for name_cell, base_cell in rows:
        cls = getattr(asyncrl, name_cell.strip().strip("`").removeprefix("asyncrl."))
        assert issubclass(cls, asyncrl.AsyncRLError)
        for base in (b.strip().strip("`") for b in base_cell.split(",")):
            assert base in [c.__name__ for c in cls.__mro__[1:]], (cls, base)
