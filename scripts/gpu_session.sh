#!/usr/bin/env bash
# One device call: GPU tests, the front end's default run on the GPU, the runner bench.
# Usage (device tool, carry .whl): bash scripts/gpu_session.sh
set -uo pipefail
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/gpu.txt
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" | tee -a $OUT/gpu.txt
python3 -m atlas_ab.run.provenance 2>&1 | tee -a $OUT/gpu.txt   # the code hash the runs' manifests record
echo "== gpu tests"; python3 -m pytest -q -p no:cacheprovider -m gpu tests/ 2>&1 | tee $OUT/gpu_tests.log | tail -8
echo "== default run on the GPU"; ( time python3 -m atlas_ab +arm=refeed_on runner.progress=false hydra.run.dir=/tmp/run_refeed ) 2>&1 | tail -6 | tee $OUT/run.log
python3 -m atlas_ab.analysis fingerprints /tmp/run_refeed 2>&1 | tail -8 | tee -a $OUT/run.log
tar czf $OUT/run_refeed.tgz -C /tmp run_refeed
echo "== bench"; python3 bench/bench_runner.py ${BENCH_ARGS:-} --json $OUT/bench.json 2> $OUT/bench.err | tail -3; tail -40 $OUT/bench.err
