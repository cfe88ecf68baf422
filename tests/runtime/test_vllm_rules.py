"""The rules that keep a vLLM run from half-working, without vLLM (a stand-in ``vllm`` module):
the version floor checked when the engine starts, vLLM refused inside a torchrun rank, truncated
sampling refused unless its biased log-probs are accepted, and vLLM workers left unpinned. The
``vllm-*`` rows of docs/errors.md run through the real CLI here."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from asyncrl.runtime.validate import load_run_config
from asyncrl.core.loader import ConfigError
from asyncrl.rollout.base import EngineSpec
from cli_forks import run_cli, shared_forks  # tests/: the CLI forked from one imported copy

REPO = Path(__file__).resolve().parents[2]
ERRORS_MD = REPO / "docs" / "errors.md"
TORCHRUN_OF_TWO = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
# the CLI child, as if vllm 0.15.1 were installed
OLD_VLLM = "import sys, types; sys.modules['vllm'] = types.ModuleType('vllm'); sys.modules['vllm'].__version__ = '0.15.1'"


def _fake_vllm(monkeypatch, version: str | None) -> list:
    """A ``vllm`` module of ``version`` (None: without ``__version__``); returns the list that
    records each ``vllm.LLM(...)`` built."""
    built: list = []
    module = types.ModuleType("vllm")
    if version is not None:
        module.__version__ = version
    module.LLM = lambda **kwargs: built.append(kwargs) or types.SimpleNamespace(kwargs=kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return built


def _engine():
    from asyncrl.rollout.vllm_engine import VLLMEngine

    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    return VLLMEngine("/models/m", tokenizer, EngineSpec(max_new_tokens=4, temperature=1.0, device="cpu"))


@pytest.mark.parametrize("version", ["0.10.2", "0.15.1", "0.15.2.dev12+gabc"])
def test_a_vllm_older_than_the_floor_is_refused_before_it_loads_anything(monkeypatch, version):
    built = _fake_vllm(monkeypatch, version)
    with pytest.raises(ConfigError) as err:
        _engine()
    line = str(err.value)
    assert "\n" not in line and line.startswith("config error: rollout.engine: ")
    assert f"vllm {version} is installed" in line and "vllm>=0.16" in line
    assert built == []  # refused before vllm.LLM: no model load


@pytest.mark.parametrize("version", ["0.16.0", "0.16.0rc1", "0.33.0+cpu", "1.0.0", None, "dev"])
def test_a_vllm_at_or_above_the_floor_or_without_a_release_number_starts(monkeypatch, version):
    built = _fake_vllm(monkeypatch, version)
    _engine()
    assert len(built) == 1


def test_the_floor_is_the_one_pyproject_asks_for():
    from asyncrl.rollout.vllm_engine import VLLM_FLOOR

    assert f'vllm = ["vllm>={VLLM_FLOOR}"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("mode", ["sync", "simulated"])
def test_vllm_inside_a_torchrun_rank_is_refused_at_config_load(monkeypatch, mode):
    for key, value in TORCHRUN_OF_TWO.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"run.mode={mode}", "rollout.engine=vllm"])
    line = str(err.value)
    assert line.startswith("config error: rollout.engine: ") and f"run.mode={mode}" in line
    assert "2-rank" in line and "run.mode=async" in line


def test_vllm_in_workers_under_torchrun_or_in_one_process_loads(monkeypatch):
    assert load_run_config(None, ["run.mode=sync", "rollout.engine=vllm"]).rollout.engine == "vllm"  # one process
    for key, value in TORCHRUN_OF_TWO.items():
        monkeypatch.setenv(key, value)
    assert load_run_config(None, ["run.mode=async", "rollout.engine=vllm"]).run.mode == "async"
    assert load_run_config(None, ["run.mode=sync", "rollout.engine=transformers"]).rollout.engine == "transformers"


@pytest.mark.parametrize("override", ["rollout.top_p=0.9", "rollout.top_k=20"])
def test_truncated_sampling_with_vllm_is_refused_unless_the_bias_is_accepted(override):
    key, value = override.split("=")
    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["rollout.engine=vllm", override])
    line = str(err.value)
    assert line.startswith(f"config error: {key}: ") and f"{key.split('.')[1]}={value}" in line
    assert "rollout.allow_truncated_logprobs=true" in line
    cfg = load_run_config(None, ["rollout.engine=vllm", override, "rollout.allow_truncated_logprobs=true"])
    assert cfg.rollout.allow_truncated_logprobs


def test_truncated_sampling_with_transformers_is_not_refused():
    """The transformers engine records the untruncated log-probs (asyncrl.policy.sampling)."""
    cfg = load_run_config(None, ["rollout.top_p=0.9", "rollout.top_k=20"])
    assert (cfg.rollout.top_p, cfg.rollout.top_k) == (0.9, 20)


def test_vllm_workers_are_not_pinned(monkeypatch):
    from asyncrl.runtime.sources.async_source import cpu_plan

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    pinned = load_run_config(None, ["run.mode=async", "async.n_workers=2"])
    assert cpu_plan(pinned) == (0, [1, 2])  # the transformers engine keeps its pinning
    vllm = load_run_config(None, ["run.mode=async", "async.n_workers=2", "rollout.engine=vllm"])
    assert vllm.async_.pin_cpus  # the default, which does not apply to vLLM workers
    assert cpu_plan(vllm) == (None, [None, None])


# the rules this file holds (the share rule needs a GPU's free memory: tests/models/test_vllm_share.py)
RULE_ROWS = {"vllm-truncated-logprobs", "vllm-under-torchrun", "vllm-too-old"}


def _error_rows() -> list[tuple[str, list[str], str]]:
    """docs/errors.md's rows of :data:`RULE_ROWS`: (case, arguments, expected substring)."""
    rows = []
    for line in ERRORS_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `vllm-") and len(cells) == 3 and cells[0].strip("`") in RULE_ROWS:
            rows.append((cells[0].strip("`"), cells[1].split("`")[1].split(), cells[2].split("`")[1]))
    return rows


def test_there_are_vllm_rows_in_the_docs():
    assert {r[0] for r in _error_rows()} == RULE_ROWS


@pytest.mark.parametrize("case, args, expected", _error_rows(), ids=[r[0] for r in _error_rows()])
def test_the_vllm_rows_of_docs_errors_are_one_line(tmp_path, model_dir, case, args, expected):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if case == "vllm-under-torchrun":
        env.update(TORCHRUN_OF_TWO)
    args = [a.replace("{model}", str(model_dir)) for a in args]  # a saved model: no warm start
    args = [*args, f"run.out_dir={tmp_path / 'runs'}", "run.progress=false", "run.tensorboard=false"]
    proc = (shared_forks().run(args, tmp_path, env, prelude=OLD_VLLM, timeout=120, replace_env=True)
            if case == "vllm-too-old" else run_cli(args, tmp_path, env, timeout=120))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert expected in lines[0] and "Traceback" not in proc.stderr
    if case != "vllm-too-old":  # refused at config load; the version only when the engine starts
        assert not (tmp_path / "runs").exists()
