"""Evaluation through the run's rollout engine when the batch source holds one in this process (sync
and simulated modes with an engine that offers ``with_sampling``, vLLM's case): the evaluation's own
sampling settings, the newest weights; with the transformers engine the evaluation is the trained
model's as before (tests/runtime/test_eval_cache.py, tests of asyncrl.training.evaluation)."""

import json
import os
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from cli_forks import shared_forks  # tests/: the CLI forked from one imported copy

from asyncrl.config import load_config
from asyncrl.rollout.base import EngineSpec
from asyncrl.runtime import eval_cache

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402

PLUGIN = "asyncrl_test_eval_engine"
# A rollout engine registered like any plugin's: the transformers decode loop over a copy of its own
# (it keeps its weights, as vLLM does), offering with_sampling; each generate call appends its
# settings, the version it holds and a checksum of one weight to the file engine_kwargs names.
PLUGIN_SOURCE = textwrap.dedent('''
    import json

    from asyncrl.core.registries import ENGINES, EngineEntry
    from asyncrl.policy.model import DTYPES, plain_copy
    from asyncrl.rollout.base import SamplingView
    from asyncrl.rollout.hf_engine import TransformersEngine

    WATCHED = "model.layers.0.self_attn.q_proj.weight"


    class RecordingEngine:
        def __init__(self, spec, model, tokenizer, log):
            self.spec, self.log = spec, log
            self.inner = TransformersEngine(plain_copy(model, spec.device, DTYPES[spec.dtype]), tokenizer, spec)

        @property
        def version(self):
            return self.inner.version

        @version.setter
        def version(self, value):
            self.inner.version = value

        def update_weights(self, weights, version):
            self.inner.update_weights(weights, version)

        def rng_state(self):
            return self.inner.rng_state()

        def set_rng_state(self, state):
            self.inner.set_rng_state(state)

        def with_sampling(self, spec):
            return SamplingView(self, spec)

        def generate(self, prompts, *, sampling=None, **kwargs):
            spec = self.spec if sampling is None else sampling
            watched = dict(self.inner.model.named_parameters())[WATCHED]
            row = {"temperature": spec.temperature, "top_k": spec.top_k, "max_new_tokens": spec.max_new_tokens,
                   "rows": len(prompts), "version": self.version, "checksum": float(watched.double().sum())}
            with open(self.log, "a") as f:
                f.write(json.dumps(row) + "\\n")
            self.inner.spec = spec
            try:
                return self.inner.generate(prompts, **kwargs)
            finally:
                self.inner.spec = self.spec


    def build(spec, *, model, tokenizer, engine_kwargs, **_):
        return RecordingEngine(spec, model, tokenizer, engine_kwargs["log"])


    ENGINES["recording"] = EngineEntry(f"{__name__}:build", owns_weights=True)
''')
WATCHED = "model.layers.0.self_attn.q_proj.weight"
# an untrained warm start (pretrain.steps=0) builds in a second: what is checked is where evaluation
# generates and with which weights, not what the policy learned
FAST = TINY
EVAL = ["eval.every=1", "eval.temperature=0.7", "eval.top_k=5", "eval.samples=2", "eval.greedy=true",
        "rollout.temperature=1.0", "rollout.max_new_tokens=12", "trainer.steps=2"]


def _train(tmp_path: Path, cache: str, *args: str) -> tuple[list[dict], Path]:
    """Trains with the recording engine; (its generate calls in order, the run directory)."""
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    log = tmp_path / "engine_calls.jsonl"
    prelude = f"import sys; sys.path.insert(0, {str(tmp_path)!r})"  # the plugin's directory
    proc = shared_forks().run(["train", *FAST, *EVAL, f"run.plugins=[{PLUGIN}]", "rollout.engine=recording",
                               f"rollout.engine_kwargs={{log: {log}}}", f"policy.cache_dir={cache}",
                               "run.name=r", *args], tmp_path, dict(os.environ), prelude=prelude, timeout=300,
                              replace_env=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()], tmp_path / "runs" / "r"


