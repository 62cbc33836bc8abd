#!/usr/bin/env bash
# The K ladder (issue 39) on one GPU: +study=ladder (K 0..K_MAX at each batch width, live, step by
# step, one wave a job) at three models, then `python -m atlas_ab.analysis ladder` for each, writing
# the ladders and the engine configs under $OUT. Carry .whl (scripts/gpu_wheels.sh).
#   device run: bash scripts/gpu_ladder.sh      (kind nvidia-h200)
#   1. default:  the shipped 7.3M model (trained): its acceptance is the one every ladder uses
#   2. gpu:      the 33.6M preset, random weights (runtime/presets.py, conf/model/gpu.yaml): timing only
#   3. llama8b:  the 5.7B-trunk shape, random weights (conf/model/llama8b.yaml): timing only
# Acceptance on random weights means nothing, so the gpu and llama8b ladders take their acceptance
# from the default model's runs (--acceptance) and their step times from their own; each ladder.md
# says so. Each stage is timed and packed into $OUT as soon as it ends.
# One turn a document (workload.turns=1: 31 batched steps a job) keeps the three sweeps (72 jobs, each a
# model build and one wave) near 4 minutes of H200 time; a stage cut by its timeout keeps its complete
# runs (the others are moved aside) and its ladder covers the widths that have every K.
# Each (B, K) is timed in REPLICATES jobs (study.replicates, default 3) in the study's seeded interleaved
# order, and the ladder pools them by random effects (docs/analysis.md); with REPLICATES=1 the ladders are
# "single replicate: not a verdict" and write no engine config. Three replicates triple a stage: run one
# model a device call (MODELS=default, then MODELS=llama8b ACCEPTANCE_RUNS=<the default's runs, unpacked
# from ladder_runs_default.tar.xz>), each within the call's 600 s.
# Knobs: MODELS ("default gpu llama8b"), WIDTHS ("[1,4,8,16,64,256]"), K_MAX (3), REPLICATES (3),
# ORDER_SEED (0), LADDER_OVERRIDES (after workload.turns=1; tiny dry runs on the CPU), STAGE_TIMEOUT (s;
# default REPLICATES x 120 for default and gpu (70 cut the B=256 jobs on 2026-12-02), REPLICATES x 170 for
# llama8b, whose 24 jobs a replicate each build 11 GB of weights), ACCEPTANCE_RUNS (the default model's
# runs the shapes take acceptance from; default $LADDER_DIR/default), SKIP_WHEELS=1, LADDER_DIR.
# A CPU check at a tiny size (no GPU, no wheels):
#   SKIP_WHEELS=1 OUT=/tmp/ladder_out MODELS="default gpu" WIDTHS="[1,2]" K_MAX=1 \
#     LADDER_OVERRIDES="workload.turns=1 workload.chunk_tokens=16 workload.gen_tokens=8 study.waves=10 \
#     model.hidden_size=64 model.num_hidden_layers=2 model.num_attention_heads=4 model.num_key_value_heads=2 \
#     model.intermediate_size=96" bash scripts/gpu_ladder.sh
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:?set OUT}
W=${LADDER_DIR:-/tmp/ladder} && rm -rf $W && mkdir -p $W $OUT
log() { echo "[$(date +%T)] $*" | tee -a $OUT/ladder.log; }
pack() { python3 $REPO/scripts/pack_runs.py --out $OUT --name "$@" | tee -a $OUT/ladder.log; }
R=${REPLICATES:-3}
GRID=("study.widths=${WIDTHS:-[1,4,8,16,64,256]}" "study.k_max=${K_MAX:-3}" "study.replicates=$R"
      "study.order_seed=${ORDER_SEED:-0}")
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total --format=csv 2>&1 | tee -a $OUT/ladder.log
log "code: $(cd $REPO && python3 -m atlas_ab.run.provenance 2>&1)"

