"""``asyncrl export`` copies regular files and real directories only: a run folder from someone else
that links a checkpoint file to one of the exporter's own (``/proc/self/environ``, a token) or links
a directory out of the run gets none of it copied into the folder meant for upload, and the
export says what it skipped; a checkpoint folder that is itself a link out of the run is refused."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.training.checkpoint import save_checkpoint

SECRET = "hf_not_for_upload"


def _run(tmp_path, tiny_policy, name="r"):
    model, tokenizer, _ = tiny_policy
    run_dir = tmp_path / "runs" / name
    checkpoint = save_checkpoint(run_dir, 2, model, tokenizer, {"optimizer": {}, "version": 2}, {"totals": {}})
    return run_dir, checkpoint


@pytest.fixture(scope="module")
def linked_run(tmp_path_factory, tiny_policy):
    """A run, built once for the module and only read (each export goes to a folder of its test),
    whose checkpoint holds a link to a file outside the run, a link to a directory outside it, and
    a link to the exporting process's environment."""
    root = tmp_path_factory.mktemp("linked")
    outside = root / "home"
    (outside / "secrets").mkdir(parents=True)
    (outside / "token").write_text(SECRET)
    (outside / "secrets" / "key").write_text(SECRET)
    run_dir, checkpoint = _run(root, tiny_policy)
    (checkpoint / "vocab_extra.txt").symlink_to(outside / "token")
    (checkpoint / "assets").symlink_to(outside / "secrets", target_is_directory=True)
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "notes.txt").write_text("kept")
    (checkpoint / "sub" / "environ").symlink_to("/proc/self/environ")
    return run_dir


LINKS_SKIPPED = ["assets (a symbolic link)", "sub/environ (a symbolic link)", "vocab_extra.txt (a symbolic link)"]


def _no_secret_in(folder):
    for path in folder.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"{path} was copied from outside the run"


def test_export_skips_links_and_names_them(linked_run, tmp_path):
    from asyncrl.training.export import export_run

    exported = export_run(linked_run, tmp_path / "up")
    folder = exported[0]
    _no_secret_in(folder)
    assert not (folder / "assets").exists() and not (folder / "vocab_extra.txt").exists()
    assert not (folder / "sub" / "environ").exists()
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert (folder / "sub" / "notes.txt").read_text() == "kept"
    _, step, skipped = exported
    assert step == 2 and sorted(skipped) == LINKS_SKIPPED


def test_a_fifo_is_skipped_not_waited_on(linked_run, tmp_path):
    from asyncrl.training.checkpoint import latest_checkpoint
    from asyncrl.training.export import export_run

    run_dir = Path(shutil.copytree(linked_run, tmp_path / "runs" / "r", symlinks=True))
    os.mkfifo(latest_checkpoint(run_dir) / "pipe")
    folder, _, skipped = export_run(run_dir)
    assert sorted(skipped) == sorted([*LINKS_SKIPPED, "pipe (not a regular file)"])
    assert not (folder / "pipe").exists()


def test_the_cli_says_what_it_skipped_one_line_each(linked_run, tmp_path):
    """The exporter's own environment holds the secret: a followed ``/proc/self/environ`` link
    would copy it into the folder meant for upload."""
    env = {**os.environ, "HF_TOKEN": SECRET}
    command = [sys.executable, "-m", "asyncrl.cli", "export", str(linked_run), "--out", str(tmp_path / "up")]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    _no_secret_in(tmp_path / "up")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"export": str(tmp_path / "up"), "step": 2}
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("asyncrl: export skipped ") for line in lines), proc.stderr
    assert any("sub/environ (a symbolic link)" in line for line in lines)


def test_a_checkpoint_folder_linked_out_of_the_run_is_refused(tmp_path, tiny_policy):
    """``checkpoints/step-N`` itself a link to another checkpoint elsewhere (the exporter's own)."""
    from asyncrl.training.export import export_run

    _, elsewhere = _run(tmp_path, tiny_policy, name="mine")
    run_dir, checkpoint = _run(tmp_path, tiny_policy, name="shared")
    (checkpoint.parent / "step-000009").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="step-000009 is a link to a folder outside the run"):
        export_run(run_dir)
    assert not (run_dir / "hf").exists()
    assert torch.load(elsewhere / "trainer_state.pt", weights_only=True)["step"] == 2  # untouched


def test_a_link_in_place_of_the_temporary_folder_is_removed_not_followed(tmp_path, tiny_policy):
    """``RUN_DIR/.hf.tmp`` (where the export is written before its rename) a link to a folder of
    the exporter's: the link goes, the export is written in the run, the folder is untouched."""
    from asyncrl.training.export import export_run

    run_dir, _ = _run(tmp_path, tiny_policy)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    (run_dir / ".hf.tmp").symlink_to(mine, target_is_directory=True)
    folder, _, skipped = export_run(run_dir)
    assert folder == run_dir / "hf" and (folder / "model.safetensors").is_file() and not skipped
    assert [p.name for p in mine.iterdir()] == ["keep.txt"] and (mine / "keep.txt").read_text() == "mine"
    assert not (run_dir / ".hf.tmp").exists() and not (run_dir / ".hf.tmp").is_symlink()
