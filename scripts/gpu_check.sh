#!/usr/bin/env bash
# One call on a machine with a GPU: benchmark (and a short training run, when the GPU preset
# exists) in under ~8 minutes, writing JSON results into the folder given as $1.
#   bash scripts/gpu_check.sh OUT_DIR
set -euo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
python -m pip install -q -e . >/dev/null 2>&1 || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>/dev/null || true
python -c "import jax; print(jax.devices())" | tee "$out/devices.txt"
# Bigger batches than on a CPU: the GPU wants whole-batch steps (rollout chunk = None there).
timeout 300 python scripts/bench.py --nodes 64 1213 --batches 1024 4096 16384 \
    --schedulers first-fit best-fit fgd --ref-decisions 1000 --out "$out" --name bench_gpu \
    2>&1 | tee "$out/bench.log" || echo "bench: exit $?" | tee -a "$out/bench.log"
if [ -f configs/gnn_ddqn_gpu.toml ]; then
  timeout 180 python -m jaxsched.train --config configs/gnn_ddqn_gpu.toml \
      --set eval.out_dir="\"$out/train\"" 2>&1 | tail -n 40 > "$out/train.log" || echo "train: exit $?" >> "$out/train.log"
fi
ls -la "$out"
