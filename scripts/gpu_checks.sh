#!/usr/bin/env bash
# One device call after a change on the step's path: the GPU tests (captured == eager step rows on every
# claims arm, fused == eager, GPU fp32 == CPU fp32 rows, the gate on the GPU, the tree verify on CUDA),
# the step graph's kernels (bench_step_kernels), then the gate's power (scripts/gpu_gate_power.sh),
# everything packed into $OUT/checks.tar.xz as it ends.   device run (carry .whl): bash scripts/gpu_checks.sh
set -uo pipefail
source scripts/gpu_env.sh
W=/tmp/checks && mkdir -p $W
pack() { tar cJf $OUT/checks.tar.xz -C $W . 2>/dev/null; }
S=$SECONDS
timeout ${TEST_S:-300} python3 -m pytest -q -p no:cacheprovider -m gpu tests/run/test_whole_step_graph.py \
  tests/runtime/test_fusion.py tests/run/test_gpu_fp32_rows.py tests/runtime/test_tree_verify.py > $W/gpu_tests.log 2>&1
echo "GPU tests: exit $? in $((SECONDS - S)) s: $(tail -1 $W/gpu_tests.log)"; pack
S=$SECONDS
timeout 120 python3 bench/bench_step_kernels.py --model gpu --batch 64 --k 2 --json $W/step_kernels.json \
  > $W/step_kernels.log 2>&1
echo "step kernels: exit $? in $((SECONDS - S)) s"; grep "^== " $W/step_kernels.log; pack
OUT=$W MODELS=${MODELS:-default} STARTUP=${STARTUP:-0} bash scripts/gpu_gate_power.sh > $W/gate_power.log 2>&1
echo "gate power: exit $?"; grep -E "exit|fails|P\(" $W/gate_power.log | head -20; pack
