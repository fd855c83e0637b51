#!/usr/bin/env bash
# The round_throughput figures on a lent GPU machine (no Ray, no pip install there: our `platform` package is put
# first by hand). Run from the repository root; writes each workload's output to $OUT (default: /tmp/gpu_rt).
OUT=${OUT:-/tmp/gpu_rt}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch,sys; print('torch', torch.__version__, 'python', sys.version.split()[0], torch.cuda.get_device_name(0))"
for spec in digits_cnn:90:3 digits32_resnet8:90:3 cifar_pfl:100:3 cifar_pfl_1000:170:2; do IFS=: read w t n <<< "$spec"
  echo "=== $w $(date +%T)"
  timeout $t python3 -c "import sys; sys.path.insert(0,'.'); sys.modules.pop('platform',None); import platform; assert hasattr(platform,'__path__'); import runpy; sys.argv=['round_throughput','--device','cuda','--in-process','--workloads','$w','--rounds','$n','--quiet-wait','0','--json']; runpy.run_module('benchmarks.round_throughput', run_name='__main__')" 2>&1 | tee $OUT/gpu_$w.txt
done
echo "=== done $(date +%T)"
