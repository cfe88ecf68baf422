"""Chaos lane: faults injected at random moments into real async runs, in three configurations,
each fault followed by the checks docs/errors.md promises and a resume.

Configurations (the tiny model of ``benchmarks/resume_campaign.py``, K = 2, a checkpoint every 2
steps, ``async.worker_timeout_s`` = :data:`WORKER_TIMEOUT_S`; torchrun ``trainer.fsdp.timeout_s`` =
:data:`RANK_TIMEOUT_S` where the setting exists):

* ``local``: one trainer process, one rollout worker process;
* ``ray``: the same with ``async.backend=ray`` (a private Ray cluster, the worker a Ray actor);
* ``torchrun``: two trainer ranks on gloo (``python -m torch.distributed.run --nproc-per-node 2
  -m asyncrl train ...``), rank 0's rollout worker a local process.

Faults (:data:`FAULTS`), drawn with a seeded RNG among those that apply to the configuration, each
at a moment drawn among its own (``resume_campaign.moment_reached``: ``startup``, ``spawn`` — only on
a launch no fault has touched yet —, ``step``, ``write``): SIGKILL of the trainer (rank 0), SIGTERM
of the trainer (torchrun's agent, as Slurm sends it), SIGKILL or SIGSTOP of a rollout worker,
SIGKILL, SIGTERM or SIGSTOP of rank 1, SIGKILL of the raylet, a full disk (``run.out_dir`` on a
tmpfs that the lane fills, where it can mount one; or a file-size limit set on the running trainer),
and a checkpoint damaged while the run is down (its newest ``model.safetensors`` truncated, or a NaN
written into it).

After a fault that ends the run: the exit status, one ``asyncrl:`` line naming the cause, no
traceback, nothing half-written (for the faults the run handles itself), no process carrying the
launch's environment marker alive :data:`ORPHAN_BOUND_S` later; then ``asyncrl train --resume``,
whose first new step marks the fault ``resumed_ok``. After a fault the run survives: its recovery
line, and a step trained after it. At the end each configuration's run is resumed to two steps past
its last and must finish, with every step once in the ledger, every prompt group at most once
(trained or dropped), the staleness bound, and no group missing beyond those its dead workers held.

    python benchmarks/chaos_lane.py --faults 100 --configs local,ray,torchrun --out runs/chaos

Writes ``<out>/faults.jsonl`` (one line per fault) and ``<out>/summary.json``; exit 1 if a check
failed. The run directories, and each launch's stdout and stderr, stay under ``<out>/<config>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from campaign_common import (  # noqa: E402
    LOST_UNITS, OURS, Launch, SmallDisk, checkpoint_dirs, crash, damage, half_written, known_setting, last_step,
    ledger_checks, limit_file_size, lines_after, process_of, progressed, ray_temp_left, snapshot,
    stop_checkpoint_is_last_step, train_command)
from resume_campaign import MARK, ORPHAN_BOUND_S, TINY, alive, moment_reached, rows, wait_gone  # noqa: E402

CONFIGS = ("local", "ray", "torchrun")
WORKER_TIMEOUT_S = 8  # async.worker_timeout_s of every run: a stopped worker is replaced after it
TERM_BOUND_S = 20  # SIGTERM to exit with its checkpoint (errors.md, row sigterm-with-stopped-worker)
RANK_BOUND_S = 30  # a dead rank ends the job (scaling.md, "One rank dies")
RANK_TIMEOUT_S = 20  # trainer.fsdp.timeout_s of torchrun runs, where the setting exists
# a stopped rank ends the job within timeout_s + torchrun's 30 s shutdown + a few seconds
# (errors.md, "Trainer ranks under torchrun"); without the setting the job hangs past it: a failure
STOPPED_RANK_BOUND_S = RANK_TIMEOUT_S + 30 + 20
STEP_BOUND_S = 240  # a run that survived a fault trains its next step (a worker restarts: imports, model)
MOMENT_BOUND_S = 300  # the longest wait for a fault's moment; the fault lands then anyway
FINAL_BOUND_S = 900
MAX_SURVIVED = 3  # faults a launch may survive before one must end it (a pool gives up past 10 restarts)
UNIT_GROUPS = 2  # prompt groups per work unit: TINY's rollout.prompts_per_step over one worker


@dataclass(frozen=True)
class Fault:
    configs: tuple[str, ...]
    moments: tuple[str, ...]
    ends: bool  # the run must end (then it is resumed); else it must go on
    line: str  # what the one stderr line after the fault matches ("": no line asked for)
    bound_s: float  # the run ends, or says it recovered, within this after the fault


FAULTS = {
    "sigkill-trainer": Fault(CONFIGS, ("startup", "spawn", "step", "write"), True, "", RANK_BOUND_S),
    "sigterm-trainer": Fault(CONFIGS, ("step", "write"), True, r"stopped by SIGTERM after step \d+ \(checkpoint ",
                             TERM_BOUND_S),
    "sigkill-worker": Fault(CONFIGS, ("step", "write"), False, r"rollout worker \d+ died .*; restarting it", 60),
    "sigstop-worker": Fault(("local", "torchrun"), ("step",), False,
                            r"rollout worker \d+ killed: no result for \d+ s \(async\.worker_timeout_s=",
                            WORKER_TIMEOUT_S + 60),
    "sigkill-rank1": Fault(("torchrun",), ("step", "write"), True, "another rank of the job failed or was killed",
                           RANK_BOUND_S),
    "sigterm-rank1": Fault(("torchrun",), ("step", "write"), False, "", 0.0),  # ranks > 0 ignore it (scaling.md)
    "sigstop-rank1": Fault(("torchrun",), ("step",), True, r"no answer from trainer rank 1 within",
                           STOPPED_RANK_BOUND_S),  # bound: --stopped-rank-bound
    "sigkill-raylet": Fault(("ray",), ("step", "write"), True, r"the Ray cluster's raylet \(pid \d+\)", 60),
    "disk-full": Fault(CONFIGS, ("step",), True, r"no space left on device writing ", 120),
    "corrupt-shard": Fault(CONFIGS, ("step",), True, "", 120),  # its lines: CORRUPT
}
# the exit status of local and Ray runs (errors.md, resume.md); torchrun's agent exits with its own
# non-zero status and prints its own summary (scaling.md), so there only rank 0's line is ours
EXIT = {"sigkill-trainer": -signal.SIGKILL, "sigterm-trainer": 128 + signal.SIGTERM, "disk-full": 2,
        "corrupt-shard": 2}
CORRUPT = {"truncate": r"checkpoint .* is damaged \(model\.safetensors: .*resuming from the older",
           "nan": r"checkpoint .* holds non-finite values \(model\.safetensors: "}
SIGNALS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigstop": signal.SIGSTOP}
BOUNDS = {("sigterm-trainer", "ray"): 60.0}  # errors.md, "The Ray backend": within 60 s of the signal
Outcome = tuple[dict, Launch | None]  # a fault's record, and the launch that goes on (None: the run is down)
HANDLED = {"sigterm-trainer", "sigstop-rank1", "sigkill-raylet", "disk-full"}  # nothing half-written after these
# but a .tmp checkpoint where the run stopped where it was (errors.md: "The Ray backend", "Trainer ranks ...")
TMP_OK = {"sigkill-raylet", "sigstop-rank1"}


class ConfigRun:
    """One configuration's run directory, its launches (the first fresh, then ``--resume``), its
    disk, and the fault records waiting for a resume's verdict."""

    def __init__(self, name: str, args, out: Path, log):
        self.name, self.args, self.log = name, args, log
        self.root = out / name
        (self.root / "launches").mkdir(parents=True)
        self.disk = SmallDisk(self.root / "disk")
        self.full_disk = "tmpfs" if self.disk.mounted else "file-size limit"
        timeout = f"trainer.fsdp.timeout_s={RANK_TIMEOUT_S}"
        self.rank_timeout = [timeout] if name == "torchrun" and known_setting(timeout) else []
        self.run_dir = self.disk.path / "run"
        self.launches: list[Launch] = []
        self.pending: list[dict] = []
        self.records: list[dict] = []

    def command(self, extra: list[str]) -> list[str]:
        a = self.args
        settings = [*TINY, "run.mode=async", f"async.max_staleness={a.k}", f"async.max_ahead={a.k}",
                    "trainer.steps=1000000", f"run.checkpoint_every={a.checkpoint_every}",
                    f"async.worker_timeout_s={WORKER_TIMEOUT_S}", f"run.out_dir={self.disk.path}", "run.name=run",
                    *([f"policy.cache_dir={a.cache}"] if a.cache else []),
                    *(["async.backend=ray"] if self.name == "ray" else []), *self.rank_timeout, *a.set]
        return train_command(self.name, self.run_dir, settings, extra)

    def start(self, extra: list[str] = ()) -> Launch:
        number, marker = len(self.launches) + 1, uuid.uuid4().hex
        err, out = self.root / "launches" / f"{number:03d}.err", self.root / "launches" / f"{number:03d}.out"
        tmp, fresh = self.root / "tmp" / f"{number:03d}", not (self.run_dir / "config.yaml").exists()
        tmp.mkdir(parents=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp), MARK: marker}
        with err.open("w") as err_fh, out.open("w") as out_fh:  # a session of its own: SIGTERM to its group
            proc = subprocess.Popen(self.command(list(extra)), stdout=out_fh, stderr=err_fh, env=env,
                                    start_new_session=True)
        self.launches.append(Launch(number, proc, marker, err, out, tmp, time.monotonic(), time.time(), fresh))
        return self.launches[-1]

    def write(self, record: dict) -> None:
        record["ok"] = bool(record.get("resumed_ok")) and all(record["checks"].values())
        self.records.append(record)
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()
        print(json.dumps({k: record.get(k) for k in ("fault", "config", "kind", "moment", "exit", "ok")}), flush=True)

    def settle(self, ok: bool) -> None:
        """The faults before the latest resume: resumed (a step trained past the resume) or not."""
        for record in self.pending:
            record["resumed_ok"] = ok
            self.write(record)
        self.pending = []

    def lost_groups(self) -> int:
        return UNIT_GROUPS * sum(int(n) for launch in self.launches for n in LOST_UNITS.findall(launch.text()))


