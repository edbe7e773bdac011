#!/usr/bin/env bash
# GPU smoke check for AgentWorld: CUDA, `aw train` (sft/grpo/ppo, fp32 + bf16, online+reload),
# `aw serve` on CUDA, `aw run` through the proxy, a pytest subset, the proxy benchmark.
# Never stops on a failing step: each step's result goes to $OUT/summary.txt.
# Env: OUT (log folder), PY (python, default python3), BUDGET_S (whole script, default 330),
#      SKIP_GPU=1 (local dry run on CPU: skip nvidia-smi, serve on cpu, no .pth),
#      SKIP_STEPS (bash regex of step names to skip), PTH_SITE (carried wheels, /tmp/site).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$HERE/../.." || exit 1  # the repo root: tests/ and bench/ are used from there
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpucheck_out}
BUDGET_S=${BUDGET_S:-330}
SKIP_GPU=${SKIP_GPU:-0}
export PYTHONUNBUFFERED=1 AW_HOME=/tmp/aw-gpucheck-home TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 COLUMNS=160
mkdir -p "$OUT"
LOG="$OUT/log.txt"
SUM="$OUT/summary.txt"
: >"$LOG"
: >"$SUM"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
set -x
W=$(mktemp -d /tmp/awgpu.XXXX)
DEV=cuda
[ "$SKIP_GPU" = 1 ] && DEV=cpu
T_START=$(date +%s)
PORT=8931
SERVE_URL="http://127.0.0.1:$PORT"
SERVE_PID=""
trap '[ -n "$SERVE_PID" ] && kill -KILL "$SERVE_PID" 2>/dev/null' EXIT

skipped() { [ -n "${SKIP_STEPS:-}" ] && [[ $1 =~ $SKIP_STEPS ]]; }

# step NAME TIMEOUT_S CMD...: runs under timeout (capped by what is left of BUDGET_S).
step() {
  local name=$1 limit=$2
  shift 2
  local now left rc t0
  if skipped "$name"; then
    echo "SKIP  $name (SKIP_STEPS)" >>"$SUM"
    return 1
  fi
  now=$(date +%s)
  left=$((BUDGET_S - (now - T_START)))
  if [ "$left" -lt 8 ]; then
    echo "SKIP  $name (budget spent)" >>"$SUM"
    return 1
  fi
  [ "$limit" -gt "$((left - 5))" ] && limit=$((left - 5))
  echo "=================== STEP $name (timeout ${limit}s) ==================="
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    echo "PASS  $name (${dt}s)" >>"$SUM"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL  $name (timeout after ${dt}s, rc=$rc)" >>"$SUM"
  else
    echo "FAIL  $name (rc=$rc, ${dt}s)" >>"$SUM"
  fi
  return $rc
}

# CUDA report line of the last aw_cuda.py run goes into the summary too.
cuda_note() {
  local line
  line=$(grep -a '^AW_CUDA_REPORT {' "$LOG" | tail -1 | cut -c1-300)
  echo "      $1: ${line#*AW_CUDA_REPORT }" >>"$SUM"
  if [ "$SKIP_GPU" != 1 ] && [[ $line != *'"device": "cuda'* ]]; then
    echo "FAIL  $1-ran-on-cuda (Accelerate device is not cuda)" >>"$SUM"
  fi
}

AW="$PY $HERE/aw_cuda.py"
COMMON=(--agent a --dataset d --set progress=false --set batch_tokens=512 --set max_seq_len=256)

# -- 1. The machine.
if [ "$SKIP_GPU" != 1 ]; then
  step nvidia-smi 20 nvidia-smi -L
  step nvidia-smi-q 20 bash -c "nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,compute_cap --format=csv"
fi
step info 60 $PY "$HERE"/helpers.py info

