"""The optimizer's state in a checkpoint, written as shards: each rank writes its own part of every
state tensor with ``torch.distributed.checkpoint`` (DCP), and no rank ever holds the whole state.

A checkpoint's ``trainer_state.pt`` then holds, in place of the optimizer's tensors, a small entry
``{"sharded": "optimizer", "param_groups": [...], "scalars": {...}}``: the folder of the shards,
relative to the checkpoint (:func:`asyncrl.training.checkpoint.load_states` makes it absolute), the param
groups (learning rates, betas: no tensors), and any per-parameter state that is not a tensor.
In the folder, DCP's ``.metadata`` describes every tensor whole (``state.<param index>.<name>``, its
size and dtype) and where each rank's piece of it lies, so a checkpoint loads at any world size:
each rank of a new world reads the pieces that overlap its own shard, one process (world 1) reads
whole tensors. Parameters are numbered as in the single-process ``optimizer.state_dict()`` (the
sharded model keeps the policy's parameter order), so the two formats name the same tensors.

Loading checks what each rank read (its own shard) for values the state cannot hold (NaN, inf, a
negative second moment: :mod:`asyncrl.core.finite`), one line naming the folder, before the optimizer
takes it: a resume has checked every tensor whole on rank 0 already, but the ESS rollback and the
other ranks read the files again. Every read goes through :func:`asyncrl.distributed.dcp_reader.safe_reader`:
DCP's ``.metadata`` is a pickle, read with an allow-list so that a crafted checkpoint cannot run code.
What the checkpoint fits (its ``fingerprint.json``,
:mod:`asyncrl.training.fingerprint`) is written and checked by rank 0 with the rest of the folder.

Why the optimizer and not the weights: rank 0 gathers the whole weights after every step anyway (the
engines need them), and writing them as a Hugging Face folder keeps every checkpoint loadable by
transformers and vLLM. The optimizer's state (two fp32 tensors per parameter with AdamW) is the part a
single rank should never have to hold.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import torch
from torch import Tensor

from asyncrl.core.finite import BadTensor, first_bad_in

SHARDS = "optimizer"  # the shards' folder inside a checkpoint


def save_shards(optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Write this rank's piece of every optimizer state tensor into ``folder`` (a collective: every
    rank calls it with the same folder, which must be on storage every rank can reach)."""
    import torch.distributed.checkpoint as dcp

    state = optimizer.state_dict()["state"]
    tensors = {str(index): {key: value for key, value in per_param.items() if isinstance(value, Tensor)}
               for index, per_param in state.items()}
    from asyncrl.core.disk import writing

    # a rank past its disk or file-size limit ends in one line naming the folder, as rank 0's files do
    with writing(folder), _first_cause():
        dcp.save({"state": tensors}, storage_writer=dcp.FileSystemWriter(str(folder)))


def shard_entry(optimizer: torch.optim.Optimizer) -> dict:
    """The trainer state's optimizer entry for shards written by :func:`save_shards` (no collective)."""
    state = optimizer.state_dict()
    scalars = {str(index): {key: value for key, value in per_param.items() if not isinstance(value, Tensor)}
               for index, per_param in state["state"].items()}
    return {"sharded": SHARDS, "param_groups": state["param_groups"], "scalars": scalars}


def is_sharded(entry: dict) -> bool:
    return isinstance(entry, dict) and "sharded" in entry


def tensor_names(folder: Path) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """{``state.<index>.<name>``: (size, dtype)} of every tensor in a shards folder (its metadata)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from asyncrl.distributed.dcp_reader import read_metadata_file

    metadata = read_metadata_file(folder / ".metadata")
    return {key: (meta.size, meta.properties.dtype) for key, meta in metadata.state_dict_metadata.items()
            if isinstance(meta, TensorStorageMetadata)}


def read_tensor(folder: Path, key: str, size: torch.Size, dtype: torch.dtype) -> Tensor:
    """One whole tensor of a shards folder, read in this process alone (checks, world 1)."""
    import torch.distributed.checkpoint as dcp

    from asyncrl.distributed.dcp_reader import safe_reader

    index, name = _split(key)
    out = torch.empty(size, dtype=dtype)
    with _first_cause():
        dcp.load({"state": {index: {name: out}}}, storage_reader=safe_reader(folder), no_dist=True)
    return out


def load_shards(optimizer: torch.optim.Optimizer, entry: dict, distributed: bool) -> None:
    """Load a sharded optimizer entry (its ``sharded`` folder made absolute) into ``optimizer``:
    with ``distributed``, each rank reads its own shard of every tensor (a collective; the parameters
    are DTensors), else whole tensors in this process."""
    import torch.distributed.checkpoint as dcp

    from asyncrl.distributed.dcp_reader import safe_reader

    folder = Path(entry["sharded"])
    params = [p for group in optimizer.param_groups for p in group["params"]]
    tensors: dict[str, dict[str, Tensor]] = {}
    for key, (size, dtype) in tensor_names(folder).items():
        index, name = _split(key)
        tensors.setdefault(index, {})[name] = _empty_like_param(size, dtype, params[int(index)])
    with _first_cause():
        dcp.load({"state": tensors}, storage_reader=safe_reader(folder), no_dist=not distributed)
    found = first_bad_in(tensors, "state")
    if found:
        raise BadTensor(f"optimizer shards {folder} hold a value the optimizer state cannot hold ({found}); "
                        "refusing to load them")
    state: dict[int, dict] = {int(index): {**entry["scalars"].get(index, {}), **values}
                              for index, values in tensors.items()}
    optimizer.load_state_dict({"state": state, "param_groups": entry["param_groups"]})


@contextlib.contextmanager
def _first_cause():
    """DCP's errors as what caused them: it wraps every rank's exception in a CheckpointException (a
    BaseException, with a traceback per rank), which would hide a full disk (ENOSPC) or a torn file
    from the callers' handling. Also quiets DCP's note that one process reads alone (world 1 does)."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            yield
    except CheckpointException as err:
        cause = next(iter(err.failures.values()))[0]
        raise cause from None


def _split(key: str) -> tuple[str, str]:
    _, index, name = key.split(".", 2)
    return index, name


def _empty_like_param(size: torch.Size, dtype: torch.dtype, param: Tensor) -> Tensor:
    """Storage for a saved state tensor: sharded as ``param`` when it is a DTensor of the same shape
    (exp_avg, exp_avg_sq), else whole (the step count, or every tensor in one process)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import empty as dtensor_empty

    if isinstance(param, DTensor) and tuple(size) == tuple(param.shape):
        return dtensor_empty(*size, dtype=dtype, device_mesh=param.device_mesh, placements=param.placements)
    device = param.device if tuple(size) == tuple(param.shape) else torch.device("cpu")
    return torch.empty(size, dtype=dtype, device=device)
