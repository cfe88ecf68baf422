"""What a fault campaign reads off its launches (``benchmarks/chaos_lane.py``): which process is
which (trainer ranks, rollout workers, Ray's raylet and actors), what a launch printed, how far its
run got, whether a fault left anything half-written, the run's ledger checks at the end, and a
disk that a fault can fill. The environment marker and the orphan checks are
``benchmarks/resume_campaign.py``'s."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from resume_campaign import descendants, is_worker, marked, rows, wait_gone

OURS = re.compile(r"^(\[rank\d+\]:\s*)?asyncrl: ")  # a line of ours, as a rank of torchrun prints it too
RESUMED = re.compile(r"asyncrl: resuming from step (\d+) ")
LOST_UNITS = re.compile(r"restarting it \(restart \d+\); (\d+) work unit\(s\) lost")


@dataclass
class Launch:
    """One start of a run (``asyncrl train``, or torchrun's agent): its process, the marker in the
    environment of all its processes, its stderr and stdout files."""

    number: int
    proc: subprocess.Popen
    marker: str
    err: Path
    out: Path
    tmp: Path  # its TMPDIR
    started: float
    wall: float
    fresh: bool  # the run's first launch (no --resume)
    faults: int = 0  # faults that landed on it
    survived: int = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def last_line(self) -> str:
        return next((line for line in reversed(self.text().splitlines()) if line.strip()), "")


def cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def rank_pids(agent: int) -> dict[int, int]:
    """{RANK: pid} of torchrun's ranks under ``agent`` (read from each process's environment)."""
    found = {}
    for pid in descendants(agent):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ranks = [int(item[5:]) for item in env if item.startswith(b"RANK=")]
        if ranks and b"-m\0asyncrl\0" in b"\0".join(cmdline(pid)):
            found[ranks[0]] = pid
    return found


def worker_pids(root: int) -> list[int]:
    """The local backend's rollout worker processes under ``root`` (a trainer, or torchrun's agent)."""
    return sorted(pid for pid in descendants(root) if is_worker(pid))


def ray_pids(marker: str, what: str) -> list[int]:
    """Processes of a launch's private Ray cluster: ``raylet``, or an actor's class (``RolloutActor``:
    Ray names an actor's process ``ray::<class>``)."""
    found = []
    for pid in marked(marker):
        name = (cmdline(pid) or [b""])[0]
        if (what == "raylet" and name.endswith(b"/raylet")) or name.startswith(f"ray::{what}".encode()):
            found.append(pid)
    return sorted(found)


def process_of(launch: Launch, config: str, role: str) -> int | None:
    """A launch's process in ``role`` (None: not there yet): ``trainer`` (the process started:
    torchrun's agent in that configuration), ``rank0``, ``rank1``, ``worker`` (a rollout worker:
    a process of the local backend, a Ray actor), ``raylet``."""
    pid = launch.proc.pid
    if role.startswith("rank"):
        return rank_pids(pid).get(int(role[4:]))
    if role in ("worker", "raylet"):
        found = worker_pids(pid) if role == "worker" and config != "ray" else \
            ray_pids(launch.marker, "RolloutActor" if role == "worker" else "raylet")
        return found[0] if found else None
    return pid


def train_command(config: str, run_dir: Path, settings: list[str], extra: list[str]) -> list[str]:
    """``asyncrl train`` in ``config``: one process (``local``, ``ray``), or two ranks on gloo
    (``torchrun``, started as docs/scaling.md does); ``--resume`` once the run has its
    ``config.yaml``, else with ``settings``; ``extra`` either way."""
    head = [sys.executable, "-m", "asyncrl.cli", "train"]
    if config == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master_addr", "127.0.0.1",
                "--master_port", free_port(), "-m", "asyncrl", "train"]
    if (run_dir / "config.yaml").exists():
        return [*head, "--resume", str(run_dir), *extra]
    return [*head, *settings, *extra]


