#!/usr/bin/env bash
# One prepared check of the trainer's GPU path for a lent H200 (no package index there; under 10 minutes):
#   bash benchmarks/gpu_check.sh [--dry-run]
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
exec timeout 560 python3 -m torch.distributed.run --standalone --nproc_per_node=1 benchmarks/gpu_check.py "$@"
