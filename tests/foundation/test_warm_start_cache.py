"""The warm start is built once per user: keyed only by what it learns from (model shape, pretrain
settings, device type, the demonstrations), kept in the user cache whatever the working directory,
and built with the `asyncrl pretrain` progress display inside `train`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_e2e_train import TINY

import asyncrl.training.pretrain as pretrain_module
from asyncrl.config import ModelConfig, PretrainConfig, load_config
from asyncrl.training.pretrain import WarmStartInputs, is_complete, pretrained_dir, warm_start
from asyncrl.tasks import Problem
from asyncrl.core.cache import cache_root

FAST = [*TINY, "pretrain.steps=3", "eval.n_problems=2", "eval.samples=1", "eval.batch_size=2"]
PROBLEMS = (Problem("a", "Q: 1+2?\nA:", "3", " 1 + 2 = 3. #### 3"),
            Problem("b", "Q: 4-1?\nA:", "3", " 4 - 1 = 3. #### 3"))


def _changed(value):
    """A different value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1 if value < 1 or isinstance(value, int) else value / 2
    raise AssertionError(f"no change defined for {value!r}")


def _variants(inputs: WarmStartInputs):
    """(what changed, inputs with exactly that changed), for every field the build reads."""
    for field in dataclasses.fields(inputs):
        value = getattr(inputs, field.name)
        if dataclasses.is_dataclass(value):
            for sub in dataclasses.fields(value):
                changed = dataclasses.replace(value, **{sub.name: _changed(getattr(value, sub.name))})
                yield f"{field.name}.{sub.name}", dataclasses.replace(inputs, **{field.name: changed})
        elif field.name == "device":
            yield "device", dataclasses.replace(inputs, device="cuda")
        elif field.name == "demonstrations":
            first, rest = value[0], value[1:]
            for name in ("prompt", "answer", "solution"):
                edited = dataclasses.replace(first, **{name: getattr(first, name) + " x"})
                yield f"demonstrations.{name}", dataclasses.replace(inputs, demonstrations=(edited, *rest))
            yield "demonstrations order", dataclasses.replace(inputs, demonstrations=value[::-1])
        else:
            raise AssertionError(f"WarmStartInputs.{field.name}: add a variant for it here")


def test_every_input_changes_the_key():
    inputs = WarmStartInputs(ModelConfig(), PretrainConfig(), "cpu", PROBLEMS)
    variants = list(_variants(inputs))
    assert len(variants) > len(dataclasses.fields(ModelConfig)) + len(dataclasses.fields(PretrainConfig))
    for what, other in variants:
        assert other.key() != inputs.key(), f"{what} is not in the warm start's key"


def test_what_the_build_does_not_read_keeps_the_key():
    inputs = WarmStartInputs(ModelConfig(), PretrainConfig(), "cpu", PROBLEMS)
    # the row's own columns, its uid and chat messages are not part of the demonstrations
    relabelled = tuple(dataclasses.replace(p, uid=p.uid + "-copy", fields={"x": 1}) for p in PROBLEMS)
    assert dataclasses.replace(inputs, demonstrations=relabelled).key() == inputs.key()


@pytest.mark.parametrize("override", [
    "task.max_prompt_length=100", "task.long_prompts=drop", "task.prompt_template=Question {question}",
    "task.arithmetic.n_eval=3", "eval.n_problems=3", "eval.temperature=0.5", "eval.samples=2",
    "trainer.steps=9", "trainer.lr=0.01", "run.seed=3", "run.mode=async", "run.name=x", "run.progress=false",
    "rollout.max_new_tokens=32", "policy.torch_threads=2", "reward.on_error=zero",
])
def test_unrelated_settings_keep_the_key(override):
    assert pretrained_dir(load_config(None, [*FAST, override])) == pretrained_dir(load_config(None, FAST))


@pytest.mark.parametrize("override", [
    "pretrain.steps=4", "pretrain.seed=1", "model.hidden_size=32", "task.arithmetic.seed=1",
    "task.arithmetic.n_train=60", "task.arithmetic.ops=+-",
])
def test_what_the_warm_start_learns_from_changes_the_key(override):
    assert pretrained_dir(load_config(None, [*FAST, override])) != pretrained_dir(load_config(None, FAST))


