"""``asyncrl export RUN_DIR``: the run's newest checkpoint as a plain Hugging Face model folder.

Every checkpoint already holds the whole model in Hugging Face form (safetensors weights, with a
LoRA adapter merged in, and the tokenizer), whatever the number of trainer ranks that wrote it; this
copies those files without the optimizer (``trainer_state.pt``, and the ``optimizer/`` shards that
several ranks write), RNG and run state or the resume fingerprint, into a folder that
``AutoModelForCausalLM.from_pretrained`` (or vLLM, or ``policy.model_path``) reads. The folder is
written under a temporary name and renamed when complete.

Only regular files and real directories are copied: a symbolic link (to a file or a directory), a
FIFO or a device in the checkpoint is skipped and named in the result. The exported folder is
meant to be uploaded, and a run folder from someone else could otherwise link it to a file of the
exporter's own (``/proc/self/environ``, a token) and have that copied in. Every file is opened
without following links, so a link put in place during the copy is skipped too.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import stat
from pathlib import Path
from typing import NamedTuple

from asyncrl.training.checkpoint import (
    RUN_STATE,
    TRAINER_STATE,
    DamagedCheckpoint,
    NonFiniteCheckpoint,
    UnsafeCheckpoint,
    check_checkpoint,
    latest_checkpoint,
)
from asyncrl.training.fingerprint import FINGERPRINT
from asyncrl.training.sharded_state import SHARDS

# resume state (the optimizer's shards too); the adapter is merged in the weights
LEFT_OUT = (TRAINER_STATE, RUN_STATE, SHARDS, FINGERPRINT, "lora_adapter")
_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # O_NONBLOCK: opening a FIFO must not wait


class Exported(NamedTuple):
    folder: Path  # the folder written
    step: int  # the step exported
    skipped: list[str]  # paths in the checkpoint not copied, each with why ("tokenizer.json (a symbolic link)")


def export_run(run_dir: Path | str, out: Path | str | None = None) -> Exported:
    """Write the newest checkpoint of ``run_dir`` to ``out`` (default ``RUN_DIR/hf``). ValueError in
    one line naming what is wrong: no run, no complete checkpoint, a damaged or refused one, an
    existing ``out``, a file that cannot be read or written (nothing of ``out`` left then)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"RUN_DIR: {run_dir} is not a directory")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"RUN_DIR: {run_dir} has no complete checkpoint (checkpoints/step-N)")
    if checkpoint.is_symlink() or not checkpoint.resolve().is_relative_to(run_dir.resolve()):
        raise ValueError(f"RUN_DIR: {checkpoint} is a link to a folder outside the run; export copies only "
                         "what the run itself holds")
    try:
        trainer_state, _ = check_checkpoint(checkpoint)
    except (DamagedCheckpoint, NonFiniteCheckpoint) as err:
        raise ValueError(f"RUN_DIR: {checkpoint} is damaged: {err}") from None
    except UnsafeCheckpoint as err:
        raise ValueError(f"RUN_DIR: refusing {checkpoint}: {err}") from None
    out = Path(out) if out is not None else run_dir / "hf"
    if out.exists():
        raise ValueError(f"--out: {out} exists; name a new folder")
    tmp = out.with_name(f".{out.name}.tmp")
    _remove(tmp)
    skipped: list[str] = []
    try:
        top = os.open(checkpoint, _NO_FOLLOW | os.O_DIRECTORY)
        try:
            _copy_tree(top, "", tmp, skipped)
        finally:
            os.close(top)
        tmp.rename(out)
    except OSError as err:  # an unreadable file in the checkpoint, a full disk: one line, nothing left
        _remove(tmp)
        raise ValueError(f"RUN_DIR: cannot export {checkpoint} to {out}: {err.strerror or err}"
                         f"{f' ({err.filename})' if err.filename else ''}") from None
    except BaseException:
        _remove(tmp)
        raise
    return Exported(out, int(trainer_state["step"]), skipped)


def _remove(path: Path) -> None:
    """Remove a leftover temporary folder; a link found in its place is removed, never followed."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _copy_tree(source: int, shown: str, target: Path, skipped: list[str]) -> None:
    """Copy the directory open as ``source`` (a descriptor; ``shown``: its path in the checkpoint,
    with a trailing slash) into the new folder ``target``: regular files and directories only, the
    rest named in ``skipped``."""
    target.mkdir()
    with os.scandir(source) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        if any(fnmatch.fnmatch(name, pattern) for pattern in LEFT_OUT):
            continue
        try:
            fd = os.open(name, _NO_FOLLOW, dir_fd=source)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            skipped.append(f"{shown}{name} (a symbolic link)")
            continue
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                _copy_tree(fd, f"{shown}{name}/", target / name, skipped)
            elif stat.S_ISREG(mode):
                with open(fd, "rb", closefd=False) as reader, open(target / name, "xb") as writer:
                    shutil.copyfileobj(reader, writer)
            else:
                skipped.append(f"{shown}{name} (not a regular file)")
        finally:
            os.close(fd)