# -- 2. Training on CUDA.
step fixtures 60 $PY "$HERE"/helpers.py fixtures "$W"
step train-sft-fp32 60 $AW train --model "$W/model" --pool "$W/pool" --algo sft \
  -o "$W/out_sft" --max-steps 3 "${COMMON[@]}" && cuda_note sft
step check-sft 30 $PY "$HERE"/helpers.py check-train "$W/out_sft" 3
step train-grpo-fp32 60 $AW train --model "$W/model" --pool "$W/pool" --algo grpo \
  -o "$W/out_grpo" --max-steps 3 "${COMMON[@]}" && cuda_note grpo
step check-grpo 30 $PY "$HERE"/helpers.py check-train "$W/out_grpo" 3
step train-ppo-kl-fp32 60 $AW train --model "$W/model" --pool "$W/pool" --algo ppo \
  -o "$W/out_ppo" --max-steps 2 "${COMMON[@]}" --set kl_coef=0.05 --set grad_accum=2 && cuda_note ppo
step check-ppo 30 $PY "$HERE"/helpers.py check-train "$W/out_ppo" 2
# bf16 autocast through Accelerate's env config (what `accelerate launch --mixed_precision bf16` sets).
step train-grpo-bf16 60 env ACCELERATE_MIXED_PRECISION=bf16 $AW train --model "$W/model" \
  --pool "$W/pool" --algo grpo -o "$W/out_bf16" --max-steps 3 "${COMMON[@]}" && cuda_note bf16
step check-bf16 30 $PY "$HERE"/helpers.py check-train "$W/out_bf16" 3
# The same through the trainer's own key, with no ACCELERATE_* env; fp16 too; a bad value
# must be refused naming the key.
step train-grpo-bf16-key 60 $AW train --model "$W/model" --pool "$W/pool" --algo grpo \
  -o "$W/out_bf16key" --max-steps 3 "${COMMON[@]}" --set mixed_precision=bf16 && cuda_note bf16-key
step check-bf16-key 30 $PY "$HERE"/helpers.py check-train "$W/out_bf16key" 3
step train-grpo-fp16-key 60 $AW train --model "$W/model" --pool "$W/pool" --algo grpo \
  -o "$W/out_fp16key" --max-steps 3 "${COMMON[@]}" --set mixed_precision=fp16 && cuda_note fp16-key
step check-fp16-key 30 $PY "$HERE"/helpers.py check-train "$W/out_fp16key" 3
step train-bad-precision 30 bash -c "$AW train --model $W/model --pool $W/pool -o $W/out_bad \
  --max-steps 1 --agent a --dataset d --set mixed_precision=fp8 2>&1 \
  | grep -q 'train.mixed_precision: must be one of'"
step train-resume 60 $AW train --model "$W/model" --pool "$W/pool" --algo grpo \
  -o "$W/out_grpo" --max-steps 5 --resume latest "${COMMON[@]}"
step check-resume 30 $PY "$HERE"/helpers.py check-train "$W/out_grpo" 5

# -- 3. `aw serve` on CUDA (bf16 default on GPU), then online training that reloads it.
if ! skipped serve-up; then
  echo "=================== START aw serve ($DEV) ==================="
  $AW serve --model "$W/model" --port $PORT --device $DEV >"$W/serve.log" 2>&1 &
  SERVE_PID=$!
fi
step serve-up 90 $PY "$HERE"/helpers.py wait-url "$SERVE_URL/v1/models" 85
step serve-chat 60 $PY "$HERE"/helpers.py serve-check "$SERVE_URL" "$W/model"
step train-online-reload 90 $AW train --model "$W/model" --pool "$W/pool_online" --algo grpo \
  -o "$W/out_online" --online --serve-url "$SERVE_URL" --max-steps 2 --agent a --dataset d \
  --set progress=false --set group_size=2 --set groups_per_update=2 --set idle_exit_s=3 \
  --set poll_interval_s=0.2 --set batch_tokens=512 --set max_seq_len=256
