"""Faults at run time (docs/errors.md, "Faults at run time"): a reward function that exits, is
interrupted or hangs; a full disk; a checkpoint with NaN weights or a truncated file. Every row
runs the real CLI in a subprocess and checks the four properties: the exit status, one stderr line
naming the cause, no traceback, and nothing half-written (no ``.tmp`` file or folder, every row
file parses, the newest checkpoint reads back whole, ``summary.json`` only after a finished run).
The unit tests below the table check the same paths in-process, faster and in more detail."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cli_forks import shared_forks
from test_bad_input import BASE, SMALL, _expand, check_one_line

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from campaign_common import damage  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
SECTION = "## Faults at run time"

# reward functions that fail the way users' do, from their third call on in the trainer (its first
# two: the pre-run check and the step-0 evaluation) or their first in a rollout worker
REWARDS = '''
import multiprocessing, sys, time
CALLS = 0

def _nth():
    global CALLS
    CALLS += 1
    return CALLS

def interrupts(completions, **kw):
    if _nth() >= 3:
        raise KeyboardInterrupt
    return [0.0] * len(completions)

def sleeps(completions, **kw):
    if _nth() >= 3:
        try:
            time.sleep(60)
        except Exception:  # a function's own handler must not swallow the timeout
            pass
    return [0.0] * len(completions)

def exits_in_worker(completions, **kw):
    if multiprocessing.parent_process() is not None:
        sys.exit(3)
    return [0.0] * len(completions)
'''
EXITS_AT_IMPORT = "import sys\nsys.exit(0)\n\ndef score(completions, **kw):\n    return [0.0] * len(completions)\n"
# run.progress=false: the progress display's own lines (phases, steps) are no error output; the
# error line is then all of stderr
RUN = [*SMALL, "policy.model_path={model}", "run.name=fault", "run.progress=false"]


def _reward(name: str):
    def args(tmp: Path, model) -> str:
        path = tmp / "fault_rewards.py"
        path.write_text(REWARDS)
        return f"reward.funcs=[{path}:{name}]"
    return args


def _exits_at_import(tmp: Path, model) -> str:
    (tmp / "exits_at_import.py").write_text(EXITS_AT_IMPORT)
    return f"reward.funcs=[{tmp / 'exits_at_import.py'}:score]"


# (id, argv after `asyncrl` — a leading "@disk=..." / "@resume=..." sets the stage —, exit status,
# text of the one line; {tmp}: the test's directory, {model}: a tiny saved model, {out}: run.out_dir)
# SLOW rows run with -m slow: the in-process tests below cover their paths in the default suite
SLOW = {"reward-exits-in-worker", "reward-keyboardinterrupt", "disk-full-rows", "resume-nan-weights"}
FAULTS = [
    ("reward-exits-at-import", ["train", _exits_at_import], 2,
     "cannot import '{tmp}/exits_at_import.py:score': the module called sys.exit(0) while being imported"),
    ("reward-exits-in-worker", ["train", *RUN, "run.mode=async", "trainer.steps=4", _reward("exits_in_worker")], 2,
     "reward function {tmp}/fault_rewards.py:exits_in_worker exited (SystemExit 3) on row uid=arith-train-"),
    ("reward-keyboardinterrupt", ["train", *RUN, "trainer.steps=3", _reward("interrupts")], 2,
     "reward function {tmp}/fault_rewards.py:interrupts raised KeyboardInterrupt on row uid=arith-train-"),
    ("reward-timeout", ["train", *RUN, "trainer.steps=3", "reward.timeout_s=1", _reward("sleeps")], 2,
     "reward function {tmp}/fault_rewards.py:sleeps took longer than reward.timeout_s=1 s on row uid=arith-train-"),
    ("disk-full-checkpoint", ["@disk=3m", "train", *RUN, "trainer.steps=4", "run.checkpoint_every=1",
                              "run.out_dir={out}"], 2,
     "no space left on device writing {out}/fault/checkpoints/step-000003: needs 1."),
    ("disk-full-rows", ["@disk=fill", "train", *RUN, "trainer.steps=6", "run.checkpoint_every=0",
                        "run.log_completions_every=1", "run.out_dir={out}"], 2,
     "no space left on device writing {out}/fault/"),
    ("resume-nan-weights", ["@resume=nan", "train", "--resume", "{tmp}/runs/fault"], 2,
     "checkpoint {tmp}/runs/fault/checkpoints/step-000003 holds non-finite values (model.safetensors: "),
    ("resume-truncated-newest", ["@resume=truncated", "train", "--resume", "{tmp}/runs/fault"], 0,
     "checkpoint {tmp}/runs/fault/checkpoints/step-000003 is damaged (model.safetensors: "),
]
# rows run by tests/runtime/test_watchdog.py (a signal mid-run is no argv)
ELSEWHERE = {"worker-stopped": "test_stopped_worker_is_killed_and_replaced",
             "sigterm-with-stopped-worker": "test_sigterm_with_a_stopped_worker_exits_with_its_checkpoint"}

# a disk of 3 MB for a process that cannot mount one: shutil.disk_usage answers as if out_dir were
# that small (the checkpoint's free-space check reads it)
SMALL_DISK = '''
import os, shutil, sys
from pathlib import Path
_real, _root, _size = shutil.disk_usage, os.environ["FAULT_DISK"], 3 << 20
def _usage(path):
    real = _real(path)
    if not os.path.abspath(path).startswith(_root):
        return real
    used = sum(p.stat().st_size for p in Path(_root).rglob("*") if p.is_file())
    return type(real)(_size, used, max(0, _size - used))
shutil.disk_usage = _usage
from asyncrl.cli import main
sys.exit(main(sys.argv[1:]))
'''


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture()
def disk(tmp_path):
    """A small disk for run.out_dir: a real tmpfs where this process may mount one (root)."""
    mounts = []

    def make(kind: str) -> tuple[Path, bool]:
        path = tmp_path / "disk"
        real = _mount_tmpfs(path, "3m")
        if real:
            mounts.append(path)
        if kind == "fill":  # only a few pages left: the run's own row files fill it
            if not real:
                pytest.skip("filling a disk needs a tmpfs (root)")
            filler = path / "filler"
            with open(filler, "wb") as fh:
                fh.write(b"\0" * (shutil.disk_usage(path).free - (20 << 10)))
        return path, real

    yield make
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, model_dir):
    """A sync run of 3 steps with checkpoints at steps 2 and 3, killed after its last one (the
    resume rows' stage; made once, on first use)."""
    made: list[Path] = []

    def get() -> Path:
        if not made:
            tmp = tmp_path_factory.mktemp("base-run")
            args = _expand(["train", *BASE, *RUN, "trainer.steps=3", "run.checkpoint_every=1"], tmp, model_dir)
            proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", *args], capture_output=True, text=True,
                                  cwd=tmp, env=_env(tmp), timeout=180)
            assert proc.returncode == 0, proc.stderr[-2000:]
            (tmp / "runs" / "fault" / "summary.json").unlink()
            made.append(tmp / "runs" / "fault")
        return made[0]

    return get


