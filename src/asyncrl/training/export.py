"""``asyncrl export RUN_DIR``: the run's newest checkpoint as a plain Hugging Face model folder.

Every checkpoint already holds the whole model in Hugging Face form (safetensors weights, with a
LoRA adapter merged in, and the tokenizer), whatever the number of trainer ranks that wrote it; this
copies those files without the optimizer (``trainer_state.pt``, and the ``optimizer/`` shards that
several ranks write), RNG and run state or the resume fingerprint, into a folder that
``AutoModelForCausalLM.from_pretrained`` (or vLLM, or ``policy.model_path``) reads. The folder is
written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from asyncrl.distributed.sharded_state import SHARDS
from asyncrl.training.checkpoint import (
    RUN_STATE,
    TRAINER_STATE,
    DamagedCheckpoint,
    NonFiniteCheckpoint,
    check_checkpoint,
    latest_checkpoint,
)
from asyncrl.training.fingerprint import FINGERPRINT

# resume state (the optimizer's shards too); the adapter is merged in the weights
LEFT_OUT = (TRAINER_STATE, RUN_STATE, SHARDS, FINGERPRINT, "lora_adapter")


def export_run(run_dir: Path | str, out: Path | str | None = None) -> tuple[Path, int]:
    """(the folder written, the step exported). ``out`` defaults to ``RUN_DIR/hf``. ValueError in
    one line naming what is wrong: no run, no complete checkpoint, a damaged one, an existing ``out``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR: {run_dir} is not a directory")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"RUN_DIR: {run_dir} has no complete checkpoint (checkpoints/step-N)")
    try:
        trainer_state, _ = check_checkpoint(checkpoint)
    except (DamagedCheckpoint, NonFiniteCheckpoint) as err:
        raise ValueError(f"RUN_DIR: {checkpoint} is damaged: {err}") from None
    out = Path(out) if out is not None else run_dir / "hf"
    if out.exists():
        raise ValueError(f"--out: {out} exists; name a new folder")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns(*LEFT_OUT))
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, int(trainer_state["step"])
