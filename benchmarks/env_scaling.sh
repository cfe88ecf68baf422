#!/usr/bin/env bash
# Episodes in flight from 64 to 1,024: sync steps of the guess game (guess-agent preset) whose every
# reset and step answers after a lognormal delay (median 0.5 s, σ = 1), with 16, 64 and 256 prompts
# × 4 samples a step: a step's episodes are all in flight at once. Prints, per size, the mean and
# longest episode duration, the step time and the scheduler's own numbers (steps after the first).
#   benchmarks/env_scaling.sh OUT_DIR STEPS [extra overrides...]
set -euo pipefail
out=$1 steps=$2
shift 2
mkdir -p "$out"
for prompts in 16 64 256; do
  name="scale-p$prompts"
  if [ ! -f "$out/$name/summary.json" ]; then
    echo "== $name $(date -u +%H:%M:%S)" >&2
    asyncrl train --config guess-agent env.name=latency "env.kwargs={inner: guess, median_s: 0.5, sigma: 1.0}" \
      run.mode=sync trainer.prox=behav loss.name=ppo rollout.prompts_per_step="$prompts" rollout.samples_per_prompt=4 \
      trainer.steps="$steps" eval.n_problems=0 run.out_dir="$out" run.name="$name" run.progress=false \
      "run.report_to=[]" "$@" > "$out/$name.log" 2>&1
  fi
done
python - "$out" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
keys = ["episode/count", "episode/duration_mean_s", "episode/duration_max_s", "step_time_s", "episode/env_wait_s",
        "episode/decode_s", "episode/decodes", "train_time_s", "episode/calls_in_flight_max"]
table = {}
for prompts in (16, 64, 256):
    rows = [json.loads(l) for l in (out / f"scale-p{prompts}" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] > 1]
    table[prompts * 4] = {k: statistics.fmean(r[k] for r in rows) for k in keys}
(out / "scaling.json").write_text(json.dumps(table, indent=1) + "\n")
print("| episodes in flight | episode s (mean) | episode s (max) | step s | env wait s | decode s | engine calls | train s |")
print("|---|---|---|---|---|---|---|---|")
for n, t in table.items():
    print(f"| {n} | {t['episode/duration_mean_s']:.2f} | {t['episode/duration_max_s']:.2f} | {t['step_time_s']:.2f} | "
          f"{t['episode/env_wait_s']:.2f} | {t['episode/decode_s']:.2f} | {t['episode/decodes']:.0f} | {t['train_time_s']:.2f} |")
PY
