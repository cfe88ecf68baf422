"""A file-size limit (``ulimit -f``) is handled like a full disk: one line naming the folder and the
limit, exit 2, no ``.tmp`` left, the previous checkpoint intact. Refused before the write when the
largest file is known to exceed the limit; a write that meets the limit anyway (safetensors'
``File too large``, torch's ``unexpected pos``) is caught too. Python ignores SIGXFSZ, so the
process is not killed by the signal: the write fails with EFBIG."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_forks import shared_forks
from test_bad_input import BASE, SMALL

RUN = [*BASE, *SMALL, "run.progress=false", "run.checkpoint_every=1"]
LIMIT = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))"


def _cli(tmp: Path, args: list[str], prelude: str = ""):
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "ASYNCRL_CACHE": str(tmp / "cache")}
    return shared_forks().run(args, tmp, env, prelude, timeout=240)


def test_a_checkpoint_past_the_limit_is_one_line(tmp_path, model_dir):
    from asyncrl.core.disk import human_bytes
    from asyncrl.training.checkpoint import check_checkpoint, latest_checkpoint

    first = _cli(tmp_path, ["train", *RUN, f"policy.model_path={model_dir}", "run.name=r", "trainer.steps=2"])
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "summary.json").unlink()
    # the weights and the row files fit; the optimizer state (twice the weights) does not
    limit = (run_dir / "checkpoint" / "model.safetensors").stat().st_size + (64 << 10)
    proc = _cli(tmp_path, ["train", "--resume", str(run_dir), "trainer.steps=3"], prelude=LIMIT.format(limit=limit))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0] == f"asyncrl: resuming from step 2 of 3 ({run_dir}/checkpoints/step-000002)"
    assert len(lines) == 2 and lines[1].startswith(
        f"asyncrl: file size limit reached writing {run_dir}/checkpoints/step-000003: a file of "), proc.stderr
    assert lines[1].endswith(f"exceeds ulimit -f ({human_bytes(limit)}); the checkpoint step-000002 is "
                             f"intact (raise ulimit -f, then asyncrl train --resume {run_dir})"), lines[1]
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")]
    assert latest_checkpoint(run_dir).name == "step-000002"
    assert check_checkpoint(latest_checkpoint(run_dir))[0]["step"] == 2


# Writes meeting a real limit (set in a process of its own): the check before the write is turned
# off, so that the writers' own failures are what the checkpoint sees.
WRITER = '''
import json, resource, sys
from pathlib import Path
import torch
import asyncrl.training.checkpoint as ckpt
from asyncrl.core.disk import FileSizeLimit
from asyncrl.policy.model import load_policy

model, tokenizer = load_policy(sys.argv[1])
run_dir, results = Path(sys.argv[2]), []
ckpt.save_checkpoint(run_dir, 1, model, tokenizer, {"optimizer": {}, "version": 1}, {})
weights = (run_dir / "checkpoints" / "step-000001" / "model.safetensors").stat().st_size
ckpt.file_size_limit = lambda: None
# the torch.save of a large optimizer state; then the safetensors weights themselves
for limit, big in ((weights + 65536, 4 * weights), (weights // 2, 0)):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        state = {"optimizer": {"x": torch.zeros(big // 4)}, "version": 2}
        ckpt.save_checkpoint(run_dir, 2, model, tokenizer, state, {})
        results.append("written")
    except FileSizeLimit as err:
        results.append(str(err))
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps(results))
'''


def test_a_write_that_meets_the_limit_is_one_line(tmp_path, model_dir):
    from asyncrl.training.checkpoint import check_checkpoint

    proc = subprocess.run([sys.executable, "-c", WRITER, str(model_dir), str(tmp_path)], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 2
    for message in results:
        assert message.startswith(f"file size limit reached writing {tmp_path}/checkpoints/step-000002: a file "
                                  "exceeds ulimit -f ("), message
        assert message.endswith(f"the checkpoint step-000001 is intact (raise ulimit -f, then asyncrl train "
                                f"--resume {tmp_path})"), message
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000001"]
    assert check_checkpoint(tmp_path / "checkpoints" / "step-000001")[0]["step"] == 1


def test_other_files_past_the_limit_name_themselves(tmp_path, monkeypatch):
    """A row file or summary.json (``asyncrl.core.disk.writing``) gets the same line."""
    from asyncrl.core.disk import FileSizeLimit, write_text_atomic

    def too_large(self, text, *args, **kwargs):
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(Path, "write_text", too_large)
    target = tmp_path / "summary.json"
    with pytest.raises(FileSizeLimit, match=f"^file size limit reached writing {target}: a file exceeds ulimit -f"):
        write_text_atomic(target, "{}")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