def crash(launch: Launch) -> dict:
    """SIGKILL the launch (torchrun's agent: its ranks follow it), then look for what outlived it."""
    launch.proc.kill()
    launch.proc.wait()
    orphans, gone_s = wait_gone(launch.marker)
    return {"crash_orphans": orphans, "crash_gone_after_s": round(gone_s, 2)}


def last_step(run_dir: Path) -> int:
    """The newest step in ``metrics.jsonl`` (0: none trained yet)."""
    return max((r.get("step", 0) for r in rows(run_dir / "metrics.jsonl")), default=0)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Whole checkpoint folders (``step-N``), oldest first; ``.tmp`` and ``.damaged`` ones are not."""
    root = run_dir / "checkpoints"
    found = [p for p in root.iterdir() if re.fullmatch(r"step-\d+", p.name)] if root.is_dir() else []
    return sorted(found)


def stop_checkpoint_is_last_step(run_dir: Path, lines: list[str]) -> bool:
    """A run stopped by a signal wrote its checkpoint: of the step its line names (``stopped by
    SIGTERM after step N``), the last one trained, and the newest."""
    steps = [int(m.group(1)) for m in (re.search(r"after step (\d+) \(checkpoint ", x) for x in lines) if m]
    newest = checkpoint_dirs(run_dir)
    return bool(steps and newest) and newest[-1].name == f"step-{steps[-1]:06d}" and steps[-1] == last_step(run_dir)


def progressed(run_dir: Path, err: str, since_wall: float, fresh: bool) -> bool:
    """Whether a launch started at ``since_wall`` trained a step past the one it resumed from (the
    ``resuming from step N`` line in its stderr ``err``; a ``fresh`` run from step 0). Only a write
    after the launch counts: until the resumed run cuts ``metrics.jsonl`` back, the rows there are
    the killed launch's."""
    found = RESUMED.search(err)
    start = 0 if fresh else int(found.group(1)) if found else None
    metrics = run_dir / "metrics.jsonl"
    try:
        written_since = metrics.stat().st_mtime >= since_wall
    except OSError:
        return False
    return start is not None and written_since and last_step(run_dir) > start


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def damage(checkpoint: Path, how: str) -> str:
    """Damage a checkpoint's weights as docs/errors.md's rows do (``truncate``: cut in half,
    resume-truncated-newest; ``nan``: one NaN, resume-nan-weights); returns the folder's name."""
    from safetensors.torch import load_file, save_file

    weights = checkpoint / "model.safetensors"
    if how == "nan":
        tensors = load_file(weights)
        name = sorted(k for k, v in tensors.items() if v.is_floating_point())[0]
        tensors[name].view(-1)[0] = math.nan
        save_file(tensors, weights, metadata={"format": "pt"})
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return checkpoint.name


