#!/usr/bin/env bash
# Issue 41, "a peer a user would really pick": llama.cpp's server built with CUDA from the pinned
# source package (its slim copy), serving our shipped GGUF target + draft model on the GPU,
# collected by our collector, beside our runner's `+arm=draft_model` on the same documents; then
# bench/bench_peer.py prints committed tokens/s, wall and work seconds and the seconds to a powered
# REFEED verdict of each side by side. One device call, from the repository root:
#
#   device run (carry .whl .carry/llamacpp/slim.tar.xz .carry/llamacpp/slim.tar.xz.sha256):
#       bash scripts/gpu.sh peer       (the wheels installed first; then this script)
#   here, on the CPU, a tiny workload end to end (the check of the mechanics, not a timing):
#       TINY=1 CUDA=0 bash scripts/llamacpp_peer.sh
#
# Stages, each under `timeout` and inside one deadline (DEADLINE_S, default 570 s of the device's
# 600), each logged with its seconds to $OUT/peer.log: build (scripts/build_llamacpp.sh: unpack the
# slim sdist under /tmp, build llama-server, write the GGUF files), serve (llama-server, -ngl 99
# for target and draft, --spec-draft-n-max K, --parallel SLOTS, greedy), collect (our collector,
# --token-ids, SLOTS documents in flight), stop the server, ours (our runner, same workload, K,
# batch width SLOTS), bench (bench/bench_peer.py -> $OUT/peer_draft_model.{md,json}), compare
# (scripts/llamacpp_compare.py: the completions and counts request by request, into peer.log).
# MTP=1 (default) then does the same for llama.cpp's draft-mtp (target_mtp.gguf) against our
# `+arm=prefill_refeed`, only if at least MTP_NEEDS_S (150) seconds are left; it never fails the call.
# Knobs: K (2), SLOTS (16 = our default batch width), OURS_WARMUP (1: our run once before the timed one,
# its seconds shown as our build), WORKLOAD (default; TINY=1: tiny),
# WORKLOAD_SET ("n_docs=64 turns=4": both sides), CTX_PER_SLOT (2048), OURS_ARGS (extra overrides for
# our runner, e.g. runner.dtype=float32; on the GPU it runs bfloat16 by default, llama.cpp float32
# weights with an f16 KV cache), ATLAS_LLAMACPP_SDIST (default .carry/llamacpp/slim.tar.xz), OUT.
set -uo pipefail
REPO=$PWD
OUT=${OUT:-/tmp/peer_out}; mkdir -p "$OUT"
CUDA=${CUDA:-1}
K=${K:-2}
SLOTS=${SLOTS:-16}
WORKLOAD=${WORKLOAD:-$([ -n "${TINY:-}" ] && echo tiny || echo default)}
WORKLOAD_SET=${WORKLOAD_SET:-}
CTX_PER_SLOT=${CTX_PER_SLOT:-2048}
MTP=${MTP:-1}
MTP_NEEDS_S=${MTP_NEEDS_S:-150}
DEADLINE_S=${DEADLINE_S:-570}
SDIST=$(realpath -m "${ATLAS_LLAMACPP_SDIST:-.carry/llamacpp/slim.tar.xz}")
W=${PEER_WORK:-/tmp/peer}; mkdir -p "$W"
export ATLAS_LLAMACPP_CACHE=${ATLAS_LLAMACPP_CACHE:-$W/llamacpp}
START=$SECONDS

