#!/usr/bin/env bash
# Reward lifts from a short warm start: GEM's GuessTheNumber-v0-easy and reasoning-gym's
# spell_backward on the embedded tiny model, each trained synchronously (sync GRPO) and
# asynchronously (A-3PO, the defaults) with RL seeds 1 and 2. The supervised warm start is cut short
# (25 and 100 steps) so that RL has something within the model's reach to learn; what is run,
# measured and tested is written down in OUT_DIR/prereg.md before the runs.
# Usage: benchmarks/short_start_lifts.sh OUT_DIR [config ...]   (configs: gem-short rg-spell; default both)
# Then:  python benchmarks/agents_summary.py OUT_DIR   (writes OUT_DIR/README.md's table)
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: short_start_lifts.sh OUT_DIR [config ...]}
shift
configs=${*:-gem-short rg-spell}
for config in $configs; do
  case $config in
    gem-short) args=(task=gem env.name=gem:game:GuessTheNumber-v0-easy model.max_positions=512
                     env.episode_tokens=256 pretrain.steps=25 trainer.steps=50 eval.every=25 eval.n_problems=200) ;;
    rg-spell) args=(task=reasoning_gym task.rg_tasks=[spell_backward] task.rg_system_prompt=''
                    'task.rg_configs={spell_backward: {min_word_len: 3, max_word_len: 5}}' task.rg_size=5000
                    model.vocab_size=300 pretrain.steps=100 trainer.steps=150 eval.every=50 eval.n_problems=500) ;;
    *) echo "short_start_lifts.sh: unknown config $config (gem-short rg-spell)" >&2; exit 2 ;;
  esac
  for seed in 1 2; do
    train_modes "$out" "$config" "-s$seed" "${args[@]}" trainer.lr=5e-5 pretrain.seed=0 run.seed="$seed"
  done
done
