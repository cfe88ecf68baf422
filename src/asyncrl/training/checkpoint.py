"""Checkpoints: atomic, rolling, and complete enough to resume a run exactly.

Layout of a run directory::

    checkpoints/step-000040/   the newest complete checkpoint (and older ones, up to ``keep``)
        config.json, model.safetensors, tokenizer files    an HF model (transformers / vLLM load it)
        trainer_state.pt     optimizer, trainer RNG, version, step, the process-wide RNGs
        optimizer/           with several trainer ranks: the optimizer's state tensors, each rank's
                             shard written by torch.distributed.checkpoint (trainer_state.pt then
                             holds only the param groups; asyncrl.training.sharded_state)
        run_state.pt         the batch source (prompt cursor, buffer, in-flight work, engine RNG),
                             the evaluation history and the run totals
        fingerprint.json     what the checkpoint fits: architecture, tokenizer, loss, LoRA
                             (asyncrl.training.fingerprint; a resume into anything else is refused)
    checkpoint -> checkpoints/step-000040    a symlink to the newest one

Writing: everything goes into ``checkpoints/step-N.tmp/``, every file and the folder are fsynced,
then the folder is renamed to ``step-N`` (atomic on POSIX): a kill at any moment leaves either the
new checkpoint complete or no trace of it beside the previous ones. Old checkpoints are renamed
away before they are deleted, so a half-deleted folder is never mistaken for a checkpoint.

Loading: both ``.pt`` files load with ``torch.load(weights_only=True)`` (tensors, numbers,
strings, lists, dicts, tuples only; no arbitrary pickle), the weights from safetensors, the
optimizer's shards through :mod:`asyncrl.distributed.dcp_reader` (DCP's ``.metadata`` pickle read
with an allow-list; anything else is :class:`UnsafeCheckpoint`, refused, never set aside).
:func:`check_checkpoint` reads every file of a folder before a resume trusts it: a torn or
truncated file is :class:`DamagedCheckpoint` (an older checkpoint can stand in), a NaN or inf in
the weights or the optimizer state, or a negative Adam second moment (finite, but NaN weights after
the first update), :class:`NonFiniteCheckpoint` (refused).

A full disk: a save first compares the free space with the checkpoint's size (its tensors' bytes,
plus the previous checkpoint's other files), and a write that fails for want of space (``ENOSPC``,
torch's ``unexpected pos``) removes the ``.tmp`` folder; either way the error is one line
(:class:`asyncrl.core.disk.DiskFull`, exit 2) naming the folder and the bytes needed, and the previous
checkpoints stay as they were. A file-size limit (``ulimit -f``) likewise: a save first compares
the limit with its largest file (the weights, or the optimizer state), and a write that fails past
the limit (``EFBIG``) removes the ``.tmp`` folder; one line (:class:`asyncrl.core.disk.FileSizeLimit`,
exit 2) naming the folder and the limit.

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

from asyncrl.core.disk import disk_full, file_size_limit, file_too_large, free_bytes, is_disk_full, is_file_size_limit
from asyncrl.core.finite import NEGATIVE_MOMENT, first_bad_in, first_bad_in_safetensors, first_bad_value
from asyncrl.core.user_code import first_line
from asyncrl.distributed.dcp_reader import UnsafeCheckpoint
from asyncrl.training.fingerprint import FINGERPRINT

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
                    keep: int = 2, write_shards=None, shard_bytes: int = 0, fingerprint: dict | None = None,
                    weights: dict[str, torch.Tensor] | None = None) -> Path:
    """Write checkpoint ``step`` of ``run_dir`` atomically; keep the newest ``keep`` (0 = all).
    ``write_shards(folder)``, if given, writes the trainer ranks' shards into the folder being
    written (``shard_bytes`` of them) before it is fsynced and renamed. ``fingerprint``: what the
    checkpoint fits (:mod:`asyncrl.training.fingerprint`), written as ``fingerprint.json``.
    ``weights``: the state dict to write in place of ``model``'s (several ranks: the fp32 master
    weights gathered from the shards, while ``model`` is a replica in a lower generation dtype).
    Without room for it, or past the file-size limit: :class:`asyncrl.core.disk.DiskFull`
    (:class:`~asyncrl.core.disk.FileSizeLimit`), nothing of it left behind."""
    from asyncrl.policy.lora import base_model_of, export_state_dict, is_peft_model

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    weights = export_state_dict(model) if weights is None else weights
    trainer_state = {**trainer_state, "step": step, "global_rng": global_rng_state()}
    needed = checkpoint_bytes(Path(run_dir), weights, trainer_state, run_state) + shard_bytes
    largest = max(tensor_bytes(state) for state in (weights, trainer_state, run_state))
    _check_room(Path(run_dir), final, needed, largest)
    try:
        tmp.mkdir()
        base_model_of(model).save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        _record_dtype(tmp, weights)
        if is_peft_model(model):
            model.save_pretrained(tmp / "lora_adapter")
        tokenizer.save_pretrained(tmp)
        torch.save(trainer_state, tmp / TRAINER_STATE)
        torch.save(run_state, tmp / RUN_STATE)
        if fingerprint is not None:
            (tmp / FINGERPRINT).write_text(json.dumps(fingerprint, indent=1))
        if write_shards is not None:
            write_shards(tmp)
        _fsync_tree(tmp)
    except BaseException as err:  # a torn folder must not outlive the error (nor fill the disk)
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(err, root, needed):
            raise disk_full(final, needed, _keep_hint(Path(run_dir))) from None
        if is_file_size_limit(err):
            raise file_too_large(final, None, _keep_hint(Path(run_dir), _LIMIT)) from None
        raise
    if final.exists():  # the same step saved again (a signal right after a due checkpoint): replace
        _discard(final)
    tmp.rename(final)
    _fsync_dir(root)
    _point_latest(Path(run_dir), final)
    _prune(Path(run_dir), keep)
    return final


def _record_dtype(folder: Path, weights: dict[str, torch.Tensor]) -> None:
    """config.json's ``dtype`` as the saved weights' (save_pretrained records the model's, which
    differs when the weights came from the shards of a lower-precision replica's trainer)."""
    dtypes = {str(t.dtype).removeprefix("torch.") for t in weights.values() if t.is_floating_point()}
    path = folder / "config.json"
    config = json.loads(path.read_text())
    if len(dtypes) == 1 and config.get("dtype") not in (None, *dtypes):
        config["dtype"] = dtypes.pop()
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _check_room(run_dir: Path, final: Path, needed: int, largest: int) -> None:
    """Refuse, before anything is written, a checkpoint the disk has no room for or whose largest
    file (``largest`` bytes of tensors) is past the file-size limit."""
    free = free_bytes(final.parent)
    if free is not None and free < needed:
        raise disk_full(final, needed, _keep_hint(run_dir))
    limit = file_size_limit()
    if limit is not None and limit < largest:
        raise file_too_large(final, largest, _keep_hint(run_dir, _LIMIT))


_ROOM = "free some space or lower run.keep_checkpoints"
_LIMIT = "raise ulimit -f"


def _keep_hint(run_dir: Path, remedy: str = _ROOM) -> str:
    newest = latest_checkpoint(run_dir)
    if newest is None:
        return "; this run has no checkpoint yet"
    return f"; the checkpoint {newest.name} is intact ({remedy}, then asyncrl train --resume {run_dir})"


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
    """A checkpoint whose weights or optimizer state hold NaN or inf, or a negative Adam second
    moment (never resumed from). ``what``: which, in words."""

    @property
    def what(self) -> str:
        return "an impossible optimizer state" if NEGATIVE_MOMENT in str(self) else "non-finite values"


def _check_weights(path: Path) -> None:
    """Every tensor of a safetensors file: readable (else damaged) and finite (else refused)."""
    try:
        found = first_bad_in_safetensors(path)
    except Exception as err:  # noqa: BLE001 (the library's error for a torn file varies)
        raise DamagedCheckpoint(f"{path.name}: {first_line(err)}") from None
    if found:
        raise NonFiniteCheckpoint(f"{path.name}: {found}")


def _non_finite_shards(folder: Path) -> str | None:
    """The first non-finite value among a shards folder's tensors, read whole one at a time (a
    missing or torn shard file is :class:`DamagedCheckpoint`)."""
    from asyncrl.training.sharded_state import read_tensor, tensor_names

    try:
        names = tensor_names(folder)
        for key, (size, dtype) in sorted(names.items()):
            found = first_bad_value(f"{folder.name}/{key}", read_tensor(folder, key, size, dtype))
            if found:
                return found
    except UnsafeCheckpoint:
        raise  # refused, not damaged: no older checkpoint should quietly stand in for a crafted one
    except Exception as err:  # noqa: BLE001 (DCP's error for a missing or torn file varies)
        raise DamagedCheckpoint(f"{folder.name}/: {first_line(err)}") from None
    return None


def check_checkpoint(checkpoint: Path) -> tuple[dict, dict]:
    """Read every file of ``checkpoint``; return its (trainer state, run state). Raises
    :class:`DamagedCheckpoint` (missing or unreadable file), :class:`NonFiniteCheckpoint`, or
    :class:`UnsafeCheckpoint` (optimizer shards whose metadata would run code if unpickled)."""
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
            raise DamagedCheckpoint(f"{path.relative_to(checkpoint)}: {first_line(err)}") from None
    try:
        trainer_state, run_state = load_states(checkpoint)
    except Exception as err:  # noqa: BLE001 (a torn zip, a truncated pickle: torch's wording varies)
        raise DamagedCheckpoint(first_line(err)) from None
    for path in weights:
        _check_weights(path)
    optimizer = trainer_state.get("optimizer", {})
    found = _non_finite_shards(Path(optimizer["sharded"])) if "sharded" in optimizer else \
        first_bad_in(optimizer, "optimizer")
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
