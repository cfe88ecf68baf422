#!/usr/bin/env bash
# Reward lifts on environments from the ecosystem: a GEM game and two reasoning-gym tasks, each
# trained on the embedded tiny model synchronously (sync GRPO) and asynchronously (A-3PO, the
# defaults). What is run, measured and tested is written down in OUT_DIR/prereg.md before the runs.
# Usage: benchmarks/ecosystem_lifts.sh OUT_DIR [run ...]   (runs: gem-guess rg-legs rg-family; default these)
#        rg-legs1: the fallback that prereg.md's addendum adds
# Then:  python benchmarks/agents_summary.py OUT_DIR   (writes OUT_DIR/README.md's table)
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: ecosystem_lifts.sh OUT_DIR [run ...]}
shift
runs=${*:-gem-guess rg-legs rg-family}
common=(trainer.steps=50 trainer.lr=5e-5 eval.every=25 eval.n_problems=200 run.seed=0)
for run in $runs; do
  case $run in
    gem-guess) task=(task=gem env.name=gem:game:GuessTheNumber-v0-hard env.max_turns=7 env.turn_discount=0.8
                     env.turn_tokens=12 env.episode_tokens=320 model.max_positions=512) ;;
    rg-legs) task=(task=reasoning_gym task.rg_tasks=[leg_counting] task.rg_system_prompt=''
                   'task.rg_configs={leg_counting: {min_animals: 1, max_animals: 2, max_instances: 3}}') ;;
    rg-family) task=(task=reasoning_gym task.rg_tasks=[family_relationships] task.rg_system_prompt=''
                     'task.rg_configs={family_relationships: {min_family_size: 4, max_family_size: 5}}') ;;
    rg-legs1) task=(task=reasoning_gym task.rg_tasks=[leg_counting] task.rg_system_prompt=''
                    'task.rg_configs={leg_counting: {min_animals: 1, max_animals: 1, min_instances: 1, max_instances: 2}}') ;;
    *) echo "ecosystem_lifts.sh: unknown run $run (gem-guess rg-legs rg-family rg-legs1)" >&2; exit 2 ;;
  esac
  train_modes "$out" "$run" "" "${task[@]}" "${common[@]}"
done
