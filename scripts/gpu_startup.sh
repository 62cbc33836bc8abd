#!/usr/bin/env bash
# One device call for start-up and the gate at the 5.7B shape: the gate's GPU tests, where the
# interpreter's bytecode comes from, then bench_startup (RUNS: cold = a fresh Triton cache,
# warm = kept; warm_pyc = kept and Python's bytecode cached under PYTHONPYCACHEPREFIX).
#   device run (carry .whl_gpu): WHL=.whl_gpu bash scripts/gpu_startup.sh
set -uo pipefail
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu ${GPU_TESTS:-tests/speculative/test_gpu_gate.py} 2>&1 | grep -v "^$" | tail -12
fi
python3 - <<'PY'
import os, sys, sysconfig, importlib.util
spec = importlib.util.find_spec("torch"); d = os.path.dirname(spec.origin)
print("torch dir", d, "writable", os.access(d, os.W_OK), "dont_write_bytecode", sys.flags.dont_write_bytecode,
      "pycache there", os.path.isdir(os.path.join(d, "__pycache__")), "PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"))
PY
# the image sets PYTHONDONTWRITEBYTECODE=1 and ships torch without bytecode, so every process
# compiles torch's sources again; *_pyc runs let Python cache bytecode, as an install does by default
for run in ${RUNS:-cold_pyc warm_pyc warm}; do
  pre=""; case $run in *_pyc) pre="env PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc";; esac
  timeout 200 $pre python3 bench/bench_startup.py --model ${MODEL:-llama8b} --profile --json $OUT/startup_$run.json 2> $OUT/startup_$run.err >/dev/null
  echo "== $run"; python3 -c "
import json; j = json.load(open('$OUT/startup_$run.json'))
print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in j.items() if not isinstance(v, (dict, list))})
for w in ('first_wave', 'same_wave_again'): print(w, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in j[w].items()})"
  tail -4 $OUT/startup_$run.err
done
