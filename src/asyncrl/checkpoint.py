"""Checkpoints: atomic, rolling, and complete enough to resume a run exactly.

Layout of a run directory::

    checkpoints/step-000040/   the newest complete checkpoint (and older ones, up to ``keep``)
        config.json, model.safetensors, tokenizer files    an HF model (transformers / vLLM load it)
        trainer_state.pt     optimizer, trainer RNG, version, step, the process-wide RNGs
        run_state.pt         the batch source (prompt cursor, buffer, in-flight work, engine RNG),
                             the evaluation history and the run totals
    checkpoint -> checkpoints/step-000040    a symlink to the newest one

Writing: everything goes into ``checkpoints/step-N.tmp/``, every file and the folder are fsynced,
then the folder is renamed to ``step-N`` (atomic on POSIX): a kill at any moment leaves either the
new checkpoint complete or no trace of it beside the previous ones. Old checkpoints are renamed
away before they are deleted, so a half-deleted folder is never mistaken for a checkpoint.

Loading: both ``.pt`` files load with ``torch.load(weights_only=True)`` (tensors, numbers,
strings, lists, dicts, tuples only; no arbitrary pickle), the weights from safetensors.

A LoRA (peft) policy is saved as the plain base architecture with the adapters merged in, so the
folder loads with ``AutoModelForCausalLM`` / vLLM without peft; the adapter alone is kept in
``lora_adapter/`` (a subdirectory: an ``adapter_config.json`` at the top level would make
transformers try to load the folder as an adapter).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

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


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict, run_state: dict,
                    keep: int = 2) -> Path:
    """Write checkpoint ``step`` of ``run_dir`` atomically; keep the newest ``keep`` (0 = all)."""
    from asyncrl.policy.lora import base_model_of, export_state_dict, is_peft_model

    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    base_model_of(model).save_pretrained(tmp, state_dict=export_state_dict(model), safe_serialization=True)
    if is_peft_model(model):
        model.save_pretrained(tmp / "lora_adapter")
    tokenizer.save_pretrained(tmp)
    torch.save({**trainer_state, "step": step, "global_rng": global_rng_state()}, tmp / TRAINER_STATE)
    torch.save(run_state, tmp / RUN_STATE)
    _fsync_tree(tmp)
    if final.exists():  # the same step saved again (a signal right after a due checkpoint): replace
        _discard(final)
    tmp.rename(final)
    _fsync_dir(root)
    _point_latest(Path(run_dir), final)
    _prune(Path(run_dir), keep)
    return final


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
    return trainer_state, run_state
