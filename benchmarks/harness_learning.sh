#!/usr/bin/env bash
# The harness example's learning runs: examples/harness_agent.py (an agent loop over the OpenAI
# client: it runs the calculator tool itself) trained through the run's endpoint on the calculator
# task, synchronously (sync GRPO) and asynchronously (A-3PO defaults), as benchmarks/train_modes.sh
# defines them. Endpoint: eval reward (the mean episode reward on 100 held-out rows, the evaluation's
# episodes played by the harness too) at the last step minus step 0.
# Usage: benchmarks/harness_learning.sh OUT_DIR        (STEPS=N for another length; default 300)
# Then:  python benchmarks/agents_summary.py OUT_DIR --compact harness-calculator-sync harness-calculator-async
set -euo pipefail
source "$(dirname "$0")/train_modes.sh"
out=${1:?usage: harness_learning.sh OUT_DIR}
example="$(cd "$(dirname "$0")/.." && pwd)/examples/harness_agent.py"
train_modes "$out" harness-calculator "" --config calculator-agent "env.tools=[]" "env.harness=$example:agent" \
  trainer.steps="${STEPS:-300}" eval.every=20
