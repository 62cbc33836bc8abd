#!/usr/bin/env bash
# Issue 40 on the device: the tree study (claims question 8, live and eager: a tree's verify has no
# Triton path or graph yet) and the SHADOW_TOPK run of the same documents that its prediction reads.
#   device run: bash scripts/gpu_tree.sh      (carry .whl: scripts/gpu_wheels.sh)
# The shipped model; a second one too with MODEL_DIR=DIR (a checkpoint on the device, e.g. the one
# scripts/gpu_claims.sh trains). Writes, per model, into $OUT: the prediction (coverage --tree),
# the report with the registered verdict, and the logs.
# Knobs: N_DOCS (32: the tree arm then verifies > 2,000 steps), TREE_OVERRIDES (tiny dry runs on the
# CPU), SKIP_WHEELS=1, TREE_DIR.
set -uo pipefail
source scripts/gpu_env.sh
W=${TREE_DIR:-/tmp/tree} && mkdir -p $W
read -r -a O <<< "${TREE_OVERRIDES:-}"
for m in default ${MODEL_DIR:+large}; do
  M=()
  [ $m = large ] && M=(model=path model.path=$MODEL_DIR)
  S=$SECONDS
  python3 -m atlas_ab runner.progress=false +arm=shadow_topk_4 workload.n_docs=${N_DOCS:-32} runner.cuda_graphs=false \
    "${M[@]}" "${O[@]}" hydra.run.dir=$W/${m}_shadow > $OUT/${m}_shadow.log 2>&1
  echo "$m shadow_topk_4: exit $? in $((SECONDS - S)) s"
  S=$SECONDS
  python3 -m atlas_ab -m runner.progress=false +study=tree workload.n_docs=${N_DOCS:-32} "${M[@]}" "${O[@]}" \
    hydra.sweep.dir=$W/${m}_tree > $OUT/${m}_tree.log 2>&1
  echo "$m +study=tree: exit $? in $((SECONDS - S)) s"
  grep -h "^arm " $OUT/${m}_shadow.log $OUT/${m}_tree.log
  python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 > $OUT/${m}_prediction.md 2>&1
  tail -3 $OUT/${m}_prediction.md
  python3 -m atlas_ab.analysis report $W/${m}_tree/0_baseline $W/${m}_tree/1_tree_top2 $W/${m}_tree/2_tree_linear2 \
    --out $OUT/${m}_report 2>&1 | tee $OUT/${m}_verdict.txt | head -3
done
