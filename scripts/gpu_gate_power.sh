#!/usr/bin/env bash
# One device call for the lossless gate's power and bound on the GPU (issue 37), results as JSON in $OUT:
#   gate_power_{default,llama8b}.json   bench/bench_gate_power.py --device cuda (20 seeded runs per cell)
#   gate_bound_{default,llama8b}.json   bench/bench_gate_bound.py --device cuda (is SAFETY enough here?)
#   startup_gate8.json                  bench/bench_startup.py --model llama8b: the gate / the steps' time at
#                                       the GPU's default 8 gated sequences a wave (STARTUP=0 skips it)
#   gpu_gate_tests.txt                  pytest -m gpu tests/speculative/test_gpu_gate.py (TESTS=0 skips it)
#   device run (carry .whl): bash scripts/gpu_gate_power.sh      (nvidia-h200; ~4-5 min; MODELS="default" for one)
set -uo pipefail
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for m in ${MODELS:-default llama8b}; do
  S=$SECONDS
  timeout 150 python3 bench/bench_gate_power.py --device cuda --model $m --json $OUT/gate_power_$m.json \
    2> $OUT/gate_power_$m.err | tee $OUT/gate_power_$m.txt
  echo "gate power $m: exit ${PIPESTATUS[0]} in $((SECONDS - S)) s"; tail -3 $OUT/gate_power_$m.err
  S=$SECONDS
  timeout 90 python3 bench/bench_gate_bound.py --device cuda --model $m --json $OUT/gate_bound_$m.json \
    2> $OUT/gate_bound_$m.err | tee $OUT/gate_bound_$m.txt
  echo "gate bound $m: exit ${PIPESTATUS[0]} in $((SECONDS - S)) s"; tail -3 $OUT/gate_bound_$m.err
done
if [ "${STARTUP:-1}" = 1 ]; then
  timeout 120 python3 bench/bench_startup.py --model llama8b --json $OUT/startup_gate8.json 2> $OUT/startup_gate8.err \
    | tail -8
fi
if [ "${TESTS:-1}" = 1 ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/speculative/test_gpu_gate.py 2>&1 \
    | grep -v "^$" | tail -12 | tee $OUT/gpu_gate_tests.txt
fi