def snapshot(run_dir: Path) -> set[tuple]:
    """The run directory's files, but a torn ``.tmp`` folder a crash left (a resume may remove it)."""
    return {(str(p.relative_to(run_dir)), p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.rglob("*")
            if p.is_file() and ".tmp" not in str(p.relative_to(run_dir))}


def lines_after(path: Path, offset: int) -> list[str]:
    """The non-empty lines a launch wrote to ``path`` from byte ``offset`` on."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def half_written(run_dir: Path, tmp_ok: bool = False) -> list[str]:
    """What a fault the run handled itself must not leave (docs/errors.md, "Faults at run time"): a
    ``.tmp`` file or folder (unless ``tmp_ok``), a row file line that does not parse, a newest
    checkpoint that does not read back whole, a ``summary.json`` of an unfinished run."""
    from asyncrl.training.checkpoint import check_checkpoint, latest_checkpoint

    problems = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name.endswith(".tmp") and not tmp_ok]
    for path in run_dir.glob("*.jsonl"):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                json.loads(line)
            except ValueError:
                problems.append(f"{path.name}:{number} does not parse")
    newest = latest_checkpoint(run_dir)
    if newest is not None:
        try:
            check_checkpoint(newest)
        except Exception as err:  # noqa: BLE001 (whatever the reader says is the finding)
            problems.append(f"{newest.name}: {type(err).__name__}: {err}")
    if (run_dir / "summary.json").exists():
        problems.append("summary.json of an unfinished run")
    return problems


def known_setting(override: str) -> bool:
    """Whether this checkout has the setting (a bound that a fix may add): the runs get it only then."""
    from asyncrl.config import load_config
    from asyncrl.core.loader import ConfigError

    try:
        load_config(None, [override])
    except ConfigError:
        return False
    return True


def ray_temp_left(tmpdir: Path, bound_s: float = 10.0) -> list[str]:
    """Ray's folders still in a launch's TMPDIR after ``bound_s`` (a private cluster's
    ``asyncrl-ray-*``, or Ray's default ``ray``): the run, or its reaper, removes them."""
    deadline = time.monotonic() + bound_s
    while True:
        left = sorted(p.name for p in tmpdir.iterdir() if p.name.startswith(("ray", "asyncrl-ray"))) \
            if tmpdir.is_dir() else []
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def ledger_checks(run_dir: Path, steps: int, k: int, lost_groups: int) -> tuple[dict, dict]:
    """(checks, counts) of a finished run: every step once in the ledger and metrics, every prompt
    group at most once (trained or dropped), the staleness bound, and no group missing below the
    newest one beyond the ``lost_groups`` the runtime declared lost with its dead workers."""
    ledger = rows(run_dir / "ledger.jsonl")
    metrics = [r for r in rows(run_dir / "metrics.jsonl") if r.get("step", 0) > 0]  # step 0: the first eval
    groups = [g for r in ledger for g in r["consumed"] + r["dropped"]]
    missing = len(set(range(max(groups, default=-1) + 1)) - set(groups))
    checks = {
        "ledger_steps_once": [r["step"] for r in ledger] == list(range(1, steps + 1)),
        "metrics_steps_once": [r["step"] for r in metrics] == list(range(1, steps + 1)),
        "groups_at_most_once": len(groups) == len(set(groups)),
        "staleness_bound_holds": all(r.get("staleness_token_max", 0) <= k for r in metrics),
        "no_group_lost": missing <= lost_groups,
    }
    counts = {"steps": len(ledger), "groups_trained": sum(len(r["consumed"]) for r in ledger),
              "groups_dropped": sum(len(r["dropped"]) for r in ledger), "groups_missing_below_max": missing,
              "groups_declared_lost": lost_groups}
    return checks, counts


class SmallDisk:
    """A configuration's ``run.out_dir``: a tmpfs of ``size_mb`` where this process may mount one
    (root), which a fault fills to ``leave`` bytes; else a plain folder (a full disk is then a
    file-size limit, :func:`limit_file_size`)."""

    def __init__(self, path: Path, size_mb: int = 128):
        path.mkdir(parents=True, exist_ok=True)
        self.path, self.filler = path, path / "filler"
        self.mounted = os.geteuid() == 0 and shutil.which("mount") is not None and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True).returncode == 0

    def fill(self, leave: int = 16 << 10) -> int:
        """Write a file that leaves ``leave`` bytes free (none, if the run wrote meanwhile); returns
        its size."""
        size, written = max(0, shutil.disk_usage(self.path).free - leave), 0
        with self.filler.open("wb", buffering=0) as fh:
            try:
                while written < size:
                    written += fh.write(b"\0" * min(1 << 20, size - written))
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
        return written

    def empty(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


def limit_file_size(pids: list[int | None], limit: int) -> None:
    """Cap every file the running processes ``pids`` write at ``limit`` bytes (``ulimit -f``,
    RLIMIT_FSIZE, set from outside with prlimit): a write past it fails with EFBIG, as a full disk
    fails with ENOSPC. Their children started before keep their own limit."""
    import resource

    for pid in pids:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, limit))
