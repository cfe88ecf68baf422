"""Checkpoints: atomic, rolling, and complete enough to resume a run exactly.

Layout of a run directory::

    checkpoints/step-000040/   the newest complete checkpoint (and older ones, up to ``keep``)
        config.json, model.safetensors, tokenizer files    an HF model (transformers / vLLM load it)
        trainer_state.pt     optimizer, trainer RNG, version, step, the process-wide RNGs
        optimizer/           with several trainer ranks: the optimizer's state tensors, each rank's
                             shard written by torch.distributed.checkpoint (trainer_state.pt then
                             holds only the param groups; asyncrl.distributed.sharded_state)
        run_state.pt         the batch source (prompt cursor, buffer, in-flight work, engine RNG),
                             the evaluation history and the run totals
    checkpoint -> checkpoints/step-000040    a symlink to the newest one

Writing: everything goes into ``checkpoints/step-N.tmp/``, every file and the folder are fsynced,
then the folder is renamed to ``step-N`` (atomic on POSIX): a kill at any moment leaves either the
new checkpoint complete or no trace of it beside the previous ones. Old checkpoints are renamed
away before they are deleted, so a half-deleted folder is never mistaken for a checkpoint.

Loading: both ``.pt`` files load with ``torch.load(weights_only=True)`` (tensors, numbers,
strings, lists, dicts, tuples only; no arbitrary pickle), the weights from safetensors.
:func:`check_checkpoint` reads every file of a folder before a resume trusts it: a torn or
truncated file is :class:`DamagedCheckpoint` (an older checkpoint can stand in), a NaN or inf in
the weights or the optimizer state :class:`NonFiniteCheckpoint` (refused).

A full disk: a save first compares the free space with the checkpoint's size (its tensors' bytes,
plus the previous checkpoint's other files), and a write that fails for want of space (``ENOSPC``,
torch's ``unexpected pos``) removes the ``.tmp`` folder; either way the error is one line
(:class:`asyncrl.core.disk.DiskFull`, exit 2) naming the folder and the bytes needed, and the previous
checkpoints stay as they were.

A LoRA (peft) policy is saved as the plain base architecture with the adapters merged in, so the
folder loads with ``AutoModelForCausalLM`` / vLLM without peft; the adapter alone is kept in
``lora_adapter/`` (a subdirectory: an ``adapter_config.json`` at the top level would make
transformers try to load the folder as an adapter).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from asyncrl.core.disk import disk_full, free_bytes, is_disk_full

CHECKPOINTS = "checkpoints"
LATEST_LINK = "checkpoint"
TRAINER_STATE = "trainer_state.pt"
RUN_STATE = "run_state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def global_rng_state() -> dict:
    """torch, Python and NumPy RNG states in types ``torch.load(weights_only=True)`` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)]}


def set_global_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


def _fsync_tree(path: Path) -> None:
    for item in sorted(path.rglob("*")) + [path]:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first, as (step, folder)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or None."""
    found = step_dirs(run_dir)
    return found[-1][1] if found else None


def tensor_bytes(obj) -> int:
    """Bytes of every tensor in ``obj`` (nested dicts, lists and tuples)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def _other_files_bytes(checkpoint: Path | None) -> int:
    """Bytes of a checkpoint's files other than tensors (tokenizer, configs): the next one's too."""
    if checkpoint is None:
        return 0
    return sum(p.stat().st_size for p in checkpoint.rglob("*")
               if p.is_file() and p.suffix not in (".safetensors", ".pt"))


def checkpoint_bytes(run_dir: Path, *states) -> int:
    """Estimated size of the next checkpoint of ``run_dir`` holding ``states`` (state dicts)."""
    tensors = sum(tensor_bytes(state) for state in states)
    return int(tensors * 1.01) + _other_files_bytes(latest_checkpoint(run_dir)) + (64 << 10)


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict, run_state: dict,
                    keep: int = 2, write_shards=None, shard_bytes: int = 0) -> Path:
    """Write checkpoint ``step`` of ``run_dir`` atomically; keep the newest ``keep`` (0 = all).
    ``write_shards(folder)``, if given, writes the trainer ranks' shards into the folder being
    written (``shard_bytes`` of them) before it is fsynced and renamed.
    Without room for it: :class:`asyncrl.core.disk.DiskFull`, nothing of it left behind."""
    from asyncrl.policy.lora import base_model_of, export_state_dict, is_peft_model

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    weights = export_state_dict(model)
    trainer_state = {**trainer_state, "step": step, "global_rng": global_rng_state()}
    needed = checkpoint_bytes(Path(run_dir), weights, trainer_state, run_state) + shard_bytes
    free = free_bytes(root)
    if free is not None and free < needed:
        raise disk_full(final, needed, _keep_hint(Path(run_dir)))
    try:
        tmp.mkdir()
        base_model_of(model).save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        if is_peft_model(model):
            model.save_pretrained(tmp / "lora_adapter")
        tokenizer.save_pretrained(tmp)
        torch.save(trainer_state, tmp / TRAINER_STATE)
        torch.save(run_state, tmp / RUN_STATE)
        if write_shards is not None:
            write_shards(tmp)
        _fsync_tree(tmp)
    except BaseException as err:  # a torn folder must not outlive the error (nor fill the disk)
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(err, root, needed):
            raise disk_full(final, needed, _keep_hint(Path(run_dir))) from None
        raise
    if final.exists():  # the same step saved again (a signal right after a due checkpoint): replace
        _discard(final)
    tmp.rename(final)
    _fsync_dir(root)
    _point_latest(Path(run_dir), final)
    _prune(Path(run_dir), keep)
    return final