def test_a_dataset_is_keyed_by_its_content_not_its_path(tmp_path):
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(6)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(text)
    (tmp_path / "eval.jsonl").write_text(json.dumps({"question": "What is 7 + 7?", "answer": "#### 14"}) + "\n")
    (tmp_path / "c.jsonl").write_text(text.replace("What is 0", "What is 9"))

    def key_of(path: str) -> Path:
        return pretrained_dir(load_config(None, ["task=gsm8k", f"task.path={tmp_path / path}",
                                                 f"task.eval_path={tmp_path / 'eval.jsonl'}"]))

    assert key_of("a.jsonl") == key_of("b.jsonl")
    assert key_of("a.jsonl") != key_of("c.jsonl")


def test_cache_root_order(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCRL_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root("") == tmp_path / "env"
    assert cache_root(str(tmp_path / "explicit")) == tmp_path / "explicit"  # policy.cache_dir wins
    monkeypatch.delenv("ASYNCRL_CACHE")
    assert cache_root("") == tmp_path / "xdg" / "asyncrl"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid by the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root(None) == tmp_path / "home" / ".cache" / "asyncrl"


def test_the_warm_start_lands_in_asyncrl_cache_and_is_reused_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCRL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    built = warm_start(load_config(None, [*FAST, "run.progress=false"]))
    assert built.parent == tmp_path / "cache" and is_complete(built)
    mtime = (built / "pretrain_summary.json").stat().st_mtime_ns
    monkeypatch.chdir(tmp_path / "b")
    again = warm_start(load_config(None, [*FAST, "run.progress=false", "eval.n_problems=3",
                                          "task.max_prompt_length=99"]))
    assert again == built and (again / "pretrain_summary.json").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (tmp_path / "cache").glob("tiny-*")) == [built.name]
    assert not list(Path(tmp_path / "a").iterdir()) and not list(Path(tmp_path / "b").iterdir())


def test_concurrent_runs_build_once_and_an_unfinished_entry_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCRL_CACHE", str(tmp_path))
    cfg = load_config(None, [*FAST, "run.progress=false"])
    target = pretrained_dir(cfg)
    target.mkdir(parents=True)  # an entry without its summary: never complete
    (target / "config.json").write_text("{}")
    builds = []
    real_build = pretrain_module._build
    monkeypatch.setattr(pretrain_module, "_build", lambda *a, **k: (builds.append(1), real_build(*a, **k)))
    results = []
    threads = [threading.Thread(target=lambda: results.append(warm_start(cfg))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [target] * 3 and len(builds) == 1 and is_complete(target)
    assert not list(tmp_path.glob(".*.tmp")), "a temporary build directory was left behind"


def _train(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ASYNCRL_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *FAST, "trainer.steps=1", "eval.every=0",
                           "run.tensorboard=false", "run.report=false", "run.out_dir=runs", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.fixture(scope="module")
def first_train(tmp_path_factory):
    """One `asyncrl train` that builds the warm start, with the progress display on (stderr)."""
    root = tmp_path_factory.mktemp("warm")
    proc = _train(root / "first", root / "cache", "run.progress=true", "run.name=first")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, proc


def test_train_shows_the_warm_start_progress_on_stderr_and_keeps_stdout_one_line(first_train):
    root, proc = first_train
    assert "warm start not cached" in proc.stderr
    assert "step 3/3  sft loss" in proc.stderr  # the `asyncrl pretrain` display (plain lines off a terminal)
    (built,) = (root / "cache").glob("tiny-*")
    assert "warm start built in 0:00:" in proc.stderr and f"saved to {built}" in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["steps"] == 1


def test_train_from_another_directory_with_other_task_settings_reuses_it(first_train):
    root, _ = first_train
    (built,) = (root / "cache").glob("tiny-*")
    mtime = (built / "pretrain_summary.json").stat().st_mtime_ns
    proc = _train(root / "second", root / "cache", "run.progress=true", "run.name=second",
                  "task.max_prompt_length=120", "task.long_prompts=drop", "eval.n_problems=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warm start not cached" not in proc.stderr and "sft loss" not in proc.stderr
    assert list((root / "cache").glob("tiny-*")) == [built]
    assert (built / "pretrain_summary.json").stat().st_mtime_ns == mtime


def test_train_with_another_pretrain_setting_builds_another(first_train):
    root, _ = first_train
    proc = _train(root / "third", root / "cache", "run.progress=true", "run.name=third", "pretrain.seed=5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warm start not cached" in proc.stderr
    assert len(list((root / "cache").glob("tiny-*"))) == 2
