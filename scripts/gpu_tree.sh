#!/usr/bin/env bash
# Issue 40 on the device, both model sizes in one call: the tree study (claims question 8: the
# top-2 tree against the linear K=2 chain, live, its steps captured as CUDA graphs on the Triton
# path), the SHADOW_TOPK run of the same documents that its prediction reads, the prediction
# (coverage --tree), the report with the registered verdict, the tree study replayed on one stored
# trajectory (the paired look), and the baseline without run-ahead (a tree step does not run
# ahead, so the cost side compares both ways). Then the tree arms' GPU tests.
#   device run (carry .whl and .carry/data: scripts/gpu_wheels.sh, python -m atlas_ab.train.data):
#     bash scripts/gpu_tree.sh
# The second model is the 33.6M preset trained here (TRAIN_BUDGET_S, default 100 s, beside the
# shipped model's runs), or MODEL_DIR=DIR. Writes per model into $OUT: the prediction, the report
# and verdict, the logs, and the runs as one tar (runs_<model>.tar.xz).
# Knobs: N_DOCS (32: the tree arm then verifies > 2,000 steps), TREE_OVERRIDES / TRAIN_OVERRIDES
# (tiny dry runs on the CPU), PARTS (a subset of "shadow tree baseline_step tree_replay sampled analysis"),
# SKIP_TESTS=1, SKIP_WHEELS=1, TREE_DIR.
set -uo pipefail
source scripts/gpu_env.sh
W=${TREE_DIR:-/tmp/tree} && mkdir -p $W $OUT
log() { echo "[$(date +%T)] $*" | tee -a $OUT/tree.log; }
read -r -a O <<< "${TREE_OVERRIDES:-}"
PARTS=${PARTS:-shadow tree baseline_step tree_replay sampled analysis}
has() { [[ " $PARTS " == *" $1 "* ]]; }
log "code: $(python3 -m atlas_ab.run.provenance 2>&1)"
LARGE=${MODEL_DIR:-}
TRAIN=
if [ -z "$LARGE" ]; then
  LARGE=$W/large
  log "training the second model (preset gpu, ${TRAIN_BUDGET_S:-100} s) beside the shipped model's runs"
  timeout $(( ${TRAIN_BUDGET_S:-100} + 60 )) python3 -m atlas_ab.train.train --preset gpu --out $LARGE \
    --data $REPO/.carry/data --tokenizer $REPO/atlas_ab/models/default/tokenizer.json \
    --budget-s ${TRAIN_BUDGET_S:-100} ${TRAIN_OVERRIDES:-} > $OUT/train_large.log 2>&1 &
  TRAIN=$!