def _keep_hint(run_dir: Path) -> str:
    newest = latest_checkpoint(run_dir)
    if newest is None:
        return "; this run has no checkpoint yet"
    return (f"; the checkpoint {newest.name} is intact (free some space or lower run.keep_checkpoints, "
            f"then asyncrl train --resume {run_dir})")


def _discard(path: Path) -> None:
    trash = path.with_name(f".trash-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    path.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def _point_latest(run_dir: Path, target: Path) -> None:
    link, tmp_link = run_dir / LATEST_LINK, run_dir / f".{LATEST_LINK}.tmp"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    tmp_link.symlink_to(target.relative_to(run_dir))
    os.replace(tmp_link, link)


def _prune(run_dir: Path, keep: int) -> None:
    found = step_dirs(run_dir)
    for _, path in found[: max(0, len(found) - keep)] if keep > 0 else []:
        _discard(path)
    for leftover in (run_dir / CHECKPOINTS).glob("*.tmp"):  # a write killed earlier
        shutil.rmtree(leftover, ignore_errors=True)


def load_states(checkpoint: Path) -> tuple[dict, dict]:
    """(trainer state, run state) of a checkpoint folder, without arbitrary unpickling."""
    trainer_state = torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True)
    run_state = torch.load(checkpoint / RUN_STATE, map_location="cpu", weights_only=True)
    optimizer = trainer_state.get("optimizer")
    if isinstance(optimizer, dict) and "sharded" in optimizer:  # the shards' folder, made absolute
        trainer_state["optimizer"] = {**optimizer, "sharded": str(Path(checkpoint) / optimizer["sharded"])}
    return trainer_state, run_state


class DamagedCheckpoint(ValueError):
    """A checkpoint folder with a missing, torn or truncated file (an older one can stand in)."""


class NonFiniteCheckpoint(ValueError):
    """A checkpoint whose weights or optimizer state hold NaN or inf (never resumed from)."""


_CHUNK = 1 << 24  # elements checked at a time: bounded memory for a large embedding


def _first_non_finite(name: str, tensor: torch.Tensor) -> str | None:
    if not tensor.is_floating_point():
        return None
    flat = tensor.reshape(-1)
    for start in range(0, flat.numel(), _CHUNK):
        part = flat[start:start + _CHUNK]
        bad = ~torch.isfinite(part)
        if bool(bad.any()):
            value = part[bad.nonzero()[0, 0]].item()
            return f"{name} holds {value}"
    return None


def _check_weights(path: Path) -> None:
    """Every tensor of a safetensors file: readable (else damaged) and finite (else refused)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():
                found = _first_non_finite(key, fh.get_tensor(key))
                if found:
                    raise NonFiniteCheckpoint(f"{path.name}: {found}")
    except NonFiniteCheckpoint:
        raise
    except Exception as err:  # noqa: BLE001 (the library's error for a torn file varies)
        raise DamagedCheckpoint(f"{path.name}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def _non_finite_state(obj, where: str) -> str | None:
    if isinstance(obj, torch.Tensor):
        return _first_non_finite(where, obj)
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite_state(value, f"{where}.{key}")
        if found:
            return found
    return None


def _non_finite_shards(folder: Path) -> str | None:
    """The first non-finite value among a shards folder's tensors, read whole one at a time (a
    missing or torn shard file is :class:`DamagedCheckpoint`)."""
    from asyncrl.distributed.sharded_state import read_tensor, tensor_names

    try:
        names = tensor_names(folder)
        for key, (size, dtype) in sorted(names.items()):
            found = _first_non_finite(f"{folder.name}/{key}", read_tensor(folder, key, size, dtype))
            if found:
                return found
    except Exception as err:  # noqa: BLE001 (DCP's error for a missing or torn file varies)
        raise DamagedCheckpoint(f"{folder.name}/: {_first_line(err)}") from None
    return None


def check_checkpoint(checkpoint: Path) -> tuple[dict, dict]:
    """Read every file of ``checkpoint``; return its (trainer state, run state). Raises
    :class:`DamagedCheckpoint` (missing or unreadable file) or :class:`NonFiniteCheckpoint`."""
    for name in ("config.json", TRAINER_STATE, RUN_STATE):
        if not (checkpoint / name).is_file():
            raise DamagedCheckpoint(f"no {name}")
    weights = sorted(checkpoint.rglob("*.safetensors"))
    if not weights:
        raise DamagedCheckpoint("no *.safetensors weights")
    for path in sorted(checkpoint.rglob("*.json")):
        try:
            json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise DamagedCheckpoint(f"{path.relative_to(checkpoint)}: {_first_line(err)}") from None
    try:
        trainer_state, run_state = load_states(checkpoint)
    except Exception as err:  # noqa: BLE001 (a torn zip, a truncated pickle: torch's wording varies)
        raise DamagedCheckpoint(_first_line(err)) from None
    for path in weights:
        _check_weights(path)
    optimizer = trainer_state.get("optimizer", {})
    found = _non_finite_shards(Path(optimizer["sharded"])) if "sharded" in optimizer else \
        _non_finite_state(optimizer, "optimizer")
    if found:
        raise NonFiniteCheckpoint(f"{TRAINER_STATE}: {found}")
    return trainer_state, run_state


def set_aside(run_dir: Path, checkpoint: Path) -> Path:
    """Rename a damaged checkpoint out of the rolling set (kept for inspection, never counted or
    resumed from); the ``checkpoint`` link then names the newest remaining one."""
    aside = checkpoint.with_name(f"{checkpoint.name}.damaged")
    n = 1
    while aside.exists():
        n += 1
        aside = checkpoint.with_name(f"{checkpoint.name}.damaged-{n}")
    checkpoint.rename(aside)
    newest = latest_checkpoint(run_dir)
    if newest is not None:
        _point_latest(Path(run_dir), newest)
    return aside