step serve-version-after-reload 20 $PY "$HERE"/helpers.py version "$SERVE_URL" 1
step serve-chat-after-reload 60 $PY "$HERE"/helpers.py serve-check "$SERVE_URL" \
  "$W/out_online/$(cat "$W/out_online/latest" 2>/dev/null || echo missing)"

# -- 3b. `aw run`: the math agent through the in-process recording proxy to the CUDA server.
step run-config 20 $PY "$HERE"/helpers.py run-config "$W" "$SERVE_URL"
step aw-run 90 $AW run --agent math --dataset mini-gsm --split train --limit 3 -n 2 \
  --pool "$W/pool_run" --agents "$W/agents.toml" --datasets "$W/datasets.toml" --json
step pool-ls 30 $PY -m agentworld.cli pool ls --pool "$W/pool_run"
# The server runs the online checkpoint now: train from it so fidelity compares like with like.
ONLINE_CKPT="$W/out_online/$(cat "$W/out_online/latest" 2>/dev/null || echo missing)"
step train-sft-on-run 60 $AW train --model "$ONLINE_CKPT" --pool "$W/pool_run" --algo sft \
  --agent math -o "$W/out_run" --max-steps 2 --set progress=false --set include_journals=true && cuda_note run-sft

if [ -n "$SERVE_PID" ]; then
  echo "=================== STOP aw serve ==================="
  kill -TERM "$SERVE_PID" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$SERVE_PID" 2>/dev/null
  wait "$SERVE_PID" 2>/dev/null
  SERVE_PID=""
  echo "--- serve.log (tail) ---"
  tail -n 40 "$W/serve.log"
  grep -a "aw serve:" "$W/serve.log" | head -2 | sed 's/^/      /' >>"$SUM"
  grep -a '^AW_CUDA_REPORT {' "$W/serve.log" | tail -1 | sed 's/^/      serve: /' | cut -c1-300 >>"$SUM"
fi

# -- 4. Tests. Train tests run on whatever Accelerate picks (CUDA); most serve tests pin the
# CPU, but the CUDA-only ones (batched sampler == per-row sampler on the GPU, engine on CUDA
# vs a CPU forward pass, fp16/bf16 training) run here instead of skipping.
step pytest-train-serve 150 $PY -m pytest tests/train tests/serve tests/test_demo.py -q \
  --maxfail=5 -p no:cacheprovider -rs --ignore tests/train/test_multiprocess.py \
  --ignore tests/test_model_folder.py -o addopts="" --durations=8 \
  --deselect tests/test_demo.py::test_demo_collects_grouped_engine_token_trajectories

# One-off steps of a particular check (a file of `step` lines, sourced here).
if [ -n "${EXTRA_STEPS:-}" ]; then
  # shellcheck disable=SC1090
  source "$EXTRA_STEPS"
fi

# -- 5. Proxy benchmark (16 cores). Its servers run with PYTHONPATH=repo only, so the
# carried wheels must be visible without PYTHONPATH: a .pth in the interpreter's purelib.
PTH=""
SITE_DIR=${PTH_SITE:-/tmp/site}
if [ -d "$SITE_DIR" ] && [ "$SKIP_GPU" != 1 ]; then
  PURELIB=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ -w "$PURELIB" ]; then
    PTH="$PURELIB/zz_aw_gpucheck.pth"
    echo "$SITE_DIR" >"$PTH"
  fi
fi
step bench-proxy 240 $PY bench/proxy_overhead.py --levels "${BENCH_LEVELS:-1}" --requests 1500 --rounds 3
[ -n "$PTH" ] && rm -f "$PTH"

set +x
echo "total: $(($(date +%s) - T_START))s of budget ${BUDGET_S}s" >>"$SUM"
echo "=================== SUMMARY ==================="
cat "$SUM"
rm -rf "$W"
exec 1>&- 2>&-
wait "$TEE_PID" 2>/dev/null || sleep 1
exit 0
