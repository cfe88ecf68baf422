#!/usr/bin/env bash
# The GPU checks of one lent GPU session (15 minutes of device time, one H100/H200, no vLLM or Ray
# there, wheels carried in .whl: benchmarks/gpu_prepare.sh), in priority order, inside one budget:
#   bash benchmarks/gpu_check.sh OUT_DIR [BUDGET_S]      # BUDGET_S defaults to 420 (the caps sum to 410)
#
# 420 s leave, inside one 540 s call and a 15-minute loan, the machine's start and one rerun.
# Sections, what has never run on a GPU first (cap in seconds):
#   1_vllm       90  only when vLLM is importable: asyncrl's vLLM engine (rollout/vllm_engine.py) on a
#                    small model through tests/models/test_vllm_{engine,sizes}.py on CUDA (weight reload equals
#                    the transformers log-probs, single- and multi-token stop strings, the memory share
#                    that rollout/vllm_memory.py sized), then a 2-step run with vLLM in each mode
#                    (tests/gpu/test_gpu_runtime.py::test_vllm_engine_run_on_cuda)
#   2_pytest    135  pytest -m gpu, the vLLM cases left to 1_vllm
#   3_fsdp       40  only when >= 2 GPUs are visible: torchrun, 2 FSDP2 trainer ranks over NCCL, 3 steps
#   4_a3po      110  `bench a3po --config gpu-embedded`, sync and async A-3PO on the transformers engine,
#                    the overlap against the ideal (one measurement so far: 2026-11-27-gpu run2)
#   5_mismatch   35  log-prob mismatch at 1.5B, bf16 generator against the trainer at staleness 0
#                    (one measurement so far: 2026-11-27-gpu run1)
#
# Dropped, each measured on two lent H200 sessions already (benchmarks/results/):
#   the trainer step's time and peak memory at 0.5B and 1.5B: 2026-11-26-gpu (trainer_memory.py,
#     16 x 1,024, both LM-head paths) and 2026-11-27-gpu run1/1_trainer.json (the recipe's 256 x 640;
#     that shape and its recompute-against-A-3PO proximal cost were measured that once);
#   the CUDA weight channel, publish + pull: 2026-11-26-gpu (0.5B, 9.3 ms) and 2026-11-27-gpu
#     run1/2_channel.json (1.5B, 13.5 ms);
#   the step without gradient checkpointing: 2026-11-26-gpu (trainer_memory.py runs none, 0.5B and
#     1.5B) and 2026-11-27-gpu run1/3_nockpt.json (1.5B, micro-batches).
#   `python benchmarks/gpu_runtime.py --section trainer weights` still measures them by hand.
#
# Every section writes its own files (N_name.log/.status, .json where it has one); after each one the
# folder is re-packed into OUT_DIR.tgz ($GPU_CHECK_TGZ) and a few lines a section go to
# OUT_DIR.summary.txt ($GPU_CHECK_SUMMARY): two files, so the device's 8 returned files hold them
# with room to spare, and a run cut off at any point keeps what finished. A section gets at most its
# own cap and never more than the budget has left. Needs asyncrl importable and a CUDA device.
#   GPU_CHECK_SMOKE=1  every section at toy shapes on the CPU (the script's own test)
#   GPU_CHECK_DRY=1    print the plan (section, cap, command) and run nothing
#   GPU_CHECK_CAP_SCALE=N  every cap times N (default 3 with GPU_CHECK_SMOKE=1: two loaded CPU cores, else 1)
#   GPU_CHECK_GPUS=N   the GPUs counted for 3_fsdp (default: torch.cuda.device_count())
#   GPU_CHECK_COMMIT   the commit recorded in 0_device.txt
# The device call: docs/runtime.md ("The GPU check"); benchmarks/gpu_prepare.sh prints it.
set -u
out=${1:?output directory}
budget=${2:-420}
mkdir -p "$out" && out=$(cd "$out" && pwd)
rm -rf "$out"/[0-9]_*  # a rerun into the same folder starts clean: no earlier section's files
start=$SECONDS
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ASYNCRL_CACHE=${ASYNCRL_CACHE:-/tmp/asyncrl-cache}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
py=${PYTHON:-python3}
smoke=${GPU_CHECK_SMOKE:-0}
dry=${GPU_CHECK_DRY:-0}
scale=${GPU_CHECK_CAP_SCALE:-$(( smoke == 1 ? 3 : 1 ))}
tgz=${GPU_CHECK_TGZ:-$out.tgz}  # outside OUT_DIR, so the folder never changes while it is packed
summary=${GPU_CHECK_SUMMARY:-$out.summary.txt}
export PYTHONPATH="$root/src:$root${PYTHONPATH:+:$PYTHONPATH}"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the tests' tiny run (tests/foundation/test_e2e_train.py's TINY, 3 steps)
TINY=(model.hidden_size=64 model.num_layers=2 model.num_heads=4 model.num_kv_heads=2 model.intermediate_size=128
      model.vocab_size=400 task.arithmetic.min_steps=1 task.arithmetic.max_steps=1 task.arithmetic.ops=+
      task.arithmetic.max_value=9 task.arithmetic.n_train=70 task.arithmetic.n_eval=4
      pretrain.batch_size=32 pretrain.lr=0.003 pretrain.warmup_steps=5 pretrain.alt_style_frac=0
      rollout.prompts_per_step=2 rollout.samples_per_prompt=4 rollout.max_new_tokens=16 trainer.steps=3
      trainer.n_minibatches=2 trainer.lr=0.001 eval.every=0 run.progress=false run.mode=sync
      run.out_dir=/tmp/gpu-check-fsdp run.name=fsdp-$$ policy.cache_dir=/tmp/gpu-check-fsdp/cache)
