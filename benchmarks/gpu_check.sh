#!/usr/bin/env bash
# The GPU checks of one lent GPU session, in two parts that each fit one ten-minute call.
#   bash benchmarks/gpu_check.sh tests  OUT_DIR   # pytest -m gpu, then the GPU benchmark at 0.5B and 1.5B
#   bash benchmarks/gpu_check.sh a3po   OUT_DIR   # a short `bench a3po --config gpu-embedded`, then the
#                                                 # async cell again under MPS
# Needs asyncrl installed (pip install -e .) and a CUDA device. Every part writes its logs and JSON
# into OUT_DIR; a part that fails or times out does not stop the next. The device session ran
#   bash benchmarks/gpu_check.sh tests /tmp/g && tar czf $OUT/tests.tgz -C /tmp g
set -u
part=${1:?tests or a3po}
out=${2:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ASYNCRL_CACHE=${ASYNCRL_CACHE:-/tmp/asyncrl-cache}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$out/device.txt"

# The short A-3PO study: warm start and steps cut so the three cells fit a few minutes.
SHORT=(trainer.steps=24 pretrain.steps=150 eval.every=0 eval.n_problems=256 eval.samples=1)

case $part in
  tests)
    timeout 240 python -m pytest -m gpu -q -n 4 -p no:cacheprovider tests 2>&1 | tail -40 > "$out/pytest_gpu.txt"
    echo "pytest exit ${PIPESTATUS[0]}" >> "$out/pytest_gpu.txt"
    timeout 300 python benchmarks/gpu_runtime.py --size 0.5B 1.5B --out "$out/gpu_runtime.json" \
        > "$out/gpu_runtime.log" 2>&1
    echo "gpu_runtime exit $?" >> "$out/gpu_runtime.log"
    ;;
  a3po)
    timeout 330 asyncrl bench a3po --config gpu-embedded --seeds 1 --out "$out/a3po" --runs-dir /tmp/a3po-runs \
        "${SHORT[@]}" > "$out/bench_a3po.log" 2>&1
    echo "bench exit $?" >> "$out/bench_a3po.log"
    # the async A-3PO cell again with MPS (two processes share the GPU's SMs instead of time-slicing)
    if command -v nvidia-cuda-mps-control >/dev/null; then
      nvidia-cuda-mps-control -d
      timeout 150 asyncrl bench a3po --config gpu-embedded --seeds 1 --methods async-loglinear \
          --out "$out/a3po-mps" --runs-dir /tmp/a3po-mps-runs "${SHORT[@]}" > "$out/bench_a3po_mps.log" 2>&1
      echo "bench (MPS) exit $?" >> "$out/bench_a3po_mps.log"
      echo quit | nvidia-cuda-mps-control
    else
      echo "nvidia-cuda-mps-control: not on this machine" > "$out/bench_a3po_mps.log"
    fi
    ;;
  *) echo "unknown part: $part" >&2; exit 2 ;;
esac
# the short logs to the terminal; OUT_DIR holds everything (tar it to bring it back)
for f in "$out"/*.txt "$out"/*.log; do echo "== $f"; tail -25 "$f"; done
