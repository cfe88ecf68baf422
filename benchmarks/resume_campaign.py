"""Kill -9 campaign for exact resume: one async run, SIGKILLed N times at random moments, resumed
with ``asyncrl train --resume`` after each kill, then run to the end. The moments cycle through
four kinds (:data:`KINDS`), each with a random delay:

* ``startup``: 0-5 s after the launch (the trainer importing, loading, resuming);
* ``spawn``: 0-3 s after its first rollout worker process appeared (workers importing torch and
  building their model: the window where a worker used to outlive its trainer);
* ``step``: 0-2 s after it trained a new step;
* ``write``: while a checkpoint folder is being written.

The first kill is a ``step`` kill after the first checkpoint (before it there is nothing to
resume). Checks that

* every launch is killed as planned or runs to the end, and the last one finishes;
* the ledger holds every step once and every prompt group at most once (trained on or dropped):
  no group is lost to a kill and none is trained on twice;
* the staleness bound K holds in every step, before and after each resume;
* no process of the run outlives a kill by :data:`ORPHAN_BOUND_S`: every process carrying the
  launch's environment marker (all its descendants, the resource tracker included) is gone.

    python benchmarks/resume_campaign.py --kills 50 --out runs/kill-campaign

Prints one JSON summary (also written to ``<out>/campaign.json``); exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

KINDS = ("startup", "spawn", "step", "write")
ORPHAN_BOUND_S = 10.0  # what the runtime promises: its processes follow a SIGKILLed trainer within this
MARK = "ASYNCRL_CAMPAIGN_MARK"  # environment variable every process of a launch inherits

TINY = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=128", "model.vocab_size=400", "task.arithmetic.min_steps=1",
    "task.arithmetic.max_steps=1", "task.arithmetic.ops=+", "task.arithmetic.max_value=9",
    "task.arithmetic.n_train=70", "task.arithmetic.n_eval=4", "pretrain.steps=200", "pretrain.batch_size=32",
    "pretrain.lr=0.003", "pretrain.warmup_steps=5", "pretrain.alt_style_frac=0", "rollout.prompts_per_step=2",
    "rollout.samples_per_prompt=4", "rollout.max_new_tokens=16", "trainer.n_minibatches=2",
    "trainer.lr=0.0002", "eval.n_problems=8", "eval.every=10", "run.progress=false", "run.tensorboard=false",
]


def rows(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line torn by the kill (the resumed run cuts it off)
    return out


def descendants(pid: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def marked(marker: str) -> set[int]:
    """Live processes whose environment holds ``MARK=marker``: every descendant of a launch, even
    one reparented after its parent died."""
    needle = f"{MARK}={marker}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def is_worker(pid: int) -> bool:
    try:
        return b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_gone(marker: str, bound_s: float = ORPHAN_BOUND_S) -> tuple[list[int], float]:
    """(processes of the launch still alive after ``bound_s``, seconds until none was left). Those
    left are then killed, so that the campaign goes on with nothing of an earlier launch."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        if not marked(marker):
            return [], time.monotonic() - started
        time.sleep(0.1)
    orphans = sorted(marked(marker))
    for pid in orphans:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return orphans, bound_s

def launch(args, run_dir: Path, log, marker: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "asyncrl.cli", "train"]
    if (run_dir / "config.yaml").exists():
        cmd += ["--resume", str(run_dir)]
    else:
        cmd += [*TINY, "run.mode=async", f"async.max_staleness={args.k}", f"async.max_ahead={args.k}",
                f"trainer.steps={args.steps}", f"run.checkpoint_every={args.checkpoint_every}",
                f"run.out_dir={run_dir.parent}", f"run.name={run_dir.name}", f"policy.cache_dir={args.cache}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", MARK: marker}
    return subprocess.Popen(cmd, stdout=log, stderr=log, env=env)


def complete_checkpoints(run_dir: Path) -> bool:
    root = run_dir / "checkpoints"
    return root.is_dir() and any(p.name.startswith("step-") and not p.name.endswith(".tmp") for p in root.iterdir())


def writing_since(run_dir: Path, since: float) -> bool:
    """A checkpoint folder is being written, touched after ``since`` (wall time): a torn one a
    kill left behind is not."""
    for tmp in (run_dir / "checkpoints").glob("*.tmp"):
        try:
            if tmp.stat().st_mtime >= since:
                return True
        except OSError:
            continue
    return False


def moment_reached(kind: str, state: dict, proc: subprocess.Popen, run_dir: Path, first: bool) -> bool:
    """Whether the moment of a ``kind`` kill has come; ``state`` holds the launch time, the delay
    and what was seen so far (the time of the first worker process, of the first new step)."""
    now = time.monotonic()
    if kind == "startup":
        return now - state["launched"] >= state["delay"]
    if kind == "spawn":
        if state.get("t_spawn") is None and now >= state.get("next_scan", 0.0):
            state["next_scan"] = now + 0.05  # a /proc scan costs milliseconds
            if any(is_worker(pid) for pid in descendants(proc.pid)):
                state["t_spawn"] = now
        return state.get("t_spawn") is not None and now - state["t_spawn"] >= state["delay"]
    if state.get("t_progress") is None:
        if len(rows(run_dir / "metrics.jsonl")) > state["start_rows"] and (not first or complete_checkpoints(run_dir)):
            state["t_progress"] = now
        return False
    if kind == "write":
        return writing_since(run_dir, state["launched_wall"])
    return now - state["t_progress"] >= state["delay"]


