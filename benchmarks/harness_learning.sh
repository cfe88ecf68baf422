#!/usr/bin/env bash
# The harness examples' learning runs, synchronously (sync GRPO) and asynchronously (A-3PO defaults),
# as benchmarks/train_modes.sh defines them:
# - guess (the default): examples/harness_guess.py, an agent loop over the OpenAI client that plays
#   guess-the-number itself (its return value is the reward), on the guess-agent preset, 40 steps;
# - calculator: examples/harness_agent.py, an agent loop that runs the calculator tool itself, on the
#   calculator-agent preset, 300 steps.
# Endpoint: eval reward (the mean episode reward on 100 held-out rows, the evaluation's episodes
# played by the harness too) at the last step minus step 0.
# Usage: benchmarks/harness_learning.sh OUT_DIR [guess|calculator]     (STEPS=N for another length)
# Then:  python benchmarks/agents_summary.py OUT_DIR --compact harness-<task>-sync harness-<task>-async
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: harness_learning.sh OUT_DIR [guess|calculator]}
examples="$(cd "$(dirname "$0")/.." && pwd)/examples"
case ${2:-guess} in
  guess) train_modes "$out" harness-guess "" --config guess-agent env.name=none \
           "env.harness=$examples/harness_guess.py:agent" trainer.steps="${STEPS:-40}" eval.every=10 ;;
  calculator) train_modes "$out" harness-calculator "" --config calculator-agent "env.tools=[]" \
           "env.harness=$examples/harness_agent.py:agent" trainer.steps="${STEPS:-300}" eval.every=20 ;;
  *) echo "harness_learning.sh: unknown task ${2} (guess, calculator)" >&2; exit 2 ;;
esac