fi
for m in default large; do
  M=()
  if [ $m = large ]; then
    if [ -z "${SKIP_TESTS:-}" ]; then      # while the second model trains
      S=$SECONDS
      timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -k "tree" tests/run/test_whole_step_graph.py \
        tests/run/test_gpu_fp32_rows.py > $OUT/gpu_tests.log 2>&1
      log "GPU tree tests: exit $? in $((SECONDS - S)) s"; tail -3 $OUT/gpu_tests.log | tee -a $OUT/tree.log
    fi
    [ -n "$TRAIN" ] && { wait $TRAIN; log "training: exit $?"; tail -2 $OUT/train_large.log | tee -a $OUT/tree.log; }
    [ -f $LARGE/model.safetensors ] || { log "no second model: $m skipped"; continue; }
    M=(model=path model.path=$LARGE)
  fi
  if has shadow; then
    S=$SECONDS
    python3 -m atlas_ab runner.progress=false +arm=shadow_topk_4 workload.n_docs=${N_DOCS:-32} \
      "${M[@]}" "${O[@]}" hydra.run.dir=$W/${m}_shadow > $OUT/${m}_shadow.log 2>&1
    log "$m shadow_topk_4: exit $? in $((SECONDS - S)) s"
  fi
  if has tree; then
    S=$SECONDS
    python3 -m atlas_ab -m runner.progress=false +study=tree workload.n_docs=${N_DOCS:-32} "${M[@]}" "${O[@]}" \
      hydra.sweep.dir=$W/${m}_tree > $OUT/${m}_tree.log 2>&1
    log "$m +study=tree: exit $? in $((SECONDS - S)) s"
  fi
  if has baseline_step; then
    S=$SECONDS
    python3 -m atlas_ab runner.progress=false +arm=baseline runner.run_ahead=false workload.n_docs=${N_DOCS:-32} \
      "${M[@]}" "${O[@]}" hydra.run.dir=$W/${m}_baseline_step > $OUT/${m}_baseline_step.log 2>&1
    log "$m baseline, no run-ahead: exit $? in $((SECONDS - S)) s"
  fi
  if has tree_replay; then
    S=$SECONDS
    python3 -m atlas_ab -m runner.progress=false +study=tree_replay workload.n_docs=${N_DOCS:-32} "${M[@]}" \
      "${O[@]}" hydra.sweep.dir=$W/${m}_tree_replay runner.trajectories=$W/traj_$m > $OUT/${m}_tree_replay.log 2>&1
    log "$m +study=tree_replay: exit $? in $((SECONDS - S)) s"
  fi
  if [ $m = default ] && has sampled; then      # sampled trees (tree_sampling.py) against the chain with greedy drafts, T=0.7
    for a in ${SAMPLED_ARMS:-"+arm=tree_top2" "+arm=baseline arm.draft_policy=greedy"}; do
      S=$SECONDS; t=$(echo $a | cut -d= -f2 | cut -d' ' -f1)
      python3 -m atlas_ab runner.progress=false $a workload.sampling.temperature=0.7 workload.n_docs=${N_DOCS:-32} \
        "${O[@]}" hydra.run.dir=$W/${m}_sampled_$t > $OUT/${m}_sampled_$t.log 2>&1
      log "$m $a sampled T=0.7: exit $? in $((SECONDS - S)) s"; grep -h "^arm " $OUT/${m}_sampled_$t.log | tee -a $OUT/tree.log
    done
  fi
  has analysis || continue
  grep -h "^arm " $OUT/${m}_shadow.log $OUT/${m}_tree.log $OUT/${m}_baseline_step.log $OUT/${m}_tree_replay.log \
    | tee -a $OUT/tree.log
  python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 > $OUT/${m}_prediction.md 2>&1
  tail -3 $OUT/${m}_prediction.md | tee -a $OUT/tree.log
  python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 --realized $W/${m}_tree/1_tree_top2 \
    --json > $OUT/${m}_prediction.json 2>&1
  python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 --realized $W/${m}_tree/1_tree_top2 \
    > $OUT/${m}_check.md 2>&1
  tail -12 $OUT/${m}_check.md | tee -a $OUT/tree.log
  python3 -m atlas_ab.analysis report $W/${m}_tree/0_baseline $W/${m}_tree/1_tree_top2 $W/${m}_tree/2_tree_linear2 \
    --out $W/${m}_report > $OUT/${m}_verdict.txt 2>&1
  log "$m report: exit $?"; head -5 $OUT/${m}_verdict.txt | tee -a $OUT/tree.log
  python3 -m atlas_ab.analysis report $W/${m}_tree_replay/[0-9]* --out $W/${m}_replay_report > $OUT/${m}_replay_verdict.txt 2>&1
  log "$m replay report: exit $?"; head -5 $OUT/${m}_replay_verdict.txt | tee -a $OUT/tree.log
done
for m in default large; do
  [ -d $W/${m}_tree ] || continue
  tar cJf $OUT/runs_$m.tar.xz -C $W ${m}_shadow ${m}_tree ${m}_baseline_step ${m}_tree_replay ${m}_report \
    ${m}_replay_report $(cd $W && ls -d ${m}_sampled_* 2>/dev/null) 2>/dev/null
done
ls -la $OUT | tee -a $OUT/tree.log
python3 scripts/bundle_out.py $OUT
log "done"
