#!/usr/bin/env bash
# The claims study (issue #12) in one device call, and the same sweep spread over two GPUs
# (issue #14) when the machine has two. Carry .whl (scripts/gpu_wheels.sh) and .carry/data
# (python -m atlas_ab.train.data ... --out .carry/data: this machine's train split).
#   device run: bash scripts/gpu_claims.sh      (kind nvidia-h200-x2, or nvidia-h200)
# Stages, each timed and packed into $OUT as soon as it ends (a call that runs out of time
# still returns what finished):
#   1. the second model, trained the same way (preset gpu: 33.6M), on the last GPU, while
#      GPU 0 runs +study=claims on the shipped model with one GPU (the single-GPU timing)
#   2. two GPUs: the same sweep over both (hydra/launcher=local_gpus): its wall time against
#      stage 1's, its step tables against stage 1's (they must be identical), the device each
#      job claimed
#   3. +study=claims on the second model (over every GPU)
#   4. +study=claims_conf (live, batch width 1) for the models in CONF_MODELS, one GPU each;
#      GPU0_EXTRA (a command) runs on GPU 0 beside the second model's sweep when set
#   5. (SAMPLED=1) claims question 7, REFEED under sampling (issue 22): +study=claims_sampled and
#      +study=claims_sampled_t10 for the models in SAMPLED_MODELS, then
#      python -m atlas_ab.analysis claims <every sweep dir> --out DIR answers it beside the others
# Knobs: CONF_MODELS ("default large"), SAMPLED, SAMPLED_MODELS ("default large"), GPU0_EXTRA,
# SKIP_TWO_GPU=1 (no stage 2), SAMPLED_DEFAULT_ON_GPU0=1 (the shipped model's sampled studies on GPU 0
# while GPU 1 trains), ONLY_SAMPLED=1 (stage 5 alone, over a $CLAIMS_DIR/large a previous call trained),
# CLAIMS_OVERRIDES / TRAIN_OVERRIDES (tiny dry runs on the CPU), SKIP_WHEELS=1, CLAIMS_DIR.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source scripts/gpu_env.sh
NG=$(python3 -c "import torch; print(torch.cuda.device_count())")
LAST=$(( NG > 1 ? NG - 1 : 0 ))
W=${CLAIMS_DIR:-/tmp/claims} && mkdir -p $W && cd $W
log() { echo "[$(date +%T)] $*" | tee -a $OUT/claims.log; }
pack() { python3 $REPO/scripts/pack_runs.py --out $OUT --events refeed_on --name "$@" | tee -a $OUT/claims.log; }
RUN=(python3 -m atlas_ab -m runner.progress=false ${CLAIMS_OVERRIDES:-})
L=(hydra/launcher=local_gpus)
[ "$NG" -lt 2 ] && L=()
nvidia-smi --query-gpu=index,name,memory.total --format=csv 2>&1 | tee -a $OUT/claims.log
log "GPUs: $NG"
log "code: $(python3 -m atlas_ab.run.provenance 2>&1)"   # the hash every run's manifest records as code.hash

sampled_for() {   # stage 5 for one model: claims_sampled (T 0.7) and claims_sampled_t10 (T 1.0)
  local m=$1; shift
  local MODEL=()
  [ $m != default ] && MODEL=(model=path model.path=$W/large)
  [ $m != default ] && [ ! -f $W/large/model.safetensors ] && return
  for s in claims_sampled claims_sampled_t10; do
    S=$SECONDS
    timeout 240 "${RUN[@]}" "$@" +study=$s "${MODEL[@]}" hydra.sweep.dir=$W/${m}_$s \
      runner.trajectories=$W/traj_${m}_$s > $W/${m}_$s.log 2>&1
    log "$s $m: exit $? in $((SECONDS - S)) s"
  done
}

if [ -z "${ONLY_SAMPLED:-}" ]; then

log "stage 1: train the second model (GPU $LAST) | claims on the shipped model, one GPU (GPU 0)"
CUDA_VISIBLE_DEVICES=$LAST timeout 200 python3 -m atlas_ab.train.train --preset gpu --out $W/large \
  --data $REPO/.carry/data --tokenizer $REPO/atlas_ab/models/default/tokenizer.json --budget-s 140 \
  ${TRAIN_OVERRIDES:-} > $W/train_large.log 2>&1 &
