#!/usr/bin/env bash
# One short device call for the whole-step graph: its GPU tests, then the runner grid with a profile.
#   device run (carry .whl_gpu): WHL=.whl_gpu bash scripts/gpu_quick.sh
#   knobs: MODELS=gpu WIDTHS=64 PROFILE=64,2 TESTS=1 (0: skip the GPU tests) ONLY_GRID=--only-grid (empty: levers too)
set -uo pipefail
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tail -15
fi
timeout ${BENCH_S:-200} python3 bench/bench_runner.py --models ${MODELS:-gpu} ${ONLY_GRID---only-grid} --widths ${WIDTHS:-64} \
  --profile ${PROFILE:-64,2} --json $OUT/bench_runner_$(echo ${MODELS:-gpu} | tr , _).json 2>&1 | grep -v '^ *"\|^{\|^}\|^ *[]}{]' | tail -40
