"""Kill -9 campaign for exact resume: one async run, SIGKILLed N times at random moments (some of them
while a checkpoint is being written), resumed with ``asyncrl train --resume`` after each kill,
then run to the end. Checks that

* every resume starts and makes progress (or is killed again), and the last one finishes;
* the ledger holds every step once and every prompt group at most once (trained on or dropped):
  no group is lost to a kill and none is trained on twice;
* the staleness bound K holds in every step, before and after each resume;
* no process of the run outlives it.

    python benchmarks/resume_campaign.py --kills 20 --out runs/resume-campaign

Prints one JSON summary (also written to ``<out>/campaign.json``); exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


def launch(args, run_dir: Path, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "asyncrl.cli", "train"]
    if (run_dir / "config.yaml").exists():
        cmd += ["--resume", str(run_dir)]
    else:
        cmd += [*TINY, "run.mode=async", f"async.max_staleness={args.k}", f"async.max_ahead={args.k}",
                f"trainer.steps={args.steps}", f"run.checkpoint_every={args.checkpoint_every}",
                f"run.out_dir={run_dir.parent}", f"run.name={run_dir.name}", f"policy.cache_dir={args.cache}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(cmd, stdout=log, stderr=log, env=env)


def kill_at_random(proc: subprocess.Popen, run_dir: Path, rng: random.Random, during_write: bool) -> dict:
    """SIGKILL ``proc`` after it trained at least one new step; ``during_write``: the moment a
    checkpoint folder is being written. Returns what happened."""
    start_rows = len(rows(run_dir / "metrics.jsonl"))
    delay = rng.uniform(0.0, 2.0)
    deadline, t_progress = time.monotonic() + 300, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return {"killed": False, "exit": proc.returncode}
        n = len(rows(run_dir / "metrics.jsonl"))
        if n > start_rows and t_progress is None:
            t_progress = time.monotonic()
        if during_write and t_progress is not None and list((run_dir / "checkpoints").glob("*.tmp")):
            break
        if not during_write and t_progress is not None and time.monotonic() - t_progress >= delay:
            break
        time.sleep(0.002 if during_write else 0.02)
    children = descendants(proc.pid)
    writing = bool(list((run_dir / "checkpoints").glob("*.tmp")))
    proc.kill()
    proc.wait()
    time.sleep(10)  # the bound the runtime promises for its workers to follow the trainer
    trained = [r for r in rows(run_dir / "metrics.jsonl") if r.get("step", 0) > 0]  # step 0: the first eval
    return {"killed": True, "during_write": writing, "steps_done": len(trained),
            "orphans": sorted(pid for pid in children if alive(pid))}


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
        # each launch was killed after training a new step, or ran to the end
        "every_resume_progressed": all(kill["killed"] or kill["exit"] == 0 for kill in kills),
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
    with (out / "train.log").open("w") as log:
        final_exit = None
        for i in range(args.kills):
            proc = launch(args, run_dir, log)
            kills.append(kill_at_random(proc, run_dir, rng, during_write=i % 4 == 3))
            print(json.dumps({"kill": i + 1, **kills[-1]}), flush=True)
            if not kills[-1]["killed"]:  # it ended before the kill came: that was the final run
                final_exit = kills[-1]["exit"]
                break
        if final_exit is None:
            final_exit = launch(args, run_dir, log).wait(timeout=1800)
    result = {**check(run_dir, args.steps, args.k, kills, final_exit, args.kills), "wall_s": time.monotonic() - started,
              "command": "python " + " ".join(sys.argv)}
    (out / "campaign.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
