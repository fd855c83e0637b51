#!/usr/bin/env bash
# round_throughput on a GPU machine without Ray: no Ray and no pip install there, so the platform paths run one ClientPool
# in-process and our `platform` package is put first by hand. Run from the repository root; each run's output goes
# to $OUT (default /tmp/gpu_rt). One process per (workload, batched convolutions): workload:timeout_s:rounds:conv.
OUT=${OUT:-/tmp/gpu_rt}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch,sys; print('torch', torch.__version__, 'python', sys.version.split()[0], torch.cuda.get_device_name(0))"
for spec in ${SPECS:-digits_cnn:90:3:default digits32_resnet8:90:3:default cifar_pfl:100:3:default cifar_pfl:100:3:grouped cifar_pfl_1000:170:2:default}; do
  IFS=: read -r w t n conv <<< "$spec"
  echo "=== $w ($conv convolutions) $(date +%T)"
  timeout "$t" python3 -c "import sys; sys.path.insert(0,'.'); sys.modules.pop('platform',None); import platform; assert hasattr(platform,'__path__'); import runpy; sys.argv=['round_throughput','--device','cuda','--in-process','--workloads','$w','--rounds','$n','--quiet-wait','0','--batched-convolutions','$conv','--json']; runpy.run_module('benchmarks.round_throughput', run_name='__main__')" 2>&1 | tee "$OUT/gpu_${w}_$conv.txt"
done
echo "=== done $(date +%T)"