ROLES = {"sigkill-worker": "worker", "sigstop-worker": "worker", "sigkill-rank1": "rank1", "sigterm-rank1": "rank1",
         "sigstop-rank1": "rank1", "sigkill-raylet": "raylet"}


def victim(cfg: ConfigRun, launch: Launch, kind: str) -> int | None:
    """The process ``kind`` signals (None: not there yet): SIGKILL of the trainer is rank 0's under
    torchrun; SIGTERM goes to torchrun's agent, as Slurm sends it."""
    if kind == "sigkill-trainer" and cfg.name == "torchrun":
        return process_of(launch, cfg.name, "rank0")
    return process_of(launch, cfg.name, ROLES.get(kind, "trainer"))


def draw(rng: random.Random, cfg: ConfigRun, launch: Launch) -> tuple[str, str]:
    kinds = [k for k, f in FAULTS.items() if cfg.name in f.configs and k in cfg.args.kinds]
    kind = rng.choice([k for k in kinds if FAULTS[k].ends or launch.survived < MAX_SURVIVED] or kinds)
    untouched = launch.faults == 0 and not launch.fresh  # start-up moments: a resumed launch, before any fault
    moments = [m for m in FAULTS[kind].moments if m in ("step", "write") or
               (untouched and not (m == "spawn" and cfg.name == "ray"))]
    return kind, rng.choice(moments)


