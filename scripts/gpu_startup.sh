#!/usr/bin/env bash
# One device call for start-up and the gate at the 5.7B shape: the gate's GPU tests, then
# bench_startup twice (cold, then warm Triton cache) with the Runner build profiled.
#   device run (carry .whl_gpu): WHL=.whl_gpu bash scripts/gpu_startup.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/speculative/test_gpu_gate.py tests/run/test_gpu_runner.py 2>&1 | tail -25
fi
python3 -X importtime -c "import torch, atlas_ab.run.runner" 2> $OUT/importtime.txt
sort -t'|' -k2 -n $OUT/importtime.txt | tail -12
for run in ${RUNS:-cold warm}; do
  timeout 200 python3 bench/bench_startup.py --model ${MODEL:-llama8b} --profile --json $OUT/startup_$run.json 2> $OUT/startup_$run.err | tail -30
  grep -A40 "Ordered by" $OUT/startup_$run.err | head -45; tail -4 $OUT/startup_$run.err
done
