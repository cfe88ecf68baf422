"""Watching a run, end to end: a tiny `asyncrl train` with stderr to a pipe writes one plain line
per step (and its start-up phases), step 0's eval in metrics.jsonl and TensorBoard, namespaced
tracker names, a staleness histogram, sample completions and report.html."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402

# an untrained warm start (pretrain.steps=0) builds in a second; this test watches, it does not learn
FAST = [a for a in TINY if not a.startswith(("pretrain.steps", "run.progress"))] + ["pretrain.steps=0"]


def test_plain_log_lines_step_zero_completions_and_report(tmp_path, cache):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *FAST, "run.name=watch",
                           f"policy.cache_dir={cache}", "run.log_completions_every=2", "trainer.steps=3"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) == 1  # stdout: the summary line only
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr  # no live display outside a terminal
    lines = proc.stderr.strip().splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["0/3", "1/3", "2/3", "3/3"]
    assert "eval" in steps[0] and "eval" in steps[2] and "eval" not in steps[1]
    for line in steps[1:]:
        assert re.search(r"reward \d\.\d{3}  .*stale \d\.\d/\d  wait \d+\.\d\ds  samples/s [\d.]+ .*elapsed \d:", line)
    assert any("loading model" in line for line in lines) and any("first batch" in line for line in lines)

    run_dir = tmp_path / "runs" / "watch"
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[0]["eval_reward"] == summary["initial_eval_reward"]
    for row in rows[1:]:  # sync: every token is fresh, so the whole histogram sits at lag 0
        assert row["staleness_token_hist"] == [row["gen_tokens"]]

    samples = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == [2, 3]
    assert all(s["prompt"] and s["version_min"] == s["version_max"] == s["step"] - 1 for s in samples)

    page = (run_dir / "report.html").read_text()
    # reward, reward per function, training signals, staleness, time split, utilisation
    assert page.count("data:image/png;base64,") == 6 and samples[-1]["prompt"].split("\n")[0][:20] in page

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"histograms": 0}).Reload()
    assert [e.step for e in events.Scalars("eval/reward")] == [0, 2, 3]
    assert {"rollout/reward_mean", "staleness/token_mean", "timing/trainer_wait_s", "loss/loss"} <= set(
        events.Tags()["scalars"])
    assert not [t for t in events.Tags()["scalars"] if "/" not in t or t.startswith("other/")]
    assert [e.step for e in events.Histograms("staleness/token_hist")] == [1, 2, 3]