def await_moment(cfg: ConfigRun, launch: Launch, kind: str, moment: str, delay: float) -> int | None:
    """Wait for the moment (and the victim), then return the victim's pid; None if the launch ended
    first, or no victim appeared within :data:`MOMENT_BOUND_S`."""
    now = time.monotonic()
    state = {"launched": launch.started if moment == "startup" else now, "launched_wall": time.time(),
             "delay": delay, "start_rows": len(rows(cfg.run_dir / "metrics.jsonl"))}
    deadline = now + MOMENT_BOUND_S
    while launch.alive():
        late = time.monotonic() >= deadline
        reached = late or moment_reached(moment, state, launch.proc, cfg.run_dir, launch.fresh)
        if reached and (kind != "corrupt-shard" or late or len(checkpoint_dirs(cfg.run_dir)) >= 2):
            pid = victim(cfg, launch, kind)
            if pid is not None or time.monotonic() >= deadline + 60:
                return pid
        time.sleep(0.002 if moment == "write" else 0.02)
    return None


def exit_ok(cfg: ConfigRun, kind: str, rc: int | None) -> bool:
    if rc is None or rc == 0:
        return False
    if cfg.name == "torchrun":
        return True
    return rc == EXIT[kind] if kind in EXIT else rc > 0


def line_checks(cfg: ConfigRun, kind: str, pattern: str, lines: list[str]) -> dict:
    """The one line naming the cause, and nothing else on stderr (torchrun: no rank's traceback;
    the agent's own output is torchrun's, scaling.md)."""
    checks = {}
    if pattern:
        checks["one_line_naming_the_cause"] = sum(bool(OURS.match(x) and re.search(pattern, x)) for x in lines) == 1
    if cfg.name == "torchrun":
        checks["no_traceback"] = not any(re.search(r"\[rank\d+\]: Traceback", x) for x in lines)
    elif kind != "sigkill-trainer":
        checks["no_other_stderr"] = all(OURS.match(x) for x in lines)
    return checks


