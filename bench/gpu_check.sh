#!/usr/bin/env bash
# The engine on one GPU, in about 10 minutes: GPU info, the fused packed-attention kernels (FlexAttention, PyTorch's
# varlen kernel) against the per-sequence path, the FSDP2 engine on NCCL (one-rank load, log-probs against an eager
# reference, a training step), and the MFU presets of bench/engine_mfu.py. Every part runs under its own time limit, so one hang costs only its own budget.
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
  # label:preset:limit_seconds:flags (the CPU run: one tiny case standing in for the presets)
  PRESETS=("tiny:tiny:240:--device cpu --dtypes fp32 --remove-padding 1 --batch 4 --prompt-len 8 --prompt-spread 2 --response-len 6 --micro-batch-sizes 2 --lora-rank 0 --steps 1 --peak-size 256 --attention auto")
  LIMITS=(60 240 240)  # info, engine, attention
else
  PART_ARGS=(--device cuda)
  # budgets (s), 620 in all: info 45, engine 70, attention 90, presets 415; each MFU run builds its model on the GPU
  # (once per cache folder), loads it, takes one warm-up step (compiles, where it compiles) and 2 timed steps of the
  # update alone. 0.5b runs the packed attention's two CUDA kernels side by side, and the varlen one with the decoder
  # layers compiled (actor.use_torch_compile); the larger presets run the default kernel. Two of them also write a
  # torch.profiler table of one more update.
  ONE="--steps 2 --forward-pass 0"
  PRESETS=("0.5b-per_sequence:0.5b:50:$ONE --attention per_sequence" "0.5b-varlen:0.5b:45:$ONE --attention auto"
           "0.5b-varlen-compiled:0.5b:90:$ONE --attention auto --compile 1 --profile $OUT/profile-0.5b-compiled.txt"
           "1b-varlen:1b:60:$ONE --attention auto --profile $OUT/profile-1b.txt"
           "3b-varlen:3b:75:$ONE --attention auto" "7b-lora-varlen:7b-lora:95:$ONE --attention auto")
  LIMITS=(45 70 90)  # info, engine, attention
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
# attention first: FlexAttention's compiled kernels (the 0.5b attention shape) are in inductor's cache afterwards
step attention "${LIMITS[2]}" "$PY" bench/gpu_check.py attention --out "$OUT" "${PART_ARGS[@]}"
step engine "${LIMITS[1]}" "$PY" bench/gpu_check.py engine --out "$OUT" "${PART_ARGS[@]}"
for entry in "${PRESETS[@]}"; do
  IFS=: read -r label preset limit flags <<<"$entry"
  # shellcheck disable=SC2086  # flags are words
  step "mfu-$label" "$limit" "$PY" bench/engine_mfu.py --preset "$preset" $flags --json "$OUT/mfu.jsonl"
done
"$PY" bench/gpu_check.py summary --out "$OUT" | tee -a "$LOG"
