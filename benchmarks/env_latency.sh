#!/usr/bin/env bash
# Environments with a remote environment's latency: sync GRPO against async A-3PO on the guess game
# (guess-agent preset) whose every reset and step answers after a lognormal delay (env.name=latency,
# median MEDIAN_S, σ = 1), paired repeats in ABAB order (identical work times ±13 % apart on these
# machines). Each run: 8 prompts × 4 samples, STEPS steps, 20 eval problems. Runs a summary at the end.
#   benchmarks/env_latency.sh OUT_DIR "MEDIANS" REPEATS STEPS [extra overrides for both arms...]
# e.g. benchmarks/env_latency.sh benchmarks/results/2026-12-05-env-latency "0.1 0.5" 3 6
set -euo pipefail
out=$1 medians=$2 repeats=$3 steps=$4
shift 4
mkdir -p "$out"
run() {  # run NAME ARGS...
  local name=$1
  shift
  [ -f "$out/$name/summary.json" ] && return 0
  echo "== $name $(date -u +%H:%M:%S)" >&2
  asyncrl train --config guess-agent env.name=latency "$@" rollout.prompts_per_step=8 \
    rollout.samples_per_prompt=4 trainer.steps="$steps" eval.n_problems=20 eval.every=0 \
    run.out_dir="$out" run.name="$name" run.progress=false "run.report_to=[]" > "$out/$name.log" 2>&1
}
for median in $medians; do
  kwargs="{inner: guess, median_s: $median, sigma: 1.0}"
  for r in $(seq 1 "$repeats"); do  # ABAB: sync first in odd pairs, async first in even ones
    arms=(sync async)
    [ $((r % 2)) -eq 0 ] && arms=(async sync)
    for arm in "${arms[@]}"; do
      case $arm in
        sync) run "m$median-sync-r$r" "env.kwargs=$kwargs" run.mode=sync trainer.prox=behav loss.name=ppo "$@" ;;
        async) run "m$median-async-r$r" "env.kwargs=$kwargs" run.mode=async async.max_staleness=2 \
                 async.n_workers=2 "$@" ;;
      esac
    done
  done
done
python "$(dirname "$0")/env_latency_summary.py" "$out"