TRAIN=$!
S=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 300 "${RUN[@]}" +study=claims hydra.sweep.dir=$W/default_1gpu \
  runner.trajectories=$W/traj_1gpu > $W/default_1gpu.log 2>&1
log "claims default, 1 GPU: exit $? in $((SECONDS - S)) s"
if [ -n "${SAMPLED_DEFAULT_ON_GPU0:-}" ]; then
  log "stage 5 (shipped model) on GPU 0 while the second model trains"
  CUDA_VISIBLE_DEVICES=0 sampled_for default
  pack sampled_default $W/default_claims_sampled $W/default_claims_sampled_t10
fi
wait $TRAIN; log "training: exit $?"; tail -3 $W/train_large.log | tee -a $OUT/claims.log
pack claims_default $W/default_1gpu

if [ "$NG" -ge 2 ] && [ -z "${SKIP_TWO_GPU:-}" ]; then
  log "stage 2: claims on the shipped model over $NG GPUs (issue #14)"
  S=$SECONDS
  timeout 200 "${RUN[@]}" "${L[@]}" +study=claims hydra.sweep.dir=$W/default_2gpu \
    runner.trajectories=$W/traj_2gpu > $W/default_2gpu.log 2>&1
  log "claims default, $NG GPUs: exit $? in $((SECONDS - S)) s"
  python3 $REPO/scripts/compare_sweeps.py $W/default_1gpu $W/default_2gpu > $W/sweeps_1v2.json
  log "1 vs $NG GPUs: $(python3 -c "import json; d = json.load(open('$W/sweeps_1v2.json')); print('identical steps:', d['all_identical'], '| seconds', d['a']['seconds'], 'vs', d['b']['seconds'], '| devices', sorted(set(d['b']['devices'].values())))" 2>&1)"
fi

if [ -f $W/large/model.safetensors ]; then
  log "stage 3: claims on the second model over $NG GPU(s)"
  S=$SECONDS
  timeout 240 "${RUN[@]}" "${L[@]}" +study=claims model=path model.path=$W/large \
    hydra.sweep.dir=$W/large_claims runner.trajectories=$W/traj_large > $W/large_claims.log 2>&1
  log "claims large: exit $? in $((SECONDS - S)) s"
  pack claims_large $W/large_claims
fi

log "stage 4: claims_conf (live, batch width 1) for: ${CONF_MODELS:-default large}"
PIDS=()
for m in ${CONF_MODELS:-default large}; do
  if [ $m = default ]; then MODEL=(); G=0; else MODEL=(model=path model.path=$W/large); G=$LAST; fi
  [ $m != default ] && [ ! -f $W/large/model.safetensors ] && continue
  CUDA_VISIBLE_DEVICES=$G timeout 200 "${RUN[@]}" +study=claims_conf "${MODEL[@]}" \
    hydra.sweep.dir=$W/${m}_conf > $W/${m}_conf.log 2>&1 &
  PIDS+=($!)
  [ "$NG" -lt 2 ] && wait $!
done
if [ -n "${GPU0_EXTRA:-}" ]; then
  log "GPU 0 meanwhile: $GPU0_EXTRA"
  (cd $REPO && CUDA_VISIBLE_DEVICES=0 bash -c "$GPU0_EXTRA") > $W/gpu0_extra.log 2>&1
  log "GPU 0 extra: exit $?"
fi
for p in "${PIDS[@]}"; do wait $p; log "claims_conf job: exit $?"; done
pack claims_conf $W/*_conf
fi   # ONLY_SAMPLED

if [ -n "${SAMPLED:-}" ]; then
  # issue 22: does REFEED's gain survive sampling? T 0.7 and 1.0, sampled and greedy drafts, coupled replay
  log "stage 5: claims_sampled (T 0.7) and claims_sampled_t10 (T 1.0) for: ${SAMPLED_MODELS:-default large}"
  for m in ${SAMPLED_MODELS:-default large}; do
    sampled_for $m "${L[@]}"
  done
  pack claims_sampled $W/*_claims_sampled $W/*_claims_sampled_t10
fi
mkdir -p $W/logs && cp $W/*.log $W/*.json $W/large/config.json $W/large/training.json $W/logs/ 2>/dev/null
tar cJf $OUT/logs.tar.xz -C $W logs
log "done"
