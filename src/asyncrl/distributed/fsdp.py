"""FSDP2 sharding of the trained model, and whole weights out of it.

``shard_model`` applies ``fully_shard`` to each decoder layer (the classes a Hugging Face model lists
in ``_no_split_modules``), then to the root, on a one-dimensional device mesh over all ranks. Every
rank must start from the same weights: :func:`broadcast_parameters` copies rank 0's before sharding
(rank 0 may have resumed from a checkpoint the others never read).

``full_state`` gathers every parameter whole (a collective each: every rank calls it, in the same
order) and returns them on every rank: all ranks gather everything first, and only then does rank 0
send anything anywhere, because interleaving one rank's sends with the others' gathers hangs.
"""

from __future__ import annotations

import torch

from asyncrl.distributed.config import FsdpConfig
from asyncrl.distributed.data_parallel import full
from asyncrl.distributed.world import World

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
    forward *is* that computation. Parameter names carry the ``policy.`` prefix (:func:`full_state`
    removes it)."""

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


def shard_model(model: torch.nn.Module, world: World, cfg: FsdpConfig) -> ShardedPolicy:
    """``model`` sharded in place with FSDP2 over ``world``, inside the returned FSDP root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (world.size,))
    options: dict = {"mesh": mesh, "reshard_after_forward": cfg.reshard_after_forward}
    if PARAM_DTYPES[cfg.param_dtype] is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=PARAM_DTYPES[cfg.param_dtype],
                                                    reduce_dtype=torch.float32)
    if cfg.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    root = ShardedPolicy(model)
    fully_shard(root, **options)
    return root


@torch.no_grad()
def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{name: whole tensor} of every parameter and buffer of a sharded ``model`` (a collective), named
    as in the unsharded policy."""
    state = {name: full(param.detach()) for name, param in model.named_parameters()}
    state.update({name: buffer for name, buffer in model.named_buffers()})
    return {name.removeprefix("policy."): value for name, value in state.items()}


@torch.no_grad()
def copy_into(replica: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """``state``'s tensors into ``replica``'s parameters and buffers of the same names (shapes checked)."""
    own = dict(replica.named_parameters())
    own.update(dict(replica.named_buffers()))
    for name, value in state.items():
        own[name].copy_(value)
