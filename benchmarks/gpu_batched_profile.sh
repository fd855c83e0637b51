#!/usr/bin/env bash
# On a GPU machine without Ray (no Ray, MLflow or Optuna there; nothing installed): where the batched client step
# spends its time, then the round-throughput table. Run from the repository root; every output goes to $OUT.
#   bash benchmarks/gpu_batched_profile.sh
# 1. benchmarks.profile_batched, 100 leaf_cnn clients: dropout masks drawn on the host (--masks host) and on the device
#    (the default), each with the profiler's tables (15 rows); then 1,000 clients both ways, timings only.
# 2. benchmarks/gpu_round_throughput.sh: raw loop, sequential pool, batched pool and `auto`'s pick per workload.
# On an H200 it took about 8.5 minutes (cifar_pfl_1000 alone 3): give the device call 600 s.
OUT=${OUT:-/tmp/gpu_rt}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
profile() {  # file timeout_s args...
  local name=$1 t=$2; shift 2
  echo "=== profile $* $(date +%T)" | tee -a "$OUT/profile_$name.txt"
  timeout "$t" python3 -c "import sys; sys.path.insert(0,'.'); sys.modules.pop('platform',None); import platform; assert hasattr(platform,'__path__'); import runpy; sys.argv=['profile_batched']+sys.argv[1:]; runpy.run_module('benchmarks.profile_batched', run_name='__main__')" \
    --device cuda "$@" 2>&1 | grep -v "^\(USDT\|ERROR\|WARNING\):" | tee -a "$OUT/profile_$name.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/card.txt"
python3 -c "import torch,sys; print('torch', torch.__version__, 'python', sys.version.split()[0], torch.cuda.get_device_name(0))" | tee -a "$OUT/card.txt"
profile 100_host 60 --clients 100 --rows 15 --masks host
profile 100_device 60 --clients 100 --rows 15 --masks device
profile 1000 120 --clients 1000 --no-profile --masks host
profile 1000 90 --clients 1000 --no-profile --masks device
SPECS=${SPECS:-digits_cnn:80:3:default digits32_resnet8:80:3:default cifar_pfl:90:3:default cifar_pfl_1000:280:2:default} \
  OUT="$OUT/rt" bash benchmarks/gpu_round_throughput.sh
