#!/usr/bin/env bash
# The GPU checks of one lent GPU session, in priority order, inside one time budget:
#   bash benchmarks/gpu_check.sh OUT_DIR [BUDGET_S]      # BUDGET_S defaults to 560 (one 10-minute call)
#
#   1_trainer   one Learner.step at the recipe's shape (256 x (128 + 512), 8 minibatches, micro-batch 8,
#               gradient checkpointing, bf16 autocast) at 0.5B and 1.5B: time, peak memory, proximal cost
#   2_channel   the CUDA weight channel at 1.5B: publish (trainer) and pull (a worker process)
#   3_nockpt    the 1.5B step again with micro-batches and no gradient checkpointing
#   4_mismatch  log-prob mismatch at 1.5B between the bf16 generator and the trainer (staleness 0)
#   5_a3po      a short `bench a3po --config gpu-embedded`: sync and async A-3PO on the transformers
#               engine, the overlap against the ideal computed from sync's generation and training time
#   6_vllm      a vLLM smoke test (bf16, head_dim 128) only when vLLM is importable there
#   7_pytest    pytest -m gpu
#
# Every section writes its own files (N_name.json/.log/.status) and the folder is re-packed into
# OUT_DIR.tgz (or $GPU_CHECK_TGZ) after each one, so a run cut off at any point keeps what finished. A section
# gets at most its own cap and never more than the budget has left. Needs asyncrl importable and a
# CUDA device; GPU_CHECK_SMOKE=1 runs every section at toy shapes on the CPU (the script's own test).
set -u
out=${1:?output directory}
budget=${2:-560}
mkdir -p "$out"
start=$SECONDS
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ASYNCRL_CACHE=${ASYNCRL_CACHE:-/tmp/asyncrl-cache}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}

if [[ ${GPU_CHECK_SMOKE:-0} == 1 ]]; then
  RT=("$py" "$here/gpu_runtime.py" --device cpu --rows 8 --prompt 8 --completion 8 --decode-rows 4
      --decode-tokens 4 --minibatches 2 --micro-batch 4 --reps 1)
  SMALL=tiny; LARGE=tiny
  A3PO=(--config a3po trainer.steps=2 pretrain.steps=2 eval.every=0 eval.n_problems=8 eval.samples=1
        rollout.prompts_per_step=2 rollout.samples_per_prompt=2)
  PYTEST_ARGS=(--collect-only -q)
else
  RT=("$py" "$here/gpu_runtime.py" --device cuda --reps 2)
  SMALL=0.5B; LARGE=1.5B
  A3PO=(--config gpu-embedded policy.torch_threads=0 trainer.steps=20 pretrain.steps=100 eval.every=0 eval.n_problems=256 eval.samples=1)
  PYTEST_ARGS=(-q -rs -n 6 -p no:cacheprovider)
fi

left() { echo $(( budget - (SECONDS - start) )); }
# cap CAP: the seconds a section may take, its own cap or what the budget has left (minus packing)
cap() { local l; l=$(( $(left) - 10 )); (( l < $1 )) && echo "$l" || echo "$1"; }
tgz=${GPU_CHECK_TGZ:-$out.tgz}  # outside OUT_DIR, so the folder never changes while it is packed
pack() { tar czf "$tgz.tmp" -C "$out" . && mv "$tgz.tmp" "$tgz"; }
# section NAME CAP CMD...: run CMD under the cap, record its exit and time in NAME.status, re-pack
section() {
  local name=$1 want=$2 t0=$SECONDS c; shift 2
  c=$(cap "$want")
  if (( c < 15 )); then echo "skipped: ${c}s of the budget left" > "$out/$name.status"; pack; return; fi
  echo "== $name (up to ${c}s)"
  timeout --kill-after=10 "$c" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "exit $rc after $(( SECONDS - t0 ))s (cap ${c}s)$( (( rc == 124 || rc == 137 )) && echo ', timed out')" \
      > "$out/$name.status"
  cat "$out/$name.status"; tail -5 "$out/$name.log"
  pack
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  echo "commit ${GPU_CHECK_COMMIT:-unknown}"; date -u; } > "$out/0_device.txt" 2>&1
cat "$out/0_device.txt"

section 1_trainer 170 "${RT[@]}" --size "$SMALL" "$LARGE" --section trainer --out "$out/1_trainer.json"
section 2_channel 50 "${RT[@]}" --size "$LARGE" --section weights --out "$out/2_channel.json"
section 3_nockpt 80 "${RT[@]}" --size "$LARGE" --section trainer --no-grad-ckpt --out "$out/3_nockpt.json"
section 4_mismatch 50 "${RT[@]}" --size "$LARGE" --section mismatch --out "$out/4_mismatch.json"
section 5_a3po 170 env PYTHONPATH="$(dirname "$here")${PYTHONPATH:+:$PYTHONPATH}" "$py" -m benchmarks a3po --seeds 1 --methods sync,async-loglinear \
    --out "$out/5_a3po" --runs-dir /tmp/gpu-check-a3po "${A3PO[@]}"
if "$py" -c "import vllm" 2>/dev/null; then
  section 6_vllm 90 "${RT[@]}" --size "$LARGE" --section decode --out "$out/6_vllm.json"
else
  echo "vllm is not importable on this machine: nothing run" > "$out/6_vllm.status"; pack
fi
section 7_pytest 150 "$py" -m pytest -m gpu "${PYTEST_ARGS[@]}" "$here/../tests"
echo "done in $(( SECONDS - start ))s of ${budget}s; everything is in $out (and $tgz)"
