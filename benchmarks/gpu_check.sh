#!/usr/bin/env bash
# One prepared check of the trainer's GPU path for a lent H200 (no package index there; under 10 minutes):
#   bash benchmarks/gpu_check.sh [--dry-run]
#   bash benchmarks/gpu_check.sh --model-score   # the model_score stage on a BERT-base classifier, docs/s and GPU use
#   bash benchmarks/gpu_check.sh --trainer   # `train` itself on the curated shards in runs/ (the README's first
#                                            # command, run here first; carry runs/ and pydantic's wheels in .wheels/)
#   bash benchmarks/gpu_check.sh --moe       # a mixture of experts under `train` (as --trainer: carry runs/), 100
#                                            # steps, then 30 with and 30 without --offload
# From the repository root. Wheels carried in .wheels/ (an ignored folder) are installed with --no-index into
# .wheels-site/ first; the check itself needs only torch (and torchao for the FP8 rows, which say why they skip
# without it: carry its wheel, see benchmarks/README.md). --dry-run prints the plan and checks the imports anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".wheels/*.whl" > /dev/null; then
  python3 -m pip install --quiet --no-index --no-deps --upgrade --target .wheels-site .wheels/*.whl
  export PYTHONPATH="$PYTHONPATH:.wheels-site"
fi
if [[ "${1:-}" == "--dry-run" ]]; then
  exec python3 benchmarks/gpu_check.py --dry-run
fi
if [[ "${1:-}" == "--model-score" ]]; then
  # The model_score stage on a BERT-base-size classifier against transformers' pipeline (carry the wheels of
  # transformers, huggingface-hub, safetensors and tokenizers in .wheels/), GPU utilisation sampled beside it.
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > /tmp/gpu-utilisation.txt &
  sampler=$!
  timeout --foreground 400 python3 benchmarks/model_score_throughput.py --size base --device cuda --dtype bfloat16 --docs 4000 --documents sample --repeat 1
  kill "$sampler"
  echo "GPU utilisation while it ran: mean $(awk '{s+=$1; n++} END {printf "%.0f", s/n}' /tmp/gpu-utilisation.txt)% over $(wc -l < /tmp/gpu-utilisation.txt) samples"
  exit 0
fi
if [[ "${1:-}" == "--moe" ]]; then
  # The small model's shapes with 8 experts of 1,024 (top 2, 1 shared) in bf16: tokens/s, MFU on active parameters,
  # peak memory and the expert loads after 100 steps (the last metrics line's `moe`); then 30 steps without and
  # with --offload, whose tokens/s and peak memory the two last lines compare.
  out=/tmp/gpu-moe failed=0
  rm -rf "$out" && mkdir -p "$out"
  printf 'model: small
model_overrides: {moe_experts: 8, moe_top_k: 2, moe_hidden: 1024, moe_shared: 1}
seq_len: 1024
global_batch: 8
micro_batch: 8
checkpoint_every: 1000
eval_every: 0
lr: 1.0e-3
' > "$out/moe.yaml"
  for run in "moe --steps 100" "plain --steps 30" "offload --steps 30 --offload"; do
    set -- $run
    name=$1; shift
    if timeout --foreground 170 python3 -m training --mixture mixtures/web70_code20.yaml --config "$out/moe.yaml" --out "$out/$name" "$@"; then
      echo "$name: $(tail -n 1 "$out/$name/metrics.jsonl")"
      if [[ -n "${OUT:-}" ]]; then cp "$out/$name/metrics.jsonl" "$OUT/$name-metrics.jsonl"; fi
    else
      echo "train $name $* failed: rc $?" && failed=1
    fi
  done
  exit "$failed"
fi
if [[ "${1:-}" == "--trainer" ]]; then
  # The small model on the README's mixture, compiled: 40 steps with checkpoints at 20 and 40; the same run resumed
  # from its step-20 checkpoint must end at step 40 where it did; then 40 steps with float8 matmuls (the same
  # schedule, so step 40 compares with bf16's). Each run's metrics are copied out as it ends; the exit status says
  # whether every run finished.
  out=/tmp/gpu-train failed=0
  rm -rf "$out" && mkdir -p "$out"
  printf 'model: small\nseq_len: 1024\nglobal_batch: 8\nmicro_batch: 8\ncompile: true\ncheckpoint_every: 20\neval_every: 20\nlr: 1.0e-3\n' > "$out/small.yaml"
  train() {
    local run=$1; shift
    if timeout --foreground 170 python3 -m training --mixture mixtures/web70_code20.yaml --config "$out/small.yaml" --out "$out/$run" "$@"; then
      echo "$run: $(tail -n 1 "$out/$run/metrics.jsonl")"
      if [[ -n "${OUT:-}" ]]; then cp "$out/$run/metrics.jsonl" "$OUT/$run-metrics.jsonl"; fi
    else
      echo "train $run $* failed: rc $?" && failed=1
    fi
  }
  train bf16 --steps 40
  if [[ -d "$out/bf16/checkpoints/step-00000020" ]]; then
    mkdir -p "$out/resumed/checkpoints" && cp -r "$out/bf16/checkpoints/step-00000020" "$out/resumed/checkpoints/"
    train resumed --steps 40 --resume
  else
    echo "no step-20 checkpoint in $out/bf16: the resume is not checked" && failed=1
  fi
  train fp8 --steps 40 --fp8 tensorwise
  exit "$failed"
fi
exec timeout --foreground 560 python3 -m torch.distributed.run --standalone --nproc_per_node=1 benchmarks/gpu_check.py "$@"