@pytest.mark.parametrize("mode,extra,rollout_versions", [
    ("sync", [], [0, 1]),
    ("simulated", ["async.lag=1"], [0, 0]),  # step k generates with version k - 1 - lag
])
def test_evaluation_generates_through_the_rollout_engine_with_the_newest_weights(
        tmp_path, cache, mode, extra, rollout_versions):
    calls, run_dir = _train(tmp_path, cache, f"run.mode={mode}", *extra)
    sampled = [c for c in calls if c["temperature"] == 0.7]
    greedy = [c for c in calls if c["temperature"] == 0.0]
    rollouts = [c for c in calls if c["temperature"] == 1.0]
    assert len(sampled) + len(greedy) + len(rollouts) == len(calls)
    # the evaluation's own settings: its temperature and top_k, one whole completion per call
    assert {(c["top_k"], c["max_new_tokens"]) for c in sampled} == {(5, 12)}
    assert {c["top_k"] for c in greedy} == {0} and {c["top_k"] for c in rollouts} == {0}
    # 4 eval problems x 2 samples, then one greedy answer each; at steps 0, 1 and 2
    assert [c["rows"] for c in sampled] == [8] * 3 and [c["rows"] for c in greedy] == [4] * 3
    assert [c["version"] for c in sampled] == [0, 1, 2] == [c["version"] for c in greedy]
    assert [c["version"] for c in rollouts] == rollout_versions
    # the weights it holds at the last evaluation are the trained ones
    from safetensors.torch import load_file

    final = float(load_file(run_dir / "checkpoint" / "model.safetensors")[WATCHED].double().sum())
    assert sampled[-1]["checksum"] == pytest.approx(final, rel=1e-6, abs=1e-6)
    assert sampled[0]["checksum"] != pytest.approx(final, rel=1e-6, abs=1e-6)  # training moved it
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "eval_greedy_reward" in m] == [0, 1, 2]


def test_the_step0_cache_key_names_the_engine_only_when_one_generates(tiny_policy):
    model, _, task = tiny_policy
    problems = task.problems("eval")[:4]
    cfg = load_config(None, [])
    on_model = eval_cache.initial_eval_key(cfg, model, problems)
    assert eval_cache.initial_eval_key(cfg, model, problems, engine=None) == on_model
    through_vllm = eval_cache.initial_eval_key(cfg, model, problems, engine="vllm")
    assert through_vllm != on_model
    bf16 = load_config(None, ["rollout.dtype=bfloat16"])  # the engine's dtype shapes its answers
    assert eval_cache.initial_eval_key(bf16, model, problems, engine="vllm") != through_vllm


class _Out:
    """vLLM's RequestOutput for ``n`` tokens 5, each of log-prob -0.5."""

    def __init__(self, n: int):
        logprobs = [{5: types.SimpleNamespace(logprob=-0.5)}] * n
        self.outputs = [types.SimpleNamespace(token_ids=[5] * n, logprobs=logprobs, finish_reason="length")]


def test_vllm_engine_view_samples_at_its_own_settings(monkeypatch):
    """With a stand-in vllm module: the view's calls carry its settings, the engine's keep its own."""
    from asyncrl.rollout.vllm_engine import VLLMEngine

    params = []
    llm = types.SimpleNamespace(generate=lambda requests, ps, use_tqdm=False: params.extend(ps) or
                                [_Out(p.max_tokens) for p in ps])
    module = types.SimpleNamespace(LLM=lambda **kwargs: llm, SamplingParams=lambda **kw: types.SimpleNamespace(**kw),
                                   TokensPrompt=lambda **kw: dict(kw))
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    engine = VLLMEngine("/models/m", tokenizer, EngineSpec(max_new_tokens=8, temperature=1.0, chunk_tokens=3))
    view = engine.with_sampling(EngineSpec(max_new_tokens=6, temperature=0.0, top_p=0.9, top_k=7))
    engine.version = 4
    gen = view.generate([[1, 3], [1]])
    assert view.version == 4 and gen.completion_ids.shape == (2, 6) and bool((gen.versions == 4).all())
    assert [(p.temperature, p.top_p, p.top_k, p.max_tokens) for p in params] == [(0.0, 0.9, 7, 6)] * 2  # one chunk
    params.clear()
    engine.chunk_tokens = 3  # below the engine's request floor (MIN_CHUNK), set directly to see the chunks
    engine.generate([[1, 3]])
    assert [(p.temperature, p.top_p, p.top_k, p.max_tokens) for p in params] == [(1.0, 1.0, -1, 3), (1.0, 1.0, -1, 3),
                                                                               (1.0, 1.0, -1, 2)]
    assert torch.equal(engine.generate([[1]], sampling=view.spec).completion_ids, torch.full((1, 6), 5))