def _damage(run_dir: Path, how: str) -> None:
    damage(run_dir / "checkpoints" / "step-000003", how)


def _env(tmp: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "ASYNCRL_CACHE": str(tmp / "warm-start-cache")}


def _snapshot(out: Path) -> set[tuple]:
    return {(str(p.relative_to(out)), p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}


def run_fault(tmp: Path, argv: list, model: Path, disk, base_run):
    """Set the stage the row asks for, run it; returns (process, run.out_dir, real tmpfs?, the
    files before the run: a stage with a run directory already there)."""
    argv, out, real, before = list(argv), tmp / "runs", True, None
    stage = argv.pop(0) if str(argv[0]).startswith("@") else ""
    if stage.startswith("@disk="):
        out, real = disk(stage.split("=", 1)[1])
    if stage.startswith("@resume="):
        shutil.copytree(base_run(), tmp / "runs" / "fault", symlinks=True)
        _damage(tmp / "runs" / "fault", stage.split("=", 1)[1])
        before = _snapshot(out)
    args = [a.replace("{out}", str(out)) if isinstance(a, str) else a for a in argv]
    args = _expand(args, tmp, model)
    if args[0] == "train" and "--resume" not in args:
        args = [args[0], *BASE, *args[1:]]
    env = {**_env(tmp), "FAULT_DISK": str(out)}
    if real:  # the CLI in a process of its own, forked from one that imported it once (tests/cli_forks.py)
        proc = shared_forks().run(args, tmp, env, timeout=300)
    else:
        proc = subprocess.run([sys.executable, "-c", SMALL_DISK, *args], capture_output=True, text=True, cwd=tmp,
                              env=env, timeout=300)
    return proc, out, real, before


def assert_nothing_half_written(out: Path, finished: bool) -> None:
    """No ``.tmp`` left, every row file parses, the newest checkpoint (the link's target) reads
    back whole, and ``summary.json`` exists only for a finished run."""
    from asyncrl.training.checkpoint import check_checkpoint, latest_checkpoint

    for run_dir in [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []:
        assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")], "a .tmp file or folder was left"
        for rows in run_dir.glob("*.jsonl"):
            for line in rows.read_text().splitlines():
                json.loads(line)
        newest = latest_checkpoint(run_dir)
        if newest is not None:
            check_checkpoint(newest)
            assert (run_dir / "checkpoint").resolve() == newest.resolve()
        assert (run_dir / "summary.json").exists() == finished


def check_fault(tmp: Path, argv: list, status: int, expected: str, model: Path, disk, base_run) -> Path:
    """Run the row and check the four properties; returns its run.out_dir."""
    proc, out, real, before = run_fault(tmp, argv, model, disk, base_run)
    expected = expected.format(tmp=tmp, out=out)
    assert proc.returncode == status, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    naming = [line for line in lines if expected in line]
    assert len(naming) == 1, proc.stderr[-3000:]
    if status != 0:  # an error is that one line alone
        assert lines == naming, proc.stderr[-3000:]
    if before is not None and status != 0:  # a refused resume: the run directory as it was
        assert _snapshot(out) == before, "a refused resume changed the run directory"
    else:
        assert_nothing_half_written(out, finished=status == 0)
    return out


@pytest.mark.parametrize("argv, status, expected", [
    pytest.param(*c[1:], id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in FAULTS])
def test_fault_is_one_line(tmp_path, model_dir, disk, base_run, argv, status, expected):
    if _exits_at_import in argv:  # refused before any run directory: the bad-input table's checks
        check_one_line(tmp_path, argv, expected)
        return
    check_fault(tmp_path, argv, status, expected, model_dir, disk, base_run)


@pytest.mark.slow
def test_checkpoint_before_a_full_disk_resumes(tmp_path, model_dir, disk, base_run):
    """After the full-disk row, the run resumes from its intact checkpoint (on a disk with room)."""
    row = next(c for c in FAULTS if c[0] == "disk-full-checkpoint")
    out = check_fault(tmp_path, *row[1:], model_dir, disk, base_run)
    copy = tmp_path / "copy" / "fault"
    shutil.copytree(out / "fault", copy, symlinks=True)
    resumed = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "--resume", str(copy)],
                             capture_output=True, text=True, cwd=tmp_path, env=_env(tmp_path), timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from step 2 of 4" in resumed.stderr
    assert_nothing_half_written(copy.parent, finished=True)


def _section_ids() -> list[str]:
    text = DOC.read_text()
    assert SECTION in text, f"docs/errors.md has no '{SECTION}' section"
    return re.findall(r"^\| `([a-z0-9-]+)` \|", text.split(SECTION, 1)[1], flags=re.M)


def test_fault_table_is_documented():
    """docs/errors.md's fault section lists exactly the rows tested here and in test_watchdog.py."""
    ids = _section_ids()
    assert sorted(ids) == sorted([c[0] for c in FAULTS] + list(ELSEWHERE)), ids
    watchdog = (ROOT / "tests" / "runtime" / "test_watchdog.py").read_text()
    assert all(f"def {name}(" in watchdog for name in ELSEWHERE.values())


# -- reward calls, in-process --

def _reward_set(fn, on_error="raise", timeout_s=None):
    from asyncrl.rewards.resolve import RewardFunction
    from asyncrl.rewards.scorer import RewardSet
    from asyncrl.tasks import Problem

    function = RewardFunction(path="m:f", name="f", fn=fn, by_keyword=False, accepts=None, required=frozenset())
    problems = [Problem(uid=f"u{i}", prompt="p", answer="1", solution=" #### 1") for i in range(3)]
    return RewardSet([function], [1.0], on_error, timeout_s=timeout_s), ["a", "b", "c"], problems


def test_reward_timeout_names_function_and_row():
    def slow(completions, **kw):
        try:
            time.sleep(30)
        except Exception:  # noqa: BLE001 (the timeout is no Exception: not swallowed here)
            return [1.0] * len(completions)

    from asyncrl.rewards.scorer import RewardFunctionError

    rewards, completions, problems = _reward_set(slow, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(RewardFunctionError) as err:
        rewards.score(completions, problems)
    assert time.monotonic() - started < 5
    assert str(err.value) == ("reward function m:f took longer than reward.timeout_s=0.3 s on row uid=u0 "
                              "(a batch of 3 rows starting there)")
    zeroed, _, _ = _reward_set(slow, on_error="zero", timeout_s=0.3)
    scores = zeroed.score(completions, problems)
    assert scores.total == [0.0, 0.0, 0.0] and scores.errors == 3


def test_reward_exit_is_named_whatever_on_error_says():
    from asyncrl.rewards.scorer import RewardFunctionError

    def exits(completions, **kw):
        sys.exit(3)

    def interrupts(completions, **kw):
        raise KeyboardInterrupt

    for fn, what in ((exits, "exited (SystemExit 3)"), (interrupts, "raised KeyboardInterrupt")):
        for on_error in ("raise", "zero"):
            rewards, completions, problems = _reward_set(fn, on_error=on_error, timeout_s=5)
            with pytest.raises(RewardFunctionError) as err:
                rewards.score(completions, problems)
            assert str(err.value) == f"reward function m:f {what} on row uid=u0"


def test_a_real_signal_during_a_reward_call_is_not_the_rewards():
    """Ctrl-C (or the trainer's second SIGTERM) while a reward runs stays an interrupt."""
    def signalled(completions, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        return [0.0] * len(completions)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rewards, completions, problems = _reward_set(signalled, timeout_s=10)
        with pytest.raises(KeyboardInterrupt):
            rewards.score(completions, problems)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, previous)


def test_fast_calls_under_a_short_timeout_never_time_out():
    """The deadline's timer and signal leave nothing behind a call that returned in time."""
    rewards, completions, problems = _reward_set(lambda completions, **kw: [1.0] * len(completions), timeout_s=0.02)
    for _ in range(300):
        assert rewards.score(completions, problems).total == [1.0, 1.0, 1.0]
    time.sleep(0.05)  # a late signal would raise here


def test_reward_module_exiting_at_import_is_one_line(tmp_path):
    from asyncrl.core.import_path import resolve

    (tmp_path / "bye.py").write_text("import sys\nsys.exit(5)\ndef f(c): return c\n")
    with pytest.raises(ValueError, match=r"the module called sys.exit\(5\) while being imported"):
        resolve(f"{tmp_path / 'bye.py'}:f")


# -- a full disk, in-process --

def _save(run_dir, tiny_policy, step):
    from test_checkpoint import _save as save

    return save(run_dir, tiny_policy, step)


def test_checkpoint_refused_without_room_leaves_previous(tmp_path, tiny_policy, monkeypatch):
    import asyncrl.training.checkpoint as ckpt
    from asyncrl.core.disk import DiskFull

    _save(tmp_path, tiny_policy, 1)
    monkeypatch.setattr(ckpt, "free_bytes", lambda path: 1000)
    with pytest.raises(DiskFull) as err:
        _save(tmp_path, tiny_policy, 2)
    assert re.fullmatch(rf"no space left on device writing {tmp_path}/checkpoints/step-000002: needs [0-9.]+ "
                        r"[KM]iB, [0-9.]+ \S+ free; the checkpoint step-000001 is intact .*", str(err.value))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-000001"]


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                                                  "109440 vs 109328")], ids=["enospc", "unexpected-pos"])
def test_checkpoint_write_failing_on_full_disk(tmp_path, tiny_policy, monkeypatch, failure):
    import asyncrl.training.checkpoint as ckpt
    import asyncrl.core.disk as disk
    from asyncrl.core.disk import DiskFull

    _save(tmp_path, tiny_policy, 1)

    def fails(obj, path, *args, **kwargs):
        raise failure

    monkeypatch.setattr(torch, "save", fails)
    monkeypatch.setattr(ckpt, "free_bytes", lambda path: 1 << 40)  # the check before passes
    monkeypatch.setattr(disk, "free_bytes", lambda path: 4096)  # the write then finds the disk full
    with pytest.raises(DiskFull, match=rf"writing {tmp_path}/checkpoints/step-000002: needs "):
        _save(tmp_path, tiny_policy, 2)
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-000001"]
    assert ckpt.check_checkpoint(ckpt.latest_checkpoint(tmp_path))[0]["step"] == 1


