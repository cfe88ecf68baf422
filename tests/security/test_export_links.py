"""``asyncrl export`` copies regular files and real directories only: a run folder from someone else
that links a checkpoint file to one of the exporter's own (``/proc/self/environ``, a token) or links
a directory out of the run gets none of it copied into the folder meant for upload, and the
export says what it skipped; a checkpoint folder that is itself a link out of the run is refused."""

import json
import os
import subprocess
import sys

import pytest
import torch

from asyncrl.training.checkpoint import save_checkpoint

SECRET = "HF_TOKEN=hf_not_for_upload"


def _run(tmp_path, tiny_policy, name="r"):
    model, tokenizer, _ = tiny_policy
    run_dir = tmp_path / "runs" / name
    checkpoint = save_checkpoint(run_dir, 2, model, tokenizer, {"optimizer": {}, "version": 2}, {"totals": {}})
    return run_dir, checkpoint


@pytest.fixture
def linked_run(tmp_path, tiny_policy):
    """A run whose checkpoint holds a link to a file outside the run, a link to a directory outside
    it, and a FIFO; (run directory, the outside directory)."""
    outside = tmp_path / "home"
    (outside / "secrets").mkdir(parents=True)
    (outside / "token").write_text(SECRET)
    (outside / "secrets" / "key").write_text(SECRET)
    run_dir, checkpoint = _run(tmp_path, tiny_policy)
    (checkpoint / "vocab_extra.txt").symlink_to(outside / "token")
    (checkpoint / "assets").symlink_to(outside / "secrets", target_is_directory=True)
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "notes.txt").write_text("kept")
    (checkpoint / "sub" / "environ").symlink_to("/proc/self/environ")
    os.mkfifo(checkpoint / "pipe")
    return run_dir, outside


def _no_secret_in(folder):
    for path in folder.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_export_skips_links_and_special_files_and_names_them(linked_run):
    from asyncrl.training.export import export_run

    run_dir, _ = linked_run
    folder, step, skipped = export_run(run_dir)
    assert step == 2 and (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert (folder / "sub" / "notes.txt").read_text() == "kept"
    assert sorted(skipped) == ["assets (a symbolic link)", "pipe (not a regular file)",
                               "sub/environ (a symbolic link)", "vocab_extra.txt (a symbolic link)"]
    assert not (folder / "assets").exists() and not (folder / "vocab_extra.txt").exists()
    assert not (folder / "sub" / "environ").exists() and not (folder / "pipe").exists()
    _no_secret_in(folder)


def test_the_cli_says_what_it_skipped_one_line_each(linked_run, tmp_path):
    run_dir, _ = linked_run
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "export", str(run_dir), "--out", str(tmp_path / "up")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"export": str(tmp_path / "up"), "step": 2}
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("asyncrl: export skipped ") for line in lines), proc.stderr
    assert any("sub/environ (a symbolic link)" in line for line in lines)
    _no_secret_in(tmp_path / "up")


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
