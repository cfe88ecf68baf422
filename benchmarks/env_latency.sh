#!/usr/bin/env bash
# Agents whose environments take time: sync GRPO against async A-3PO at staleness K = 2 and 4 (arms
# async2, async4: the default W = async.max_ahead = 1, one batch generated ahead; arms asyncw2,
# asyncw4: W = K, up to K batches ahead) and against sync GRPO in lock-step rounds (arm rounds: what
# the ready schedule costs or saves), on
#   guess:      the guess game (guess-agent preset) whose every reset and step answers after a
#               lognormal delay (env.name=latency, median MEDIAN s, σ = 1);
#   calculator: the calculator agent (calculator-agent preset) whose calculator tool is an HTTP
#               service on 127.0.0.1 answering after the same delays (benchmarks/remote_calculator.py).
# Paired repeats in ABAB order (arms in order in odd repeats, reversed in even ones): identical work
# times ±13 % apart on these machines, so only paired ratios are compared. Each run: 8 prompts ×
# 4 samples a step, STEPS steps, no evaluation (eval.n_problems=0: only speed is measured here).
# Arm trl (calculator only): TRL's GRPOTrainer(environment_factory=...) on the same agent, tool and
# service (benchmarks/trl_env_peer.py), the peer beside asyncrl's sync.
#   benchmarks/env_latency.sh OUT_DIR guess|calculator "MEDIANS" REPEATS STEPS "ARMS" [overrides...]
# e.g. benchmarks/env_latency.sh benchmarks/results/2026-12-05-env-latency guess "0.5" 3 6 "sync async2 async4"
#      benchmarks/env_latency.sh OUT calculator "0.1" 1 3 "sync trl"
set -euo pipefail
out=$1 suite=$2 medians=$3 repeats=$4 steps=$5 arms=$6
shift 6
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
mkdir -p "$out"
run() {  # run MEDIAN NAME ARGS...   (a NAME of the trl arm trains with TRL instead of asyncrl)
  local median=$1 name=$2 trainer=(asyncrl train)
  shift 2
  [[ $name == *-trl-r* ]] && trainer=(python -m benchmarks.trl_env_peer)
  [ -f "$out/$name/summary.json" ] && return 0
  echo "== $name $(date -u +%H:%M:%S)" >&2
  # the machine's load average at the start and end of each run, beside its timings
  cut -d' ' -f1-3 /proc/loadavg > "$out/$name.load"
  local common=(rollout.prompts_per_step=8 rollout.samples_per_prompt=4 trainer.steps="$steps" eval.n_problems=0
                run.out_dir="$out" run.name="$name" run.progress=false "run.report_to=[]")
  case $suite in
    guess) asyncrl train --config guess-agent env.name=latency \
             "env.kwargs={inner: guess, median_s: $median, sigma: 1.0}" "${common[@]}" "$@" > "$out/$name.log" 2>&1 ;;
    calculator) PYTHONPATH="$root:$here${PYTHONPATH:+:$PYTHONPATH}" python "$here/remote_calculator.py" \
                  --median-s "$median" --sigma 1.0 -- "${trainer[@]}" --config calculator-agent \
                  "env.tools=[remote_calculator:calculator]" "${common[@]}" "$@" > "$out/$name.log" 2>&1 ;;
  esac
  cut -d' ' -f1-3 /proc/loadavg >> "$out/$name.load"
}
for median in $medians; do
  for r in $(seq 1 "$repeats"); do
    order=($arms)
    if [ $((r % 2)) -eq 0 ]; then order=($(printf '%s\n' "${order[@]}" | tac)); fi
    for arm in "${order[@]}"; do
      case $arm in
        sync) run "$median" "$suite-m$median-sync-r$r" run.mode=sync trainer.prox=behav loss.name=ppo "$@" ;;
        rounds) run "$median" "$suite-m$median-rounds-r$r" run.mode=sync trainer.prox=behav loss.name=ppo \
                  env.schedule=rounds "$@" ;;
        asyncw*) run "$median" "$suite-m$median-$arm-r$r" run.mode=async async.max_staleness="${arm#asyncw}" \
                   async.max_ahead="${arm#asyncw}" "$@" ;;
        async*) run "$median" "$suite-m$median-$arm-r$r" run.mode=async async.max_staleness="${arm#async}" "$@" ;;
        trl) [ "$suite" = calculator ] || { echo "env_latency.sh: arm trl runs the calculator suite only" >&2; exit 2; }
             run "$median" "$suite-m$median-trl-r$r" "$@" ;;
      esac
    done
  done
done
python "$here/env_latency_summary.py" "$out"