class _FillsUp:
    """A row file on a disk that fills in the middle of the next line: half of it lands, then ENOSPC."""

    def __init__(self, file):
        self.file = file

    def write(self, text: str) -> int:
        self.file.write(text[: len(text) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_row_file_on_a_full_disk_names_it_and_keeps_whole_rows(tmp_path):
    from asyncrl.core.disk import DiskFull
    from asyncrl.tracking.metrics import JsonRows

    rows = JsonRows(tmp_path / "metrics.jsonl")
    rows.append({"step": 1, "x": 1.0})
    rows.file = _FillsUp(rows.file)
    with pytest.raises(DiskFull, match=f"^no space left on device writing {tmp_path}/metrics.jsonl: "):
        rows.append({"step": 2, "x": 2.0})
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "x": 1.0}\n'  # no torn line
    rows.append({"step": 2, "x": 2.0})  # room again: the file goes on
    rows.close()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_atomic_text_on_a_full_disk_leaves_nothing(tmp_path, monkeypatch):
    from asyncrl.core.disk import DiskFull, write_text_atomic

    real_write = Path.write_text

    def fills_up(self, text, *args, **kwargs):
        real_write(self, text[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", fills_up)
    target = tmp_path / "summary.json"
    with pytest.raises(DiskFull, match=f"^no space left on device writing {target}: needs 200 bytes, "):
        write_text_atomic(target, "{}" * 100)
    assert list(tmp_path.iterdir()) == []  # neither summary.json nor summary.json.tmp


# -- checkpoints a resume must not trust, in-process --

def test_check_checkpoint_tells_damage_from_non_finite(tmp_path, tiny_policy):
    from asyncrl.training.checkpoint import DamagedCheckpoint, NonFiniteCheckpoint, check_checkpoint

    for step in (1, 2, 3):
        _save(tmp_path, tiny_policy, step)
    _, older, newest = [tmp_path / "checkpoints" / f"step-00000{s}" for s in (1, 2, 3)]
    assert check_checkpoint(newest)[0]["step"] == 3
    _damage(tmp_path, "nan")
    with pytest.raises(NonFiniteCheckpoint, match="model.safetensors: .* holds nan"):
        check_checkpoint(newest)
    _damage(tmp_path, "truncated")
    with pytest.raises(DamagedCheckpoint, match="model.safetensors: "):
        check_checkpoint(newest)
    state = older / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(DamagedCheckpoint):
        check_checkpoint(older)