def observe_end(cfg: ConfigRun, launch: Launch, kind: str, offset: int, pattern: str, bound_s: float) -> dict:
    """A fault that must end the run: wait for the end (bounded), then check what it left."""
    sent = time.monotonic()
    try:
        rc = launch.proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        rc = None
        launch.proc.kill()
        launch.proc.wait()
    after_s = time.monotonic() - sent
    orphans, gone_s = wait_gone(launch.marker)
    lines = lines_after(launch.err, offset)
    checks = {"ended_within_bound": rc is not None, "exit_status": exit_ok(cfg, kind, rc), "no_orphans": not orphans,
              "no_ray_temp_left": not ray_temp_left(launch.tmp), **line_checks(cfg, kind, pattern, lines)}
    if kind in HANDLED:
        problems = half_written(cfg.run_dir, tmp_ok=kind in TMP_OK)
        checks["nothing_half_written"] = not problems
        checks["stdout_empty"] = launch.out.stat().st_size == 0
    else:
        problems = []
    if kind == "sigterm-trainer":
        checks["checkpoint_of_last_step"] = stop_checkpoint_is_last_step(cfg.run_dir, lines)
    return {"exit": rc, "after_s": round(after_s, 2), "lines": [x for x in lines if OURS.match(x)][-3:],
            "orphans": orphans, "gone_after_s": round(gone_s, 2), "half_written": problems[:5], "checks": checks}


def observe_recovery(cfg: ConfigRun, launch: Launch, offset: int, pattern: str, bound_s: float,
                     target: int | None) -> dict:
    """A fault the run must survive: its line within ``bound_s``, then a step trained after it."""
    sent = time.monotonic()
    seen = not pattern
    while not seen and launch.alive() and time.monotonic() - sent < bound_s:
        seen = any(OURS.match(x) and re.search(pattern, x) for x in lines_after(launch.err, offset))
        time.sleep(0.2)
    after_s, step = time.monotonic() - sent, last_step(cfg.run_dir)
    give_up = sent + bound_s + STEP_BOUND_S
    while seen and launch.alive() and last_step(cfg.run_dir) <= step and time.monotonic() < give_up:
        time.sleep(0.2)
    checks = {"recovery_line": seen} if pattern else {}
    checks.update({"trained_on": last_step(cfg.run_dir) > step, "still_running": launch.alive()})
    if target is not None:
        checks["stopped_process_gone"] = not alive(target)
    lines = lines_after(launch.err, offset)
    record = {"exit": launch.proc.poll(), "after_s": round(after_s, 2),
              "lines": [x for x in lines if OURS.match(x)][-3:], "checks": checks}
    if not launch.alive():  # it ended after all: what did it leave?
        record["orphans"], _ = wait_gone(launch.marker)
    return record


