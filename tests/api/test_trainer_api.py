"""``asyncrl.Trainer``: a ``GRPOTrainer``-shaped object with ``peft_config`` and ``callbacks``.

End to end (a script in a subprocess, on the tiny saved model, sync and async): a callback records
every row it is given and the process it runs in, a ``peft.LoraConfig`` sets the adapters. The
callbacks must see every step, the step-0 and later evaluations and each checkpoint, in the
script's own process (async rollout workers are other processes), with the rows metrics.jsonl
holds; the checkpoints must hold LoRA adapters of the rank asked for. A callback that raises stops
the run in one line naming it, with the checkpoint of the last finished step; bad arguments are
one-line ConfigErrors before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

peft = pytest.importorskip("peft")

SCRIPT = '''
import json, os, sys
import asyncrl, peft

def has_target(completions, target, **kwargs):  # defined here: travels by cloudpickle
    return [float(t in c) for c, t in zip(completions, target)]

class Record:
    def __init__(self):
        self.seen = []
    def on_step_end(self, row):
        self.seen.append(["on_step_end", row, os.getpid()])
    def on_evaluate(self, row):
        self.seen.append(["on_evaluate", row, os.getpid()])
    def on_save(self, row):
        self.seen.append(["on_save", row, os.getpid()])

class Boom:
    def on_step_end(self, row):
        if row["step"] == 2:
            raise ValueError("no more steps")

if __name__ == "__main__":
    mode, failing = sys.argv[1], sys.argv[2] == "boom"
    data = [{{"prompt": f"Say {{i}}:", "target": str(i)}} for i in range(12)]
    record = Record()
    trainer = asyncrl.Trainer(
        {{"policy.model_path": {model!r}, "run.mode": mode, "run.name": "r"}},
        reward_funcs=[has_target], train_dataset=data,
        peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        callbacks=[record, Boom] if failing else [record],
        run__progress=False, run__report_to=[], rollout__prompts_per_step=2, rollout__samples_per_prompt=2,
        rollout__max_new_tokens=6, trainer__steps=3, trainer__n_minibatches=1, eval__n_problems=2, eval__samples=1,
        eval__every=2, task__eval_fraction=0.25, run__checkpoint_every=2, run__keep_checkpoints=0)
    print("LORA", trainer.config.policy.lora_rank, trainer.config.policy.lora_alpha)
    try:
        summary = trainer.train()
    except asyncrl.api.CallbackError as err:
        print("STOPPED", err)
    print("SEEN", json.dumps({{"pid": os.getpid(), "seen": record.seen}}))
'''


def run_script(tmp: Path, model_dir, mode: str, failing: bool = False) -> tuple[str, dict]:
    (tmp / "train_it.py").write_text(SCRIPT.format(model=str(model_dir)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "train_it.py", mode, "boom" if failing else "ok"], capture_output=True,
                          text=True, cwd=tmp, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "LORA 4 8.0" in lines  # peft_config's r and lora_alpha became policy.lora_rank / lora_alpha
    return proc.stdout, json.loads(next(line for line in lines if line.startswith("SEEN "))[5:])


def hooks_called(seen: list, hook: str) -> list:
    return [row for name, row, _ in seen if name == hook]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_trainer_calls_back_every_step_evaluation_and_save_with_lora(tmp_path, model_dir, mode):
    _, got = run_script(tmp_path, model_dir, mode)
    run_dir = tmp_path / "runs" / "r"
    assert {pid for _, _, pid in got["seen"]} == {got["pid"]}  # the trainer process: the script's own
    logged = {row["step"]: row for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    steps = hooks_called(got["seen"], "on_step_end")
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert steps == [logged[s] for s in (1, 2, 3)]  # the rows as metrics.jsonl holds them
    evaluations = hooks_called(got["seen"], "on_evaluate")
    assert [row["step"] for row in evaluations] == [0, 2, 3]  # step 0, eval.every=2, the last step
    assert all("eval_reward" in row for row in evaluations)
    saves = hooks_called(got["seen"], "on_save")
    assert [row["step"] for row in saves] == [2, 3]  # run.checkpoint_every=2 and the last step
    for row in saves:
        adapter = json.loads((Path(row["checkpoint"]) / "lora_adapter" / "adapter_config.json").read_text())
        assert adapter["r"] == 4 and adapter["lora_alpha"] == 8
        assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert "lora_rank: 4" in (run_dir / "config.yaml").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3


def test_a_callback_that_raises_stops_the_run_with_a_checkpoint(tmp_path, model_dir):
    out, got = run_script(tmp_path, model_dir, "sync", failing=True)
    stopped = next(line for line in out.splitlines() if line.startswith("STOPPED "))
    assert "callback Boom.on_step_end raised ValueError: no more steps (train_it.py:" in stopped
    assert "the run stopped after step 2 (checkpoint runs/r/checkpoints/step-000002)" in stopped
    checkpoint = tmp_path / "runs" / "r" / "checkpoints" / "step-000002"
    assert (checkpoint / "lora_adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "runs" / "r" / "summary.json").exists()  # not a finished run: it resumes
    # the other callback saw step 2 (listed first), then nothing more
    assert [row["step"] for row in hooks_called(got["seen"], "on_step_end")] == [1, 2]


@pytest.mark.parametrize("peft_config, says", [
    (peft.LoraConfig(use_dora=True), "peft_config: use_dora=True is not supported"),
    (peft.LoraConfig(target_modules="all-linear"), "peft_config: target_modules='all-linear': a string"),
    (peft.LoraConfig(modules_to_save=["lm_head"]), "peft_config: modules_to_save=['lm_head'] is not supported"),
    (peft.LoraConfig(task_type="SEQ_CLS"), "peft_config: task_type='SEQ_CLS': asyncrl trains causal"),
    (peft.PrefixTuningConfig(num_virtual_tokens=4), "peft_config: PrefixTuningConfig is not supported"),
    ({"r": 8}, "peft_config: dict is not supported"),
])
def test_a_peft_config_the_run_cannot_honour_is_one_line(tmp_path, peft_config, says):
    import asyncrl
    from asyncrl.config import ConfigError

    with pytest.raises(ConfigError) as err:
        asyncrl.Trainer(run__out_dir=str(tmp_path), peft_config=peft_config)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert not any(tmp_path.iterdir())  # refused before anything is written


class Saves:
    def on_save(self, row):
        pass


def test_lora_given_twice_and_a_callback_without_hooks_are_refused(tmp_path):
    import asyncrl
    from asyncrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"peft_config: policy.lora_rank is set too"):
        asyncrl.Trainer(run__out_dir=str(tmp_path), peft_config=peft.LoraConfig(r=4), policy__lora_rank=8)
    with pytest.raises(ConfigError, match=r"callbacks\[1\]: object has none of the methods on_step_end"):
        asyncrl.Trainer(run__out_dir=str(tmp_path), callbacks=[Saves, object()])