def kill_at_random(proc: subprocess.Popen, run_dir: Path, rng: random.Random, kind: str, marker: str,
                   first: bool = False) -> dict:
    """SIGKILL ``proc`` at a moment of ``kind`` (:data:`KINDS`); ``first``: the run's first launch,
    killed only once a checkpoint exists. Returns what happened, orphans included."""
    delay = {"startup": rng.uniform(0.0, 5.0), "spawn": rng.uniform(0.0, 3.0)}.get(kind, rng.uniform(0.0, 2.0))
    state = {"launched": time.monotonic(), "launched_wall": time.time(), "delay": delay,
             "start_rows": len(rows(run_dir / "metrics.jsonl"))}
    deadline = state["launched"] + 300
    while time.monotonic() < deadline and not moment_reached(kind, state, proc, run_dir, first):
        if proc.poll() is not None:
            return {"kind": kind, "killed": False, "exit": proc.returncode, **after_exit(marker)}
        time.sleep(0.002 if kind == "write" else 0.02)
    workers = sum(is_worker(pid) for pid in descendants(proc.pid))
    writing = writing_since(run_dir, state["launched_wall"])
    at_s = time.monotonic() - state["launched"]
    proc.kill()
    proc.wait()
    orphans, gone_s = wait_gone(marker)
    trained = [r for r in rows(run_dir / "metrics.jsonl") if r.get("step", 0) > 0]  # step 0: the first eval
    return {"kind": kind, "killed": True, "at_s": round(at_s, 2), "workers_alive": workers, "during_write": writing,
            "steps_done": len(trained), "orphans": orphans, "gone_after_s": round(gone_s, 2)}


def after_exit(marker: str) -> dict:
    """What a launch that ended by itself left behind."""
    orphans, gone_s = wait_gone(marker)
    return {"orphans": orphans, "gone_after_s": round(gone_s, 2)}


def check(run_dir: Path, steps: int, k: int, kills: list[dict], final_exit: int, planned: int) -> dict:
    ledger = rows(run_dir / "ledger.jsonl")
    metrics = [r for r in rows(run_dir / "metrics.jsonl") if r.get("step", 0) > 0]  # step 0: the first eval
    groups = [g for r in ledger for g in r["consumed"] + r["dropped"]]
    checks = {
        "final_run_finished": final_exit == 0 and (run_dir / "summary.json").exists(),
        "ledger_steps_once": [r["step"] for r in ledger] == list(range(1, steps + 1)),
        "metrics_steps_once": [r["step"] for r in metrics] == list(range(1, steps + 1)),
        "groups_at_most_once": len(groups) == len(set(groups)),
        "staleness_bound_holds": all(r["staleness_token_max"] <= k for r in metrics),
        "no_orphans": not any(kill.get("orphans") for kill in kills),
        # each launch was killed at its planned moment, or ran to the end
        "every_launch_killed_or_finished": all(kill["killed"] or kill["exit"] == 0 for kill in kills),
        "every_planned_kill_landed": sum(kill["killed"] for kill in kills) == planned,  # else raise --steps
    }
    return {"checks": checks, "passed": all(checks.values()), "kills": sum(kill["killed"] for kill in kills),
            "kills_during_checkpoint_write": sum(kill.get("during_write", False) for kill in kills),
            # a group id below the newest one that no step trained on or dropped: lost (or still in
            # flight when the run ended, possible only with several workers finishing out of order)
            "groups_missing_below_max": len(set(range(max(groups, default=-1) + 1)) - set(groups)),
            "groups_trained": sum(len(r["consumed"]) for r in ledger),
            "groups_dropped": sum(len(r["dropped"]) for r in ledger),
            "max_staleness_seen": max((r["staleness_token_max"] for r in metrics), default=None)}


def summary(kills: list[dict]) -> dict:
    """Counts per kill kind, and how long the slowest launch's processes took to follow it."""
    landed = [k for k in kills if k["killed"]]
    return {"kills_by_kind": {kind: sum(k["kind"] == kind for k in landed) for kind in KINDS},
            "kills_with_workers_alive": sum(k["workers_alive"] > 0 for k in landed),
            "max_gone_after_s": max((k["gone_after_s"] for k in kills), default=None),
            "orphans": sum(len(k["orphans"]) for k in kills)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2000)  # long enough that every kill lands
    parser.add_argument("--k", type=int, default=2, help="async.max_staleness (and max_ahead)")
    parser.add_argument("--checkpoint-every", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/resume-campaign")
    parser.add_argument("--cache", default=".asyncrl_cache")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run_dir, rng, kills = out / "run", random.Random(args.seed), []
    started = time.monotonic()
    with (out / "train.log").open("w") as log, (out / "kills.jsonl").open("w") as kill_log:
        final_exit = None
        for i in range(args.kills):
            marker = uuid.uuid4().hex
            proc = launch(args, run_dir, log, marker)
            kind = "step" if i == 0 else KINDS[i % len(KINDS)]
            kills.append(kill_at_random(proc, run_dir, rng, kind, marker, first=i == 0))
            line = json.dumps({"kill": i + 1, **kills[-1]})
            print(line, flush=True)
            kill_log.write(line + "\n")
            if not kills[-1]["killed"]:  # it ended before the kill came: that was the final run
                final_exit = kills[-1]["exit"]
                break
        if final_exit is None:
            marker = uuid.uuid4().hex
            final_exit = launch(args, run_dir, log, marker).wait(timeout=1800)
            kills.append({"kind": "final", "killed": False, "exit": final_exit, **after_exit(marker)})
    result = {**check(run_dir, args.steps, args.k, kills, final_exit, args.kills), **summary(kills),
              "wall_s": round(time.monotonic() - started, 1), "command": "python " + " ".join(sys.argv)}
    (out / "campaign.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
