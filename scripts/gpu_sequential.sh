#!/usr/bin/env bash
# The claims questions asked sequentially (issue 38), at both model sizes, in one device call:
# +study=claims_sequential (one job drives the questions' arms wave by wave, replay) beside the
# fixed-n +study=claims of the same model, then scripts/sequential_table.py: steps used against the
# fixed-n runs and registrations, and the verdicts. Carry .whl (scripts/gpu_wheels.sh) and, when no
# $CLAIMS_DIR/large from scripts/gpu_claims.sh is there, .carry/data (python -m atlas_ab.train.data).
#   device run: bash scripts/gpu_sequential.sh        (kind nvidia-h200; after gpu_claims.sh in the
#   same call it reuses $CLAIMS_DIR/large and the fixed-n sweeps default_1gpu / large_claims)
# FIXED_N=0: no fixed-n sweep; the fixed-n verdicts and steps are the committed claims report's
# (analysis/reports/claims_2026-12-02: the same shipped model and workload; its 33.6M model is that
# day's training, not this call's), which saves ~1-2 min of device time per model.
# Knobs: CLAIMS_DIR, SEQ_OVERRIDES / CLAIMS_OVERRIDES / TRAIN_OVERRIDES (tiny dry runs on the CPU),
# TRAIN_BUDGET_S (the second model's training when it is not there, default 100), SKIP_WHEELS=1.
set -uo pipefail
source scripts/gpu_env.sh
W=${CLAIMS_DIR:-/tmp/claims} && mkdir -p $W $OUT && cd $W
log() { echo "[$(date +%T)] $*" | tee -a $OUT/sequential.log; }
RUN=(python3 -m atlas_ab -m runner.progress=false)
log "code: $(python3 -m atlas_ab.run.provenance 2>&1)"
TRAIN=
if [ ! -f $W/large/model.safetensors ]; then
  log "training the second model (preset gpu, ${TRAIN_BUDGET_S:-100} s) beside the shipped model's studies"
  timeout $(( ${TRAIN_BUDGET_S:-100} + 60 )) python3 -m atlas_ab.train.train --preset gpu --out $W/large \
    --data $REPO/.carry/data --tokenizer $REPO/atlas_ab/models/default/tokenizer.json \
    --budget-s ${TRAIN_BUDGET_S:-100} ${TRAIN_OVERRIDES:-} > $W/train_large_seq.log 2>&1 &
  TRAIN=$!
fi
ROWS=()
for m in default large; do
  MODEL=()
  if [ $m = large ]; then
    [ -n "$TRAIN" ] && { wait $TRAIN; log "training: exit $?"; TRAIN=; }
    [ -f $W/large/model.safetensors ] || { log "no second model: $m skipped"; continue; }
    MODEL=(model=path model.path=$W/large)
  fi
  FIXED_JSON=$W/${m}_fixed_report/report.json
  if [ "${FIXED_N:-1}" = 0 ]; then
    FIXED_JSON=$REPO/analysis/reports/claims_2026-12-02/report.json
  else
    FIXED=$W/${m}_1gpu; [ $m = large ] && FIXED=$W/large_claims
    [ -d $FIXED ] || FIXED=$W/${m}_fixed_seq
    if [ ! -d $FIXED ]; then
      S=$SECONDS
      timeout 240 "${RUN[@]}" ${CLAIMS_OVERRIDES:-} +study=claims "${MODEL[@]}" hydra.sweep.dir=$FIXED \
        runner.trajectories=$W/traj_seq_$m > $W/${m}_fixed_seq.log 2>&1
      log "fixed-n claims $m: exit $? in $((SECONDS - S)) s"
    fi
    timeout 120 python3 -m atlas_ab.analysis report $FIXED/* --out $W/${m}_fixed_report --bootstrap 0 \
      > $W/${m}_fixed_report.log 2>&1
    log "fixed-n report $m: exit $?"
  fi
  S=$SECONDS
  timeout 240 "${RUN[@]}" ${SEQ_OVERRIDES:-} +study=claims_sequential "${MODEL[@]}" hydra.sweep.dir=$W/${m}_sequential \
    runner.trajectories=$W/traj_seq_$m > $W/${m}_sequential.log 2>&1
  log "sequential claims $m: exit $? in $((SECONDS - S)) s"
  grep -A30 "^sequential study" $W/${m}_sequential.log | tee -a $OUT/sequential.log
  timeout 120 python3 -m atlas_ab.analysis report $W/${m}_sequential/* --out $OUT/report_$m --bootstrap 0 \
    > $OUT/report_$m.log 2>&1
  log "sequential report $m: exit $?"
  cp $W/${m}_sequential/study.json $OUT/study_$m.json 2>/dev/null
  cp $FIXED_JSON $OUT/fixed_report_$m.json 2>/dev/null
  ROWS+=("$m=$W/${m}_sequential:$FIXED_JSON")
done
python3 $REPO/scripts/sequential_table.py --out $OUT "${ROWS[@]}" 2>&1 | tee -a $OUT/sequential.log
mkdir -p $W/seq_logs && cp $W/*.log $W/seq_logs/ 2>/dev/null && tar cJf $OUT/seq_logs.tar.xz -C $W seq_logs
log "done"
