"""No process of a run outlives its trainer, at any moment: the trainer of a tiny async run is
SIGKILLed 0.5, 1, 2 and 5 s after its first rollout worker process appeared (the worker then
imports torch and builds its model: the window where one used to outlive the trainer for good,
with the multiprocessing resource tracker it keeps alive), and within a few seconds no process
carrying the run's environment marker is left. The spawn guard itself: a worker whose parent is
gone exits before it unpickles anything, and its first module imports nothing heavy."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from resume_campaign import MARK, descendants, is_worker, marked  # noqa: E402  (the kill campaign's process checks)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ARGS = ["run.progress=false", "run.tensorboard=false", "run.mode=async", "rollout.prompts_per_step=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8", "trainer.n_minibatches=1", "trainer.steps=500",
        "eval.n_problems=2", "eval.samples=1", "eval.every=0", "task.arithmetic.n_train=40", "task.arithmetic.n_eval=4"]
GONE_WITHIN_S = 5.0
DELAYS_S = (0.5, 1.0, 2.0, 5.0)  # after the run's first rollout worker process appeared


def _launch(tmp_path: Path, model_dir: Path, name: str, marker: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", MARK: marker}
    return subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *ARGS, f"policy.model_path={model_dir}",
                             f"run.name={name}", f"run.out_dir={tmp_path}"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_after_spawn(runs: dict[float, subprocess.Popen]) -> dict[float, int]:
    """SIGKILL each run's trainer its delay after its first rollout worker process appeared (the
    runs side by side: one at a time would take four times as long); returns, per delay, how many
    worker processes were alive at that moment."""
    spawned: dict[float, float] = {}
    workers: dict[float, int] = {}
    deadline = time.monotonic() + 240
    while len(workers) < len(runs) and time.monotonic() < deadline:
        for delay_s, proc in runs.items():
            if delay_s in workers:
                continue
            assert proc.poll() is None, f"the run to kill after {delay_s} s ended first (exit {proc.returncode})"
            children = descendants(proc.pid)
            if delay_s not in spawned and any(is_worker(pid) for pid in children):
                spawned[delay_s] = time.monotonic()
            if delay_s in spawned and time.monotonic() - spawned[delay_s] >= delay_s:
                workers[delay_s] = sum(is_worker(pid) for pid in children)
                proc.kill()
                proc.wait()
        time.sleep(0.02)
    assert len(workers) == len(runs), f"no rollout worker started in the runs {sorted(set(runs) - set(spawned))}"
    return workers


def _leftovers(marker: str) -> list[str]:
    """Command lines of the run's processes still alive after :data:`GONE_WITHIN_S` (then killed,
    so that a failure leaves nothing behind either)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = []
    for pid in marked(marker):
        try:
            left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    return left


@pytest.mark.slow  # the race at worker start; a SIGKILLed trainer's workers stay in test_resume: make test-all
def test_no_process_outlives_a_trainer_killed_while_workers_start(tmp_path, model_dir):
    markers = {delay_s: uuid.uuid4().hex for delay_s in DELAYS_S}
    runs = {delay_s: _launch(tmp_path, model_dir, f"kill-{delay_s}", marker) for delay_s, marker in markers.items()}
    try:
        workers = _kill_after_spawn(runs)
    finally:
        for proc in runs.values():
            proc.kill()
    assert all(n >= 1 for n in workers.values()), workers  # each kill came while a worker process lived
    left = {delay_s: _leftovers(marker) for delay_s, marker in markers.items()}
    assert left == {delay_s: [] for delay_s in DELAYS_S}


PAYLOAD_SIDE_EFFECT = "import pathlib; pathlib.Path({path!r}).write_text('unpickled')"


class _Loud:
    """Unpickling it writes a file: proof that the payload was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return exec, (PAYLOAD_SIDE_EFFECT.format(path=self.path),)


def test_a_worker_whose_parent_is_gone_exits_before_unpickling_anything(tmp_path):
    """``start`` with a parent pid that is not its parent's: exit 1 at once, the payload untouched."""
    flag = tmp_path / "flag"
    payload = pickle.dumps((print, (_Loud(str(flag)),)))
    code = ("import sys; from asyncrl.runtime.worker_entry import start; "
            f"start(-1, {payload!r}); sys.exit(0)")  # no process's parent has pid -1
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr
    assert not flag.exists()
    # with the right parent the same payload is unpickled and run (the check can pass)
    code_ok = code.replace("start(-1,", "import os; start(os.getppid(),")
    proc = subprocess.run([sys.executable, "-c", code_ok], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert flag.read_text() == "unpickled"


def test_the_workers_first_module_imports_nothing_heavy():
    code = ("import sys; import asyncrl.runtime.worker_entry; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformers', 'asyncrl')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['asyncrl', 'asyncrl.runtime', 'asyncrl.runtime.worker_entry']"
