#!/usr/bin/env bash
# The GPU check: the benchmarks, a short training of each learner and the main job on a lent
# GPU machine, in one call, without installing the project.
#
#   bash scripts/gpu_check.sh fetch                  # here, where pip reaches PyPI: the wheels the
#                                                    # device lacks (scripts/gpu_wheels.txt) -> .whl/
#   bash scripts/gpu_check.sh run OUT [PHASE ...]    # there: the phases (default: all, in this order)
#
# Phases: preflight bench64 ddqn bench1213 drr main. Each writes into a work folder and gets a time
# cap, cut to what is left of GPU_CHECK_BUDGET_S (default 450 s) once the phases before it
# have run; a phase that fails or runs out of time is logged and the next one runs. At the end
# OUT holds gpu_check.log (everything printed), work.tgz (every file written, checkpoints
# excluded) and the benchmark and main-job tables, so the device tool brings back 8 files at
# most. Environment: MAIN_TRAIN_S (default 60), the main job's training time (`train
# --max-train-s`); CAP_<phase> (seconds) a phase's cap; B64, B1213 the batches and SCHEDULERS
# the schedulers of the benchmarks (a rerun of what a first call could not finish).
#
# The device machine (device tool, nvidia-h200) has no package index and its own Python 3.12
# and JAX 0.11.2 (CUDA 13) with flax, optax, chex, orbax-checkpoint, pandas, matplotlib and
# tqdm; jraph and flashbax (pure Python) travel as wheels in the git-ignored .whl/, installed
# with --no-index --no-deps into a folder on PYTHONPATH beside the checkout. Nothing is
# pip-installed from the project's pyproject.toml (it pins jax<0.11 for PyPI installs).
# The device calls, from the checkout's root (the first run, 2026-12-04, results/gpu/README.md,
# measured the benchmarks and DRR in 421 s; what is left is GNN-DDQN and the main job):
#   run(command="GPU_CHECK_BUDGET_S=500 bash scripts/gpu_check.sh run $OUT preflight ddqn main",
#       carry=[".whl"], timeout_s=560)
#   run(command="bash scripts/gpu_check.sh run $OUT", carry=[".whl"], timeout_s=500)   # everything
# Rehearsal on a CPU with the same mechanism (a Python 3.12 venv holding the device's
# versions of JAX and the preinstalled packages, no install of the project; 2 cores compile
# slowly, so longer caps):
#   /root/.pyenv/versions/3.12.1/bin/python3 -m venv /tmp/v312
#   /tmp/v312/bin/pip install jax==0.11.2 flax optax chex orbax-checkpoint pandas matplotlib tqdm
#   PYTHON=/tmp/v312/bin/python GPU_CHECK_CPU=1 GPU_CHECK_BUDGET_S=2000 CAP_ddqn=300 CAP_drr=300 \
#       CAP_main=1200 bash scripts/gpu_check.sh run /tmp/gpu_check
# GPU_CHECK_CPU=1 lets the preflight go on without a GPU and shrinks every phase to a toy size.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
WHEELS=.whl

fetch() {
  mkdir -p "$WHEELS"
  grep -q '^/.whl/$' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  grep -vE '^\s*(#|$)' scripts/gpu_wheels.txt | xargs "$PYTHON" -m pip download --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS"
  ls -l "$WHEELS"
}

[ "${1:-}" = fetch ] && { fetch; exit $?; }
[ "${1:-}" = run ] || { echo "usage: $0 fetch | run OUT [PHASE ...]" >&2; exit 2; }
OUT=${2:?usage: $0 run OUT [PHASE ...]}
shift 2
PHASES=${*:-preflight bench64 ddqn bench1213 drr main}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=${TMPDIR:-/tmp}/jaxsched_gpu_check  # beside OUT, which brings back 8 files at most
rm -rf "$WORK" && mkdir -p "$WORK"
BUDGET=${GPU_CHECK_BUDGET_S:-450}
MAIN_TRAIN_S=${MAIN_TRAIN_S:-60}
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1 JAXSCHED_DATA=/nonexistent  # the synthetic 1,213-node preset, as on the device

