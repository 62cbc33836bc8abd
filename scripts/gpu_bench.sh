#!/usr/bin/env bash
# Benchmarks, GPU tests and the 5.7B end-to-end run in one device call (carry .whl), two GPUs
# used side by side when the machine has two (each bench owns one GPU).
#   device run: bash scripts/gpu_bench.sh     (nvidia-h200-x2, or nvidia-h200: then one after the other)
#   A. bench/bench_runner.py (GPU 0) | bench/bench_forward.py, then bench_runner's 5.7B grid (the other GPU)
#   (ONLY_SWEEP=1: C alone)
#   C. with TWO_GPU_SWEEP=1 on two GPUs: +study=claims on one GPU, then over both (issue #14):
#      wall times, identical step tables, the device each job claimed (scripts/compare_sweeps.py)
#   B. the GPU tests (GPU 0) | the 5.7B arm end to end, 64 documents x 8 turns (model=llama8b),
#      then bench/bench_replay.py (the other GPU)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source scripts/gpu_env.sh
NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
G1=$(( NG > 1 ? 1 : 0 ))
W=/tmp/bench && mkdir -p $W
log() { echo "[$(date +%T)] $*" | tee -a $OUT/bench.log; }
side() { if [ "$NG" -gt 1 ]; then "$@" & else "$@"; fi; }
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a $OUT/bench.log
log "code: $(python3 -m atlas_ab.run.provenance 2>&1)"   # the hash every run's manifest records as code.hash

if [ -z "${ONLY_SWEEP:-}" ]; then
log "A: bench_runner (GPU 0) | bench_forward, then the 5.7B runner grid (GPU $G1)"
side bash -c "CUDA_VISIBLE_DEVICES=$G1 timeout 200 python3 bench/bench_forward.py --json $OUT/bench_forward.json \
  --budget-s 150 > $W/bench_forward.log 2>&1; echo \"[\$(date +%T)] bench_forward: exit \$?\" >> $OUT/bench.log; \
  CUDA_VISIBLE_DEVICES=$G1 timeout 100 python3 bench/bench_runner.py --models llama8b --only-grid --widths 16,64 \
  --json $OUT/bench_runner_8b.json > $W/bench_runner_8b.log 2>&1; echo \"[\$(date +%T)] bench_runner 5.7B: exit \$?\" >> $OUT/bench.log"
CUDA_VISIBLE_DEVICES=0 timeout 220 python3 bench/bench_runner.py --json $OUT/bench_runner.json > $W/bench_runner.log 2>&1
log "bench_runner: exit $?"
wait

fi

if [ -n "${TWO_GPU_SWEEP:-}" ] && [ "$NG" -ge 2 ]; then
  log "C: the one-GPU vs two-GPU claims sweep (issue #14)"
  cd $W
  S=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m atlas_ab -m runner.progress=false +study=claims \
    hydra.sweep.dir=$W/s1 runner.trajectories=$W/t1 > $W/s1.log 2>&1
  log "one GPU: exit $? in $((SECONDS - S)) s"
  S=$SECONDS
  timeout 90 python3 -m atlas_ab -m runner.progress=false hydra/launcher=local_gpus +study=claims \
    hydra.sweep.dir=$W/s2 runner.trajectories=$W/t2 > $W/s2.log 2>&1
  log "two GPUs: exit $? in $((SECONDS - S)) s"
  python3 $REPO/scripts/compare_sweeps.py $W/s1 $W/s2 > $OUT/sweeps_1v2.json 2>>$W/s2.log
  log "$(python3 -c "import json; d = json.load(open('$OUT/sweeps_1v2.json')); print('identical steps:', d['all_identical'], '| seconds', d['a']['seconds'], 'vs', d['b']['seconds'], '| devices', d['b']['devices'])" 2>&1)"
  cd $REPO
fi

if [ -z "${ONLY_SWEEP:-}" ]; then
log "B: GPU tests (GPU 0) | 5.7B end to end, then bench_replay (GPU $G1)"
side bash -c "cd $W && CUDA_VISIBLE_DEVICES=$G1 timeout 120 python3 -m atlas_ab model=llama8b workload.n_docs=64 \
  runner.batch_width=64 runner.progress=false hydra.run.dir=$W/llama8b > $W/llama8b.log 2>&1; \
  echo \"[\$(date +%T)] 5.7B run: exit \$? \" >> $OUT/bench.log; cp $W/llama8b/manifest.json $OUT/llama8b_manifest.json; \
  cd $REPO && CUDA_VISIBLE_DEVICES=$G1 timeout 90 python3 bench/bench_replay.py --json $OUT/bench_replay.json \
  > $W/bench_replay.log 2>&1; echo \"[\$(date +%T)] bench_replay: exit \$?\" >> $OUT/bench.log"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $W/gpu_tests.log 2>&1
log "GPU tests: exit $? $(tail -1 $W/gpu_tests.log)"
wait
fi
mkdir -p $W/logs && cp $W/*.log $W/logs/ 2>/dev/null
tar cJf $OUT/bench_logs.tar.xz -C $W logs
log "done"
