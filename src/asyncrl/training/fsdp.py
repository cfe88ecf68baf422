"""FSDP2 sharding of the trained model, and whole weights out of it, one parameter at a time.

``shard_model`` applies ``fully_shard`` to each decoder layer (the classes a Hugging Face model lists
in ``_no_split_modules``), then to the root, on a one-dimensional device mesh over all ranks. Every
rank must start from the same weights: :func:`broadcast_parameters` copies rank 0's before sharding
(rank 0 may have resumed from a checkpoint the others never read).

Rank 0 keeps a replica of the policy in the generation dtype (:func:`generation_replica`) for
generation, evaluation and publishing; the fp32 shards stay the master weights. :func:`stream_into`
refreshes it after a step and :func:`master_state` gathers the master weights for a checkpoint: both
gather one parameter whole at a time (a collective each: every rank runs the same loop, in the same
order, the others keeping nothing), so no rank holds more than one whole parameter beyond its shard.
Rank 0 sends nothing anywhere inside the loop, because interleaving one rank's sends with the
others' gathers hangs.
"""

from __future__ import annotations

import copy

import torch

from asyncrl.distributed.config import FsdpConfig, gather_dtype
from asyncrl.distributed.world import World
from asyncrl.training.data_parallel import full

PARAM_DTYPES = {"none": None, "bfloat16": torch.bfloat16}


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: modules whose class a Hugging Face model names in
    ``_no_split_modules`` (e.g. Qwen2DecoderLayer); none for other models (the root is sharded whole)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names and m is not model]


@torch.no_grad()
def broadcast_parameters(model: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (before sharding), in place."""
    for tensor in [*model.parameters(), *model.buffers()]:
        torch.distributed.broadcast(tensor.data, src=0)


class ShardedPolicy(torch.nn.Module):
    """The FSDP root around the policy. FSDP gathers the root's own parameters (embeddings, final
    norm, LM head) in the root's forward hooks, and the trainer's log-probs do not call the policy's
    forward (they run its backbone, then the LM head in chunks): so the root is this module, whose
    forward *is* that computation. Parameter names carry the ``policy.`` prefix (:func:`stream_into`
    and :func:`master_state` remove it)."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, *args, **kwargs):
        from asyncrl.policy.logprobs import completion_logprobs

        logp, entropy = completion_logprobs(self.policy, *args, **kwargs)
        # FSDP hooks the outputs for its backward pass; a view (what the log-probs are) could lose that hook
        return logp.clone(), entropy

    def completion_logprobs(self, *args, **kwargs):
        """asyncrl.policy.logprobs.completion_logprobs of the policy, through FSDP's hooks."""
        return self(*args, **kwargs)


def shard_model(model: torch.nn.Module, world: World, cfg: FsdpConfig, *, autocast: str = "none") -> ShardedPolicy:
    """``model`` sharded in place with FSDP2 over ``world``, inside the returned FSDP root.
    ``autocast``: the trainer's (``trainer.autocast``), which ``param_dtype=auto`` follows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (world.size,))
    options: dict = {"mesh": mesh, "reshard_after_forward": cfg.reshard_after_forward}
    param_dtype = PARAM_DTYPES[gather_dtype(cfg.param_dtype, str(device), autocast)]
    if param_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if cfg.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    root = ShardedPolicy(model)
    fully_shard(root, **options)
    return root


def generation_replica(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A separate copy of ``model`` whose floating parameters are in ``dtype`` (buffers copied as they
    are): each parameter is cast once into the copy, so the full-precision weights are never held
    twice (a plain deep copy would, for a moment). Tied parameters stay tied."""
    memo: dict = {}
    with torch.no_grad():
        for param in model.parameters():
            if id(param) not in memo:
                value = param.detach().to(dtype, copy=True) if param.is_floating_point() else param.detach().clone()
                memo[id(param)] = torch.nn.Parameter(value, requires_grad=param.requires_grad)
    return copy.deepcopy(model, memo)


def _policy_name(name: str) -> str:
    return name.removeprefix("policy.")


def _whole(param: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A sharded parameter gathered whole (a collective), cast to ``dtype`` before the gather (None:
    as the shards are). Callers drop each before gathering the next, in a plain loop: a generator's
    yielded tuple would keep the previous one alive through the next gather."""
    local = param.detach()
    return full(local if dtype is None else local.to(dtype))


@torch.no_grad()
def stream_into(sharded: torch.nn.Module, replica: torch.nn.Module | None, dtype: torch.dtype) -> None:
    """Rank 0's ``replica`` refreshed from the shards, parameter by parameter, gathered in ``dtype``
    (the replica's: half the traffic of fp32 at bf16, and the same values as gathering then casting).
    The other ranks pass ``replica`` None and join each gather. Buffers do not train: not gathered."""
    own = None if replica is None else dict(replica.named_parameters())
    for name, param in sharded.named_parameters():
        whole = _whole(param, dtype)
        if own is not None:
            own[_policy_name(name)].copy_(whole)
        del whole


@torch.no_grad()
def master_state(sharded: torch.nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """{name: whole tensor in host memory} of every parameter of a sharded model, in the shards'
    dtype, gathered one at a time; ``keep`` False (the other ranks) joins the gathers and keeps nothing."""
    out: dict[str, torch.Tensor] = {}
    for name, param in sharded.named_parameters():
        whole = _whole(param, None)
        if keep:
            out[_policy_name(name)] = whole.to("cpu", copy=True)
        del whole
    return out


def named_like(replica: torch.nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``replica``'s state dict with each parameter's tensor taken from ``weights`` (named as
    ``replica.named_parameters()``): tied names share one tensor, buffers are the replica's own."""
    by_storage = {param.data_ptr(): name for name, param in replica.named_parameters()}
    return {key: weights[by_storage[value.data_ptr()]] if value.data_ptr() in by_storage else value
            for key, value in replica.state_dict().items()}