# The carried wheels, beside the checkout (no index, no dependencies: the device has the rest).
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  SITE=/tmp/jaxsched-site
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/*.whl || { echo "STOP: the carried wheels did not install"; exit 1; }
  export PYTHONPATH=$ROOT:$SITE
else
  echo "no $WHEELS/*.whl here (bash scripts/gpu_check.sh fetch): jraph and flashbax must be installed"
  export PYTHONPATH=$ROOT
fi

SMALL=${GPU_CHECK_CPU:-0}
if [ "$SMALL" = 1 ]; then  # the rehearsal: the same commands at toy sizes
  B64="16 32"; B1213="4 8"; J64=60; J1213=40
  DDQN_SET=(--set train.num_envs=8 --set agent.buffer_size=4096 --set agent.batch_size=32
            --set agent.learning_starts=64 --set workload.synthetic.num_jobs=400 --set train.train_jobs=400
            --set env.warmup_jobs=100 --set env.measured_jobs=100)
  DRR_SET=(--set train.num_envs=8 --set workload.synthetic.num_jobs=400 --set train.train_jobs=400
           --set env.warmup_jobs=100 --set env.measured_jobs=100)
  MAIN_SET=("${DDQN_SET[@]}" --set train.num_seeds=2 --set train.valid_episodes=2 --set eval.episodes=4
            --set eval.batch_size=4)
  PREFLIGHT=(--allow-cpu)
else
  B64=${B64:-1024 16384 65536}; B1213=${B1213:-1024 16384 65536}; J64=500; J1213=300
  DDQN_SET=(); DRR_SET=(); MAIN_SET=(); PREFLIGHT=()
fi

left() { echo $((BUDGET - SECONDS)); }
phase() {  # phase NAME CAP_S COMMAND...: run COMMAND with min(CAP_S, time left), log its exit
  local name=$1 cap=$2 override="CAP_$1"; shift 2
  cap=${!override:-$cap}  # e.g. CAP_ddqn=250
  local limit; limit=$(left); [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 15 ]; then echo "== $name: skipped, $(left) s of the budget left"; return 0; fi
  echo "== $name (up to ${limit} s; ${SECONDS} s into the check): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@"
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s$([ $rc = 124 ] && echo ' (timed out: rows and logs so far are kept)')"
  return $rc
}

TRAIN=("$PYTHON" -m jaxsched.train --quiet --no-compile-cache)
SCHEDULERS=${SCHEDULERS:-first-fit best-fit fgd}
for p in $PHASES; do
  case $p in
    preflight)
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
          2>/dev/null | tee "$WORK/nvidia_smi.csv"
      phase preflight 60 "$PYTHON" scripts/gpu_preflight.py "${PREFLIGHT[@]}" \
          || { echo "STOP: the preflight failed; nothing else runs"; break; } ;;
    bench64)
      # shellcheck disable=SC2086
      phase bench64 110 "$PYTHON" scripts/bench.py --nodes 64 --batches $B64 --jobs $J64 --runs 2 --schedulers $SCHEDULERS \
          --compile-threads 9 --ref-decisions 0 --no-compile-cache --out "$WORK/bench" --name bench_gpu_64 ;;
    ddqn)  # GNN-DDQN's GPU preset, one run of its envs, no validation: training throughput
      phase ddqn 180 "${TRAIN[@]}" --config configs/gnn_ddqn_gpu.toml --no-eval --max-train-s 70 \
          --set train.total_updates=100000 --set train.chunk_updates=50 --set train.checkpoint_every=0 \
          --set train.num_seeds=1 --set train.valid_episodes=0 "${DDQN_SET[@]}" --out "$WORK/ddqn_short" ;;
    drr)  # DRR's GPU preset, the same way
      phase drr 90 "${TRAIN[@]}" --config configs/drr_gpu.toml --no-eval --max-train-s 55 \
          --set train.total_updates=100000 --set train.chunk_updates=10 --set train.checkpoint_every=0 \
          --set train.valid_episodes=0 "${DRR_SET[@]}" --out "$WORK/drr_short" ;;
    bench1213)
      # shellcheck disable=SC2086
      phase bench1213 100 "$PYTHON" scripts/bench.py --nodes 1213 --batches $B1213 --jobs $J1213 --runs 2 --schedulers $SCHEDULERS \
          --compile-threads 9 --ref-decisions 0 --no-compile-cache --out "$WORK/bench" --name bench_gpu_1213 ;;
    main)  # the main job's GPU preset, its training cut to MAIN_TRAIN_S (chunks of 100 updates, so the
           # time limit can stop it), two baselines beside the agent
      phase main 420 "${TRAIN[@]}" --config configs/gnn_ddqn_gpu.toml --max-train-s "$MAIN_TRAIN_S" \
          --baselines first-fit,sjf --set train.checkpoint_every=0 --set train.chunk_updates=100 "${MAIN_SET[@]}" \
          --out "$WORK/main" ;;
    *) echo "unknown phase $p (preflight bench64 ddqn bench1213 drr main)" ;;
  esac
done

tar czf "$OUT/work.tgz" -C "$WORK" --exclude=checkpoints . 2>/dev/null
for f in "$WORK"/bench/*.md "$WORK"/main/summary.md; do [ -f "$f" ] && cp "$f" "$OUT/"; done
echo "== done after ${SECONDS} s; OUT: $(ls "$OUT" | tr '\n' ' ')"
