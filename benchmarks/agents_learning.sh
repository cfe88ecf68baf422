#!/usr/bin/env bash
# The agents' learning runs: each built-in agent task (calculator tool, guess the number) trained on
# the embedded tiny model, synchronously (sync GRPO: run.mode=sync, prox=behav, loss=ppo) and
# asynchronously with A-3PO (the defaults: async, K=4, max_ahead=1, loglinear prox, decoupled loss).
# Endpoint: eval reward (mean episode reward on 100 held-out rows) after the last step vs before.
# Usage: benchmarks/agents_learning.sh OUT_DIR [task ...]   (tasks: calculator guess; default both)
#        STEPS=120 benchmarks/agents_learning.sh OUT_DIR calculator   (a longer run: names end -120)
#        LR=2e-4 benchmarks/agents_learning.sh OUT_DIR calculator     (another lr: names end -lr2e-4)
# Then:  python benchmarks/agents_summary.py OUT_DIR   (writes OUT_DIR/README.md)
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: agents_learning.sh OUT_DIR [task ...]}
shift
tasks=${*:-calculator guess}
steps=(); suffix=""
if [ -n "${STEPS:-}" ]; then steps=(trainer.steps="$STEPS" eval.every=20); suffix="-$STEPS"; fi
if [ -n "${LR:-}" ]; then steps+=(trainer.lr="$LR"); suffix="$suffix-lr$LR"; fi
for task in $tasks; do
  train_modes "$out" "$task" "$suffix" --config "$task-agent" "${steps[@]}"
done