def corrupt_shard(cfg: ConfigRun, launch: Launch, rng: random.Random, record: dict, _pid: int) -> Outcome:
    """Crash the run, damage its newest checkpoint, resume: a truncated file is set aside and the
    run goes on from the older checkpoint; NaN weights are refused in one line, the run directory
    left as it was, and the lane deletes the folder (as errors.md says) before the next resume."""
    how = rng.choice(sorted(CORRUPT))
    record.update(how=how, **crash(launch))
    record["damaged"] = damage(checkpoint_dirs(cfg.run_dir)[-1], how)
    before = snapshot(cfg.run_dir)
    resumed = cfg.start()
    resumed.faults += 1
    if how == "truncate":
        record.update(observe_recovery(cfg, resumed, 0, CORRUPT[how], FAULTS["corrupt-shard"].bound_s, None))
        record["checks"]["no_orphans"] = not record["crash_orphans"]
        return record, resumed if resumed.alive() else None
    record.update(observe_end(cfg, resumed, "corrupt-shard", 0, CORRUPT[how], FAULTS["corrupt-shard"].bound_s))
    record["checks"]["run_dir_as_it_was"] = snapshot(cfg.run_dir) == before
    record["checks"]["no_orphans"] = record["checks"]["no_orphans"] and not record["crash_orphans"]
    shutil.rmtree(cfg.run_dir / "checkpoints" / record["damaged"], ignore_errors=True)
    return record, None


def disk_full(cfg: ConfigRun, launch: Launch, rng: random.Random, record: dict, _pid: int) -> Outcome:
    """A full disk: the run's tmpfs filled to 16 KiB free (where the lane could mount one), or a
    file-size limit (``ulimit -f``) set on the running trainer, every rank of it, one byte under its
    newest checkpoint's largest file; wait for the run to stop on it, then free the room."""
    fault, offset = FAULTS["disk-full"], launch.err.stat().st_size
    record["how"] = rng.choice(["tmpfs", "file-size limit"]) if cfg.disk.mounted else "file-size limit"
    if record["how"] == "tmpfs":
        record["filled_bytes"] = cfg.disk.fill()
    else:
        newest = checkpoint_dirs(cfg.run_dir)[-1]
        record["file_size_limit"] = max(p.stat().st_size for p in newest.rglob("*") if p.is_file()) - 1
        ranks = ("rank0", "rank1") if cfg.name == "torchrun" else ("trainer",)
        limit_file_size([process_of(launch, cfg.name, rank) for rank in ranks], record["file_size_limit"])
    pattern = fault.line if record["how"] == "tmpfs" else r" writing "  # the file it could not write
    record.update(observe_end(cfg, launch, "disk-full", offset, pattern, fault.bound_s))
    cfg.disk.empty()
    return record, None


def signal_fault(cfg: ConfigRun, launch: Launch, rng: random.Random, record: dict, pid: int) -> Outcome:
    """Signal the victim, then check the run's end and what it left, or its recovery."""
    kind = record["kind"]
    fault, offset = FAULTS[kind], launch.err.stat().st_size
    if kind == "sigterm-trainer":
        record["how"] = rng.choice(["process", "group"])  # the group: every process of it, as Slurm sends it
    try:
        if record.get("how") == "group":
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, SIGNALS[kind.split("-")[0]])
    except ProcessLookupError:  # it died between the moment and the signal (then the checks below say so)
        record["signalled"] = False
    bound = {"sigstop-rank1": cfg.args.stopped_rank_bound}.get(kind, BOUNDS.get((kind, cfg.name), fault.bound_s))
    if fault.ends:
        record.update(observe_end(cfg, launch, kind, offset, fault.line, bound))
        return record, None
    record.update(observe_recovery(cfg, launch, offset, fault.line, bound, pid if kind == "sigstop-worker" else None))
    launch.survived += 1
    return record, launch