for m in ${MODELS:-default gpu llama8b}; do
  S=$SECONDS
  MODEL=()
  # model overrides in LADDER_OVERRIDES apply to random-weight shapes only (a checkpoint's config.json decides)
  OV=(workload.turns=1 ${LADDER_OVERRIDES:-})
  if [ $m = default ]; then OV=($(printf '%s\n' "${OV[@]}" | grep -v '^model\.')); else MODEL=(model=$m); fi
  T=${STAGE_TIMEOUT:-$(( R * $([ $m = llama8b ] && echo 170 || echo 120) ))}
  (cd $W && timeout $T python3 -m atlas_ab -m +study=ladder "${MODEL[@]}" "${GRID[@]}" \
     runner.progress=false hydra.sweep.dir=$W/$m "${OV[@]}") > $W/$m.log 2>&1
  log "ladder sweep $m: exit $? in $((SECONDS - S)) s ($(ls -d $W/$m/*_k* 2>/dev/null | wc -l) runs)"
  tail -2 $W/$m.log | tee -a $OUT/ladder.log
  for d in $W/$m/*_k*; do   # a job cut by the timeout is not a result
    grep -q '"status": "complete"' $d/manifest.json 2>/dev/null || { mkdir -p $W/${m}_cut; mv $d $W/${m}_cut/; log "cut: $d"; }
  done
  pack ladder_runs_$m $W/$m
done
# the widths of a sweep whose every K (0..K_MAX) ran to completion
widths() { python3 -c "
import json, pathlib, sys
cells = {}
for m in pathlib.Path(sys.argv[1]).glob('*_k*/manifest.json'):
    j = json.loads(m.read_text()); cells.setdefault(j['waves']['batch_width'], set()).add(j['levers']['num_drafts'])
print(' '.join(str(b) for b, ks in sorted(cells.items()) if ks >= set(range(int(sys.argv[2]) + 1))))" $1 ${K_MAX:-3}; }

# the ladders: the default model's from its own runs; the shapes' timing with the default's acceptance
for m in ${MODELS:-default gpu llama8b}; do
  ACC=()
  [ $m != default ] && ACC=(--acceptance ${ACCEPTANCE_RUNS:-$W/default})
  WS=$(widths $W/$m)
  [ -z "$WS" ] && { log "ladder $m: no width has every K"; continue; }
  ONE=()
  [ $R = 1 ] && ONE=(--allow-single-replicate)   # asked for one replicate: configs written, headed "not a verdict"
  python3 -m atlas_ab.analysis ladder $W/$m "${ACC[@]}" --widths $WS "${ONE[@]}" --out $OUT/ladder_$m > $OUT/ladder_$m.txt 2> $OUT/ladder_$m.err
  rc=$?
  log "ladder $m: exit $rc ($(tail -1 $OUT/ladder_$m.err 2>/dev/null))"
  if [ $rc = 2 ] && grep -q "their kind's median" $OUT/ladder_$m.err; then   # a stall: kept, and said so
    python3 -m atlas_ab.analysis ladder $W/$m "${ACC[@]}" --widths $WS "${ONE[@]}" --allow-outliers \
      --out $OUT/ladder_${m}_outliers_kept > $OUT/ladder_${m}_outliers_kept.txt 2>> $OUT/ladder_$m.err
    log "ladder $m with --allow-outliers: exit $? (ladder_${m}_outliers_kept)"
  fi
  grep -hE 'pays|not known|replicates per cell' $OUT/ladder_$m*.txt | tee -a $OUT/ladder.log
done
log "if an analysis failed here (matplotlib or statsmodels missing on the device), unpack ladder_runs_*.tar.xz and run"
log "  python -m atlas_ab.analysis ladder RUNS_default --out ladder_default"
log "  python -m atlas_ab.analysis ladder RUNS_gpu --acceptance RUNS_default --out ladder_gpu   (llama8b the same)"
log "done"
