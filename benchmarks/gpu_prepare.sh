#!/usr/bin/env bash
# Run HERE (a machine that reaches PyPI), in the checkout the device calls send (the session's own,
# not a helper's worktree), before a lent GPU session: downloads into .whl/ the wheels
# that benchmarks/gpu_check.sh needs and the GPU machine's image lacks, checks that they fit the
# call's 64 MiB carry, and prints the device `run` call to use (docs/runtime.md, "The GPU check").
#   bash benchmarks/gpu_prepare.sh            # download, check the size, print the call
#   bash benchmarks/gpu_prepare.sh --dry-run  # print what it would download and the call; fetch nothing
#
# The image (the device README's KINDS.md) has torch, transformers, tokenizers, safetensors, numpy,
# pyyaml, rich, tensorboard, matplotlib, jinja2, peft, scipy, pytest, pytest-xdist, pytest-timeout,
# pytest-benchmark and hypothesis; it lacks what asyncrl's tasks import (math-verify, with its
# latex2sympy2_extended and antlr4 runtime) and datasets (with dill and multiprocess; asyncrl.api and
# the HF-dataset tasks import it). Each is pinned to the version this checkout is tested with; pip
# downloads them with --no-deps, so every one is named here. vLLM (hundreds of MiB) and Ray cannot
# travel within 64 MiB: gpu_check.sh skips the vLLM section with a status line there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
dest=${GPU_PREPARE_DIR:-$root/.whl}
limit_mib=${GPU_PREPARE_LIMIT_MIB:-60}
py=${PYTHON:-python3}
WHEELS=(
  math-verify==0.9.0
  latex2sympy2_extended==1.11.0
  antlr4-python3-runtime==4.13.2
  datasets==5.2.0
  dill==0.4.1
  multiprocess==0.70.19
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
dry=0
[[ ${1:-} == --dry-run ]] && dry=1

args=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d "$dest")
for p in "${PLATFORMS[@]}"; do args+=(--platform "$p"); done
if (( dry )); then
  echo "would download into $dest (at most ${limit_mib} MiB):"
  printf '  %s\n' "${WHEELS[@]}"
  echo "with: $py -m pip download ${args[*]} NAME==VERSION"
else
  mkdir -p "$dest"  # ignored (.gitignore): it travels only as a carried path
  "$py" -m pip download -q "${args[@]}" "${WHEELS[@]}"
  size_kib=$(du -sk "$dest" | cut -f1)
  echo "$dest: $(ls "$dest" | wc -l) wheels, $(( size_kib / 1024 )) MiB"
  if (( size_kib > limit_mib * 1024 )); then
    echo "gpu_prepare: $dest holds ${size_kib} KiB, over ${limit_mib} MiB: it would not travel with the working tree" >&2
    exit 1
  fi
fi
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
cat <<EOF
The device call (the tool's run, from this checkout), with carry [".whl"] and timeout_s 540:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD/src:\$PWD || exit; GPU_CHECK_COMMIT=$commit GPU_CHECK_TGZ=\$OUT/gpu_check.tgz GPU_CHECK_SUMMARY=\$OUT/summary.txt PYTHON=python3 bash benchmarks/gpu_check.sh /tmp/gc
EOF