def inject(cfg: ConfigRun, launch: Launch, rng: random.Random, number: int) -> Outcome:
    """Draw one fault, wait for its moment, inject it, check; returns its record and the launch that
    goes on (None: the run is down)."""
    kind, moment = draw(rng, cfg, launch)
    delay = {"startup": rng.uniform(0.0, 5.0), "spawn": rng.uniform(0.0, 3.0)}.get(moment, rng.uniform(0.0, 2.0))
    pid = await_moment(cfg, launch, kind, moment, delay)
    record = {"fault": number, "config": cfg.name, "kind": kind, "moment": moment, "delay_s": round(delay, 2),
              "launch": launch.number, "at_s": round(time.monotonic() - launch.started, 2),
              "step": last_step(cfg.run_dir), "time": time.strftime("%H:%M:%S")}
    if launch.alive() and progressed(cfg.run_dir, launch.text(), launch.wall, launch.fresh):
        cfg.settle(True)
    if pid is None or not launch.alive():  # the launch ended by itself, or its victim never came
        record.update(exit=launch.proc.poll(), checks={"landed": False}, resumed_ok=False)
        if launch.alive():
            record.update(crash(launch))
        record["stderr_last"] = launch.last_line()
        return record, None
    launch.faults += 1
    handler = {"corrupt-shard": corrupt_shard, "disk-full": disk_full}.get(kind, signal_fault)
    record, launch = handler(cfg, launch, rng, record, pid)
    record["stderr_last"] = (launch or cfg.launches[-1]).last_line()
    return record, launch if launch is not None and launch.alive() else None


def finish(cfg: ConfigRun, launch: Launch | None) -> dict:
    """End the last launch (SIGKILL), resume to two steps past the last, check the whole run."""
    left = crash(launch) if launch is not None and launch.alive() else {"crash_orphans": []}
    steps = last_step(cfg.run_dir) + 2
    final = cfg.start([f"trainer.steps={steps}"])
    try:
        rc = final.proc.wait(timeout=FINAL_BOUND_S)
    except subprocess.TimeoutExpired:
        final.proc.kill()
        rc = final.proc.wait()
    orphans, _ = wait_gone(final.marker)
    cfg.settle(rc == 0)
    checks, counts = ledger_checks(cfg.run_dir, steps, cfg.args.k, cfg.lost_groups())
    checks = {"final_run_finished": rc == 0 and (cfg.run_dir / "summary.json").exists(),
              "no_orphans": not orphans and not left["crash_orphans"], "no_ray_temp_left": not ray_temp_left(final.tmp),
              **checks}
    for name in ("ledger.jsonl", "metrics.jsonl", "summary.json"):  # the tmpfs goes with the lane
        if (cfg.run_dir / name).exists():
            shutil.copy(cfg.run_dir / name, cfg.root / name)
    return {"checks": checks, "passed": all(checks.values()), "final_exit": rc, "stderr_last": final.last_line(),
            "launches": len(cfg.launches), **counts}


def run_config(cfg: ConfigRun, numbers: list[int], rng: random.Random) -> dict:
    """Inject the faults ``numbers`` into one configuration's run, then finish and check it."""
    launch, given_up = cfg.start(), False
    try:
        ended_alone = 0
        for number in numbers:
            if launch is None:
                launch = cfg.start()
            record, launch = inject(cfg, launch, rng, number)
            if record["checks"].get("landed", True):
                ended_alone = 0
                cfg.pending.append(record)
                if launch is not None and progressed(cfg.run_dir, launch.text(), launch.wall, launch.fresh):
                    cfg.settle(True)
                continue
            cfg.settle(False)  # a resume that ends by itself did not resume
            cfg.write(record)
            ended_alone += 1
            if ended_alone >= 3:
                given_up = True
                break
        final = finish(cfg, launch)
    finally:
        for started in cfg.launches:
            if started.alive():
                started.proc.kill()
                started.proc.wait()
                wait_gone(started.marker)
        cfg.disk.close()
    if given_up:
        final["checks"]["launches_ran"] = False
        final["passed"] = False
    return final