log() { echo "[$(date +%T)] $*" | tee -a "$OUT/peer.log"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
left() { echo $((DEADLINE_S - (SECONDS - START))); }
# a stage's timeout: its own limit, or what the deadline leaves (less a reserve for the rest)
limit() { local l; l=$(( $(left) - ${2:-20} )); [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"; }
die() { log "FAILED: $*"; exit 1; }

export PYTHONUNBUFFERED=1 PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}    # this checkout's atlas_ab first
if [ "${PYC:-1}" = 1 ]; then export PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc; fi

SETS=(); OVR=()
for kv in $WORKLOAD_SET; do SETS+=(--set "$kv"); OVR+=("workload.$kv"); done
if [ "$CUDA" = 1 ]; then
  DEV="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$OUT/peer.log"
  NGL=(-ngl 99 -ngld 99)
else
  DEV="CPU $(nproc) cores"
  NGL=(--threads "$(nproc)" --poll 0)     # no polling: spinning threads beside busy cores cost the run
fi
DEV=${DEV:-GPU}
log "peer: CUDA=$CUDA K=$K SLOTS=$SLOTS workload=$WORKLOAD ${WORKLOAD_SET:+($WORKLOAD_SET) }device '$DEV' sdist $SDIST"
log "code: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git') $(git -C "$REPO" status --porcelain 2>/dev/null | wc -l) changed files"

# ---- build ----------------------------------------------------------------------------------------
T=$(now)
timeout "$(limit 420 120)" env CUDA="$CUDA" ATLAS_LLAMACPP_SDIST="$SDIST" BUILD_LOG="$W/build.log" \
  bash scripts/build_llamacpp.sh > "$W/build.out" 2>&1
rc=$?; BUILD_S=$(since "$T")
log "build: exit $rc in $BUILD_S s (CUDA=$CUDA, $(nproc) jobs)"
if [ $rc != 0 ]; then
  { tail -n 30 "$W/build.out"; echo "--- build.log:"; grep -E "error|Error|FAILED" "$W/build.log" | head -20; tail -n 10 "$W/build.log"; } \
    2>/dev/null | tee -a "$OUT/peer.log"
  die "build"
fi
CURRENT=$(tail -n 1 "$W/build.out")
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$CURRENT" "$1"; }
SERVER=$(json server)

# ---- one pair: serve, collect, stop, ours, bench, compare ----------------------------------------
SPID=""
stop_server() {
  [ -n "$SPID" ] || return 0
  kill "$SPID" 2>/dev/null
  for _ in $(seq 40); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; SPID=""
}
trap stop_server EXIT

serve() {  # name model_args...: llama-server in the background; sets SPID, PORT, STARTUP_S
  local name=$1; shift
  PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  local t; t=$(now)
  "$SERVER" "$@" --spec-draft-n-max "$K" --spec-draft-n-min 0 --spec-draft-p-min 0 --temp 0 \
    --host 127.0.0.1 --port "$PORT" --parallel "$SLOTS" --ctx-size $((SLOTS * CTX_PER_SLOT)) --no-webui \
    "${NGL[@]}" > "$W/server_$name.log" 2>&1 &
  SPID=$!
  python3 - "$PORT" "$SPID" "$(limit 90 60)" <<'PY'
import os, sys, time, urllib.request
port, pid, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + limit
while time.monotonic() < end:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("llama-server exited")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(f"llama-server not healthy after {limit:g} s")
PY
  local rc=$?
  STARTUP_S=$(since "$t")
  # where the weights live: this build's log at its default verbosity prints no offload line, so ask
  # the driver what the server process holds (a CUDA=1 server holding no GPU memory runs on the CPU)
  ON_GPU=""
  if [ "$CUDA" = 1 ] && [ $rc = 0 ]; then
    ON_GPU=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null \
             | awk -F', *' -v p="$SPID" '$1 == p { print $2 }')
  fi
  log "serve $name: exit $rc in $STARTUP_S s (port $PORT; $([ "$CUDA" = 1 ] && echo "GPU memory of the server: ${ON_GPU:-none} MiB" || echo "CPU"))"
  if [ $rc != 0 ]; then tail -n 25 "$W/server_$name.log" | tee -a "$OUT/peer.log"; stop_server; return 1; fi
  if [ "$CUDA" = 1 ] && [ -z "$ON_GPU" ]; then
    log "serve $name: CUDA=1 but llama-server (pid $SPID) holds no GPU memory: not a GPU peer"; stop_server; return 1
  fi
}

ours() {  # our_arm run_dir out_file: our runner on the pair's workload, K and batch width
  # shellcheck disable=SC2086
  timeout "$(limit 200 40)" python3 -m atlas_ab "+arm=$1" "arm.num_drafts=$K" "workload=$WORKLOAD" "${OVR[@]}" \
    "runner.batch_width=$SLOTS" "hydra.run.dir=$2" ${OURS_ARGS:-} > "$3" 2>&1
}

pair() {  # name engine_arm our_arm label model_args...
  local name=$1 earm=$2 oarm=$3 label=$4; shift 4
  local E="$W/runs/engine_$name" O="$W/runs/ours_$name" t rc
  rm -rf "$E" "$O" "$O.warmup"; mkdir -p "$W/runs"
  serve "$name" "$@" || return 1
  t=$(now)
  timeout "$(limit 180 60)" python3 -m atlas_ab.collect --url "http://127.0.0.1:$PORT/v1" --arm "$earm" --out "$E" \
    --token-ids --ignore-eos --no-progress --timeout 120 --concurrency "$SLOTS" --workload "$WORKLOAD" "${SETS[@]}" \
    > "$W/collect_$name.out" 2>&1
  rc=$?; local EWALL; EWALL=$(since "$t")
  log "collect $name: exit $rc in $EWALL s"; head -n 3 "$W/collect_$name.out" | tee -a "$OUT/peer.log"
  grep -iE "error|warn" "$W/server_$name.log" | head -n 5 >> "$OUT/peer.log"
  stop_server
  [ $rc = 0 ] || { tail -n 5 "$W/collect_$name.out"; tail -n 15 "$W/server_$name.log"; } | tee -a "$OUT/peer.log"
  [ $rc = 0 ] || return 1
  # our warm-up: the same run once, to build our kernels into the cache (the analog of llama.cpp's
  # build; a cold run's first-call builds would fall in its work seconds: bench_peer.py's "build seconds")
  local OBUILD=() OB
  if [ "${OURS_WARMUP:-1}" = 1 ]; then
    t=$(now)
    ours "$oarm" "$O.warmup" "$W/ours_${name}_warmup.out"
    rc=$?; OB=$(since "$t"); log "ours $name warm-up: exit $rc in $OB s"
    [ $rc = 0 ] && OBUILD=(--ours-build-s "$OB")
  fi
  t=$(now)
  ours "$oarm" "$O" "$W/ours_$name.out"
  rc=$?; local OWALL; OWALL=$(since "$t")
  log "ours $name: exit $rc in $OWALL s"; tail -n $([ $rc = 0 ] && echo 3 || echo 15) "$W/ours_$name.out" | tee -a "$OUT/peer.log"
  [ $rc = 0 ] || return 1
  timeout 60 python3 bench/bench_peer.py --engine "$E" --ours "$O" --engine-wall-s "$EWALL" --ours-wall-s "$OWALL" \
    --engine-startup-s "$STARTUP_S" --build-s "$BUILD_S" "${OBUILD[@]}" --engine-k "$K" --engine-slots "$SLOTS" \
    --label "$label ($DEV)" --ours-label "atlas_ab +arm=$oarm ($DEV)" --json "$OUT/peer_$name.json" \
    > "$OUT/peer_$name.md" 2>&1
  rc=$?; log "bench $name: exit $rc"; tee -a "$OUT/peer.log" < "$OUT/peer_$name.md"
  [ $rc = 0 ] || return 1
  t=$(now)
  timeout "$(limit 90 20)" python3 scripts/llamacpp_compare.py "$O" "$E" --list 5 > "$W/compare_$name.txt" 2>&1
  log "compare $name: exit $? in $(since "$t") s"; head -n 40 "$W/compare_$name.txt" >> "$OUT/peer.log"
}

log "== draft model pair (must) =="
pair draft_model draft_model draft_model "llama.cpp draft-simple" -m "$(json target)" -md "$(json draft)" \
  --spec-type draft-simple
MAIN=$?
log "draft model pair: exit $MAIN"

if [ "$MTP" = 1 ] && [ "$(left)" -ge "$MTP_NEEDS_S" ]; then
  log "== MTP pair (optional: $(left) s left) =="
  pair mtp mtp prefill_refeed "llama.cpp draft-mtp" -m "$(json target_mtp)" --spec-type draft-mtp
  log "MTP pair: exit $?"
elif [ "$MTP" = 1 ]; then
  log "MTP pair skipped: $(left) s left, it needs $MTP_NEEDS_S"
fi

# the runs and the logs, for the analysis afterwards (small: counts and step tables)
tar -C "$W" -cJf "$OUT/peer_runs.tar.xz" runs server_draft_model.log $(cd "$W" && ls server_mtp.log compare_*.txt 2>/dev/null) 2>/dev/null
log "done in $((SECONDS - START)) s (deadline $DEADLINE_S)"
exit $MAIN