VLLM_TESTS=(tests/models/test_vllm_engine.py tests/models/test_vllm_sizes.py -k "not train_with")  # train_with: CPU-device runs

if [[ $smoke == 1 ]]; then
  RT=("$py" "$here/gpu_runtime.py" --device cpu --rows 8 --prompt 8 --completion 8 --decode-rows 4
      --decode-tokens 4 --minibatches 2 --micro-batch 4 --reps 1)
  LARGE=tiny; DEVICE=cpu
  A3PO=(--config a3po trainer.steps=2 pretrain.steps=2 eval.every=0 eval.n_problems=8 eval.samples=1
        rollout.prompts_per_step=2 rollout.samples_per_prompt=2)
  PYTEST_ARGS=(--collect-only -q)
  TINY+=(pretrain.steps=20)  # the tests' 200 would take minutes on two CPU ranks
else
  RT=("$py" "$here/gpu_runtime.py" --device cuda --reps 2)
  LARGE=1.5B; DEVICE=cuda
  A3PO=(--config gpu-embedded policy.torch_threads=0 trainer.steps=20 pretrain.steps=100 eval.every=0
        eval.n_problems=256 eval.samples=1)
  PYTEST_ARGS=(-q -rs -n 6 -p no:cacheprovider)
  TINY+=(pretrain.steps=200)
fi

left() { echo $(( budget - (SECONDS - start) )); }
# cap CAP: the seconds a section may take, its own cap or what the budget has left (minus packing)
cap() { local l; l=$(( $(left) - 10 )); (( l < $1 )) && echo "$l" || echo "$1"; }
summarize() {
  { echo "gpu_check: $(( SECONDS - start ))s of ${budget}s (smoke=$smoke)"; cat "$out/0_device.txt"
    for f in "$out"/*.status; do
      [[ -e $f ]] || continue
      local name; name=$(basename "$f" .status)
      echo "$name: $(head -c 300 "$f")"
      if [[ -f $out/$name.log ]]; then tail -n 3 "$out/$name.log" | cut -c1-300 | sed 's/^/    /'; fi
    done; } > "$summary.tmp" 2>/dev/null
  mv "$summary.tmp" "$summary"
}
pack() { tar czf "$tgz.tmp" -C "$out" . && mv "$tgz.tmp" "$tgz"; summarize; }
# skip NAME WHY: a status line for a section that does not run here
skip() { echo "skipped: $2" > "$out/$1.status"; echo "== $1 $(cat "$out/$1.status")"; pack; }
# section NAME CAP CMD...: run CMD under the cap, record its exit and time in NAME.status, re-pack
section() {
  local name=$1 want=$(( $2 * scale )) t0=$SECONDS c; shift 2
  c=$(cap "$want")
  if [[ $dry == 1 ]]; then
    echo "plan $name cap ${want}s: $*" | tee "$out/$name.status"; return
  fi
  if (( c < 15 )); then skip "$name" "${c}s of the budget left"; return; fi
  echo "== $name (up to ${c}s)"
  timeout --kill-after=10 "$c" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "exit $rc after $(( SECONDS - t0 ))s (cap ${c}s)$( (( rc == 124 || rc == 137 )) && echo ', timed out')" \
      > "$out/$name.status"
  cat "$out/$name.status"; tail -5 "$out/$name.log"
  pack
}

ngpu=${GPU_CHECK_GPUS:-$("$py" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)}
if "$py" -c "import vllm" 2>/dev/null; then has_vllm=1; else has_vllm=0; fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  echo "gpus $ngpu, vllm importable: $has_vllm"
  echo "commit ${GPU_CHECK_COMMIT:-unknown}"; date -u; } > "$out/0_device.txt" 2>&1
cat "$out/0_device.txt"

cd "$root" || exit 1
if (( has_vllm )); then
  section 1_vllm 90 env ASYNCRL_VLLM_DEVICE="$DEVICE" VLLM_ENABLE_V1_MULTIPROCESSING=0 bash -c \
      '"$0" -m pytest -m slow -q -rs -p no:cacheprovider "$@"; a=$?
       "$0" -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_gpu_runtime.py -k vllm; b=$?
       exit $(( a | b ))' "$py" "${VLLM_TESTS[@]}"
fi
(( has_vllm )) || skip 1_vllm "vllm is not importable here: nothing run"
section 2_pytest 135 "$py" -m pytest -m gpu "${PYTEST_ARGS[@]}" -k "not vllm" tests
if (( ngpu >= 2 )); then
  section 3_fsdp 40 "$py" -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 \
      --master_port "$port" -m asyncrl train "${TINY[@]}" policy.device="$DEVICE"
fi
(( ngpu >= 2 )) || skip 3_fsdp "$ngpu GPU(s) visible, the FSDP section needs 2: nothing run"
section 4_a3po 110 "$py" -m benchmarks a3po --seeds 1 --methods sync,async-loglinear \
    --out "$out/4_a3po" --runs-dir "/tmp/gpu-check-a3po-$$" "${A3PO[@]}"
section 5_mismatch 35 "${RT[@]}" --size "$LARGE" --section mismatch --out "$out/5_mismatch.json"
pack
echo "done in $(( SECONDS - start ))s of ${budget}s; everything is in $out ($tgz, $summary)"
