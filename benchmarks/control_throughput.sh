#!/bin/bash
# Env steps/s of benchmarks.control's PPO (buffer N = 1) against CleanRL's ppo_continuous_action.py on
# the same MuJoCo envs, one core (taskset -c 0) and one torch thread each, run one after another.
#
#   benchmarks/control_throughput.sh /path/to/cleanrl/ppo_continuous_action.py [steps] [reps]
#
# CleanRL is not a dependency: take cleanrl/ppo_continuous_action.py from github.com/vwxyzjn/cleanrl
# (the run in benchmarks/results/2026-11-25-control used commit 016ca33) and `pip install tyro`.
# With gymnasium 1.x its TransformObservation call needs the observation space as a third argument
# (`..., lambda obs: np.clip(obs, -10, 10), env.observation_space)`); nothing else was changed.
# Stop anything else that runs on the machine first: the numbers are wall-clock rates.
set -euo pipefail
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }  # keeps a venv's python link
CLEANRL=$(absolute "${1:?path to cleanrl ppo_continuous_action.py}")
STEPS=${2:-61440}
REPS=${3:-2}
PY=$(absolute "${PYTHON:-.venv/bin/python}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the checkout: python -m benchmarks.control imports from it
OUT=$(mktemp -d)
for rep in $(seq "$REPS"); do
  for env in Hopper-v5 HalfCheetah-v5; do
    echo -n "asyncrl 8x256  $env rep$rep  "
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 taskset -c 0 "$PY" -m benchmarks.control "out_dir=$OUT/asyncrl-$env-$rep" "env_id=$env" \
      arm=ppo buffer_capacity=1 seed=1 "total_steps=$STEPS" | "$PY" -c "import json,sys; print(round(json.load(sys.stdin)['env_steps_per_s']))"
    for layout in "1 2048" "8 256"; do
      set -- $layout
      echo -n "cleanrl ${1}x$2 $env rep$rep  "
      (cd "$OUT" && OMP_NUM_THREADS=1 taskset -c 0 "$PY" "$CLEANRL" --env-id "$env" --total-timesteps "$STEPS" \
        --no-cuda --seed 1 --num-envs "$1" --num-steps "$2" 2>/dev/null | grep SPS | tail -1 | cut -d' ' -f2)
    done
  done
done
rm -rf "$OUT"
