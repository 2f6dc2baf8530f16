#!/usr/bin/env bash
# One prepared check of the trainer's GPU path for a lent H200 (no package index there; under 10 minutes):
#   bash benchmarks/gpu_check.sh [--dry-run]
#   bash benchmarks/gpu_check.sh --trainer   # `train` itself on the curated shards in runs/ (the README's first
#                                            # command, run here first; carry runs/ and pydantic's wheels in .wheels/)
# From the repository root. Wheels carried in .wheels/ (an ignored folder) are installed with --no-index into
# .wheels-site/ first; the check itself needs only torch (and torchao for the FP8 rows, which say why they skip
# without it: carry its wheel, see benchmarks/README.md). --dry-run prints the plan and checks the imports anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".wheels/*.whl" > /dev/null; then
  python3 -m pip install --quiet --no-index --no-deps --target .wheels-site .wheels/*.whl
  export PYTHONPATH="$PYTHONPATH:.wheels-site"
fi
if [[ "${1:-}" == "--dry-run" ]]; then
  exec python3 benchmarks/gpu_check.py --dry-run
fi
if [[ "${1:-}" == "--trainer" ]]; then
  # The small model on the README's mixture, compiled: 40 steps with checkpoints, resumed to 60 (the loss must go on
  # from step 40, not restart), then 20 steps with float8 matmuls; each run's last metrics line.
  out=/tmp/gpu-train
  rm -rf "$out" && mkdir -p "$out"
  printf 'model: small\nseq_len: 1024\nglobal_batch: 8\nmicro_batch: 8\ncompile: true\ncheckpoint_every: 20\neval_every: 20\nlr: 1.0e-3\n' > "$out/small.yaml"
  train() { timeout 200 python3 -m training --mixture mixtures/web70_code20.yaml --config "$out/small.yaml" "$@" || echo "train $* failed: rc $?"; }
  train --steps 40 --out "$out/bf16"
  train --steps 60 --out "$out/bf16" --resume
  train --steps 20 --out "$out/fp8" --fp8 tensorwise
  for run in bf16 fp8; do
    echo "$run: $(tail -n 1 "$out/$run/metrics.jsonl")"
    if [[ -n "${OUT:-}" ]]; then cp "$out/$run/metrics.jsonl" "$OUT/$run-metrics.jsonl"; fi
  done
  exit 0
fi
exec timeout 560 python3 -m torch.distributed.run --standalone --nproc_per_node=1 benchmarks/gpu_check.py "$@"
