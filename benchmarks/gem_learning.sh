#!/usr/bin/env bash
# GEM's GuessTheNumber (easy: 1..10 within 4 turns) on the embedded tiny model, whose warm start
# learns from a scripted expert's games (noisy binary search): sync GRPO (run.mode=sync,
# prox=behav, loss=ppo) and async A-3PO (the defaults), one run each.
# Usage: benchmarks/gem_learning.sh OUT_DIR [key=value ...]
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: gem_learning.sh OUT_DIR [key=value ...]}
shift
common=(task=gem env.name=gem:game:GuessTheNumber-v0-easy model.max_positions=512 env.episode_tokens=256
        trainer.steps=40 eval.every=10 eval.n_problems=200 "$@")
train_modes "$out" guess_the_number "" "${common[@]}"
