#!/usr/bin/env bash
# GEM's GuessTheNumber (easy: 1..10 within 4 turns) on the embedded tiny model, whose warm start
# learns from a scripted expert's games (noisy binary search): sync GRPO (run.mode=sync,
# prox=behav, loss=ppo) and async A-3PO (the defaults), one run each.
# Usage: benchmarks/gem_learning.sh OUT_DIR [key=value ...]
set -euo pipefail
out=${1:?usage: gem_learning.sh OUT_DIR [key=value ...]}
shift
common=(task=gem env.name=gem:game:GuessTheNumber-v0-easy model.max_positions=512 env.episode_tokens=256
        trainer.steps=40 eval.every=10 eval.n_problems=200 run.out_dir="$out" run.progress=false
        "run.report_to=[]" "$@")
mkdir -p "$out"
for mode in sync async; do
  case $mode in
    sync) extra=(run.mode=sync trainer.prox=behav loss.name=ppo) ;;
    async) extra=(run.mode=async) ;;
  esac
  name="guess_the_number-$mode"
  [ -f "$out/$name/summary.json" ] && continue
  echo "== $name" >&2
  asyncrl train "${common[@]}" "${extra[@]}" run.name="$name" > "$out/$name.log" 2>&1
done
