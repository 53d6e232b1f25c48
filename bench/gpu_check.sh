#!/usr/bin/env bash
# The engine on one GPU, in under 7 minutes: GPU info, FlexAttention packed attention against the per-sequence path,
# the FSDP2 engine on NCCL (one-rank load, log-probs against an eager reference, a training step), and the MFU
# presets of bench/engine_mfu.py. Every part runs under its own time limit, so one hang costs only its own budget.
#
#   bash bench/gpu_check.sh              # from the repository root; results in $OUT (default ./gpu_out)
#   bash bench/gpu_check.sh --cpu-tiny   # the same steps on tiny shapes on the CPU (what the test runs)
#
# Needs python3 with torch, transformers, peft, accelerate, safetensors; no Ray, vLLM, flash-attn, Hydra or DeepSpeed.
# Writes $OUT/gpu_check.log (everything printed), $OUT/steps.jsonl (exit code and seconds per step), each part's
# JSON, $OUT/mfu.jsonl, and $OUT/summary.json + $OUT/summary.md.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export RAYRL_BENCH_CACHE=${RAYRL_BENCH_CACHE:-/tmp/rayrl-bench-models}
export PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # everything is local; a hub lookup would only wait for a timeout
export TOKENIZERS_PARALLELISM=false

if [ "${1:-}" = "--cpu-tiny" ]; then
  PART_ARGS=(--device cpu --tiny)
  # name:limit_seconds:flags (the CPU run: one tiny case standing in for the four presets)
  PRESETS=("tiny:240:--device cpu --dtypes fp32 --remove-padding 1 --batch 4 --prompt-len 8 --prompt-spread 2 --response-len 6 --micro-batch-sizes 2 --lora-rank 0 --steps 1 --peak-size 256")
  LIMITS=(60 240 240)  # info, engine, flex
else
  PART_ARGS=(--device cuda)
  # budgets (s), 410 in all: info 15, engine 70, flex 50, presets 50 + 55 + 75 + 95; each MFU run builds its model
  # on the GPU (once per cache folder), loads it, takes one warm-up step (FlexAttention compiles) and 2 timed
  # steps of the update alone
  PRESETS=("0.5b:50:--steps 2 --forward-pass 0" "1b:55:--steps 2 --forward-pass 0"
           "3b:75:--steps 2 --forward-pass 0" "7b-lora:95:--steps 2 --forward-pass 0")
  LIMITS=(15 70 50)  # info, engine, flex
fi

step() {  # step NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start rc
  start=$(date +%s)
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  local took=$(( $(date +%s) - start ))
  echo "=== $name: exit $rc after ${took}s$([ $rc -eq 124 ] && echo ' (time limit)')" | tee -a "$LOG"
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $took, \"limit\": $limit}" >>"$OUT/steps.jsonl"
}

: >"$OUT/steps.jsonl"
rm -f "$OUT/mfu.jsonl"
step info "${LIMITS[0]}" "$PY" bench/gpu_check.py info --out "$OUT" "${PART_ARGS[@]}"
# flex first: its compiled kernels (the 0.5b attention shape) are in inductor's cache when the engine step needs them
step flex "${LIMITS[2]}" "$PY" bench/gpu_check.py flex --out "$OUT" "${PART_ARGS[@]}"
step engine "${LIMITS[1]}" "$PY" bench/gpu_check.py engine --out "$OUT" "${PART_ARGS[@]}"
# if FlexAttention failed on this machine (no compiler for Triton, ...), the presets still measure the engine, with the
# per-sequence kernel, and say so in mfu.jsonl ("attention")
ATTENTION=auto
if ! grep -q '"step": "flex", "rc": 0' "$OUT/steps.jsonl"; then
  ATTENTION=per_sequence
  echo "=== flex failed: the MFU presets run with --attention per_sequence" | tee -a "$LOG"
fi
for entry in "${PRESETS[@]}"; do
  IFS=: read -r preset limit flags <<<"$entry"
  # shellcheck disable=SC2086  # flags are words
  step "mfu-$preset" "$limit" "$PY" bench/engine_mfu.py --preset "$preset" $flags --attention "$ATTENTION" \
    --json "$OUT/mfu.jsonl"
done
"$PY" bench/gpu_check.py summary --out "$OUT" | tee -a "$LOG"
