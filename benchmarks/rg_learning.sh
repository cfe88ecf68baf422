#!/usr/bin/env bash
# reasoning-gym's chain_sum (two terms of 1-2 digits, answer only) on the embedded tiny model:
# sync GRPO (run.mode=sync, prox=behav, loss=ppo) and async A-3PO (the defaults), one run each.
# Usage: benchmarks/rg_learning.sh OUT_DIR [SUFFIX key=value ...]
#   benchmarks/rg_learning.sh benchmarks/results/2026-11-27-rg                  (40 steps, defaults)
#   benchmarks/rg_learning.sh benchmarks/results/2026-11-27-rg -long task.rg_size=20000 \
#       pretrain.steps=1000 trainer.steps=200 eval.every=25
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: rg_learning.sh OUT_DIR [SUFFIX key=value ...]}
suffix=${2:-}
shift $(( $# >= 2 ? 2 : 1 ))
common=(task.name=reasoning_gym "task.rg_tasks=[chain_sum]"
        "task.rg_configs={chain_sum: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 2}}"
        "task.rg_system_prompt=" trainer.steps=40 eval.every=10 eval.n_problems=200 "$@")
train_modes "$out" chain_sum "$suffix" "${common[@]}"
