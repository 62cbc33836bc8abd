#!/usr/bin/env bash
# EAGLE-3 on one H200 (issue 49), from the repository root, carrying .carry/data (python -m atlas_ab.train.data
# --out .carry/data, built HERE: the device's Python has another stdlib) and the wheels as scripts/gpu.sh does:
#   bash scripts/gpu_eagle3.sh            (~4-5 min: knobs TARGET_S, HEAD_S, OUT)
# 1. the GPU tests of the family (tests/run/test_gpu_eagle3.py: eager, captured, run ahead, replay; bf16)
# 2. the 33.6M target (train.py --preset gpu, TARGET_S seconds), unless TARGET=DIR names one already trained
# 3. its EAGLE-3 head: python -m atlas_ab.train eagle3 --preset gpu (HEAD_S seconds)
# 4. acceptance per depth in replay, K=3, over one trajectory per feature set: the MTP head unfed and fed
#    (CATCHUP+REFEED+DRAFTER_PREFILL), the EAGLE-3 head fed as vLLM feeds it and unfed; the report
# Everything lands under $OUT (default /tmp/gpu_out/eagle3): logs, the head (vLLM's eagle3 layout), the
# runs' manifests and step tables, report/.
set -uo pipefail
cd "$(dirname "$(realpath "$0")")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpu_out}/eagle3
mkdir -p "$OUT"
LOG=$OUT/eagle3.log
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
PY=python3

log "tests: tests/run/test_gpu_eagle3.py"
timeout 240 $PY -m pytest -q -p no:cacheprovider -m gpu tests/run/test_gpu_eagle3.py > "$OUT/tests.log" 2>&1
log "tests: exit $? ($(tail -1 "$OUT/tests.log"))"

TARGET=${TARGET:-}
if [ -z "$TARGET" ]; then
  TARGET=$OUT/target
  log "target: train.py --preset gpu, ${TARGET_S:-100} s"
  timeout $(( ${TARGET_S:-100} + 120 )) $PY -m atlas_ab.train.train --preset gpu --out "$TARGET" --data .carry/data \
    --budget-s "${TARGET_S:-100}" > "$OUT/target.log" 2>&1 || { log "target: failed ($(tail -1 "$OUT/target.log"))"; exit 1; }
  log "target: $(tail -1 "$OUT/target.log")"
fi

log "head: python -m atlas_ab.train eagle3 --preset gpu, ${HEAD_S:-90} s"
timeout $(( ${HEAD_S:-90} + 120 )) $PY -m atlas_ab.train eagle3 --preset gpu --target "$TARGET" --out "$OUT/head" \
  --data .carry/data --budget-s "${HEAD_S:-90}" --log-every 200 > "$OUT/head.log" 2>&1 \
  || { log "head: failed ($(tail -1 "$OUT/head.log"))"; exit 1; }
log "head: $(grep -E 'agreement|DONE' "$OUT/head.log" | tr '\n' ' ')"

R="model=path model.path=$TARGET model.eagle3_path=$OUT/head runner.mode=replay runner.trajectories=$OUT/traj"
R="$R runner.replay_check_waves=1 arm.num_drafts=3"
for spec in "mtp_k3:+arm=baseline" "mtp_fed_k3:+arm=refeed_on arm.drafter_prefill=true" "eagle3_fed_k3:+arm=eagle3" \
            "eagle3_unfed_k3:+arm=eagle3 arm.catchup=false arm.refeed=false arm.drafter_prefill=false"; do
  name=${spec%%:*}
  log "run $name"
  timeout 300 $PY -m atlas_ab ${spec#*:} arm.name=$name $R hydra.run.dir="$OUT/runs/$name" > "$OUT/$name.log" 2>&1
  log "run $name: exit $? $(grep -E '^arm ' "$OUT/$name.log")"
done
$PY -m atlas_ab.analysis report "$OUT"/runs/mtp_k3 "$OUT"/runs/mtp_fed_k3 "$OUT"/runs/eagle3_fed_k3 \
  "$OUT"/runs/eagle3_unfed_k3 --out "$OUT/report" > "$OUT/report.log" 2>&1
log "report: exit $? ($OUT/report/report.md)"
