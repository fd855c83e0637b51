#!/usr/bin/env bash
# --estimate of every paper preset on stand-in data, on the GPU node this runs on (fedsweep installed, as on a
# cluster node): writes the table into docs/benchmarks/paper_presets.md and, with $OUT set, a copy there.
# Run from the repository root:  bash benchmarks/gpu_paper_presets.sh [--gpus 8]
set -euo pipefail
export PYTHONUNBUFFERED=1
export RAY_TMPDIR=${RAY_TMPDIR:-$(mktemp -d /tmp/ray-presets.XXXX)}  # never join another cluster on the machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi: CPU figures"
python -m benchmarks.paper_presets "$@" | tee "${OUT:-/tmp}/paper_presets.txt"