def summarize(runs: dict[str, ConfigRun], finals: dict[str, dict], args, wall_s: float) -> dict:
    records = [r for run in runs.values() for r in run.records]
    by_config = {}
    for name, run in runs.items():
        kinds = sorted({r["kind"] for r in run.records})
        by_config[name] = {"faults": len(run.records), "full_disk": run.full_disk, "settings": run.rank_timeout,
                           "final": finals[name],
                           "by_kind": {k: {"injected": sum(r["kind"] == k for r in run.records),
                                           "failed": sum(r["kind"] == k and not r["ok"] for r in run.records)}
                                       for k in kinds}}
    failures = [{"fault": r["fault"], "config": r["config"], "kind": r["kind"],
                 "failed": [c for c, ok in r["checks"].items() if not ok] + ([] if r["resumed_ok"] else ["resumed_ok"])}
                for r in sorted(records, key=lambda r: r["fault"]) if not r["ok"]]
    failures += [{"config": name, "kind": "final", "failed": [c for c, ok in f["checks"].items() if not ok]}
                 for name, f in finals.items() if not f["passed"]]
    return {"passed": not failures, "faults": len(records), "failures": failures, "by_config": by_config,
            "bounds_s": {"orphans": ORPHAN_BOUND_S, "sigterm": TERM_BOUND_S, "dead_rank": RANK_BOUND_S,
                         "stopped_rank": args.stopped_rank_bound, "worker_timeout": WORKER_TIMEOUT_S,
                         "step_after_recovery": STEP_BOUND_S},
            "seed": args.seed, "wall_s": round(wall_s, 1),
            "command": "python " + " ".join(sys.argv)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=12, help="faults in all, shared out across the configurations")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--kinds", default=",".join(FAULTS), help="the faults to draw from (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/chaos-lane")
    parser.add_argument("--cache", default="", help="policy.cache_dir (default: the user's warm-start cache)")
    parser.add_argument("--k", type=int, default=2, help="async.max_staleness (and max_ahead)")
    parser.add_argument("--checkpoint-every", type=int, default=2)
    parser.add_argument("--stopped-rank-bound", type=float, default=FAULTS["sigstop-rank1"].bound_s,
                        help="seconds a job with a SIGSTOPped rank may take to end")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of every run (e.g. a bound of the job's collectives)")
    args = parser.parse_args(argv)
    args.configs, args.kinds = [c for c in args.configs.split(",") if c], [k for k in args.kinds.split(",") if k]
    if not args.configs or set(args.configs) - set(CONFIGS):
        parser.error(f"--configs: one or more of {', '.join(CONFIGS)}, got {','.join(args.configs)}")
    if not args.kinds or set(args.kinds) - set(FAULTS):
        parser.error(f"--kinds: one or more of {', '.join(FAULTS)}, got {','.join(args.kinds)}")
    for name in args.configs:
        if not any(name in FAULTS[k].configs for k in args.kinds):
            parser.error(f"--kinds: none applies to the {name} configuration")
    if args.faults < 1:
        parser.error("--faults: must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng, started = random.Random(args.seed), time.monotonic()
    shares = {c: list(range(i + 1, args.faults + 1, len(args.configs))) for i, c in enumerate(args.configs)}
    runs, finals = {}, {}
    with (out / "faults.jsonl").open("w") as log:
        for name in args.configs:
            runs[name] = ConfigRun(name, args, out, log)
            finals[name] = run_config(runs[name], shares[name], rng)
    result = summarize(runs, finals, args, time.monotonic() - started)
    (out / "summary.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("passed", "faults", "failures")}, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
