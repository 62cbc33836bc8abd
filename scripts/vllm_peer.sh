#!/usr/bin/env bash
# vLLM beside our runner on this CPU, the same model, documents and K, in one run: vLLM serves the
# shipped model exported as MiMo with its MTP method (python -m atlas_ab.engines.vllm), the collector
# sends the default workload (--token-ids --ignore-eos, every document in flight), then our runner runs
# +arm=vllm_mtp (vLLM's drafter schedule) over the same export and documents, and
# bench/bench_peer.py prints committed tokens per work second and seconds to a powered REFEED verdict
# of each, side by side; the comparison request by request goes to compare.txt.
#
#   bash scripts/vllm_peer.sh        # OUT=runs/peer_vllm K=2 WORKLOAD_SET="..." THREADS=2
#
# Run it on an idle machine: both sides share its cores, and a busy one times neither.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT=${OUT:-$REPO/runs/peer_vllm}
K=${K:-2}
PORT=${PORT:-8021}
THREADS=${THREADS:-2}
WORKLOAD_SET=${WORKLOAD_SET:-}
W=$(mktemp -d)
mkdir -p "$OUT"
SETS=(); OVR=()
for kv in $WORKLOAD_SET; do SETS+=(--set "$kv"); OVR+=("workload.$kv"); done
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
cd "$W"
trap 'python -m atlas_ab.engines.vllm stop --port "$PORT" >/dev/null 2>&1 || true' EXIT

t=$(now)
python -m atlas_ab.engines.vllm serve --port "$PORT" --k "$K" --json > serve.json
startup=$(since "$t")
EXPORT=$(python -c 'import json,sys; print(json.load(open("serve.json"))["export"]["path"])')
N=$(python -c "from atlas_ab.collect.plan import workload_plan; print(len(workload_plan('default', '${WORKLOAD_SET}'.split()).conversations))")
t=$(now)
python -m atlas_ab.collect --url "http://127.0.0.1:$PORT/v1" --arm vllm_mtp_k$K --out engine --token-ids \
  --ignore-eos --concurrency "$N" --no-progress "${SETS[@]}" > collect.txt
engine_wall=$(since "$t")
python -m atlas_ab.engines.vllm stop --port "$PORT" >/dev/null
t=$(now)
python -m atlas_ab model=path "model.path=$EXPORT" +arm=vllm_mtp "arm.num_drafts=$K" "runner.batch_width=$N" \
  "runner.threads=$THREADS" runner.progress=false hydra.run.dir="$W/ours" "${OVR[@]}" > ours.txt
ours_wall=$(since "$t")
python "$REPO/bench/bench_peer.py" --engine engine --ours ours --label "vLLM 0.32 CPU (mtp, K=$K)" \
  --engine-k "$K" --engine-slots "$N" --engine-startup-s "$startup" --engine-wall-s "$engine_wall" \
  --ours-wall-s "$ours_wall" --json "$OUT/peer.json" | tee "$OUT/peer.md"
python -m atlas_ab.engines.vllm.compare ours engine > "$OUT/compare.txt"
echo "cores $(nproc), $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)" >> "$OUT/peer.md"
echo "$OUT"
