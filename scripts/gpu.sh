#!/usr/bin/env bash
# The GPU runs, as stages of one device call, from the repository root:
#   bash scripts/gpu.sh STAGE...          (carry .whl, built here by scripts/gpu_wheels.sh; the studies
#                                          that train a second model carry .carry/data too:
#                                          python -m atlas_ab.train.data ... --out .carry/data)
# Each stage runs in its own subshell, in the order given, writing under $OUT (default /tmp/gpu_out)
# as it ends, so a call cut short still returns what finished; the log is $OUT/gpu.log, and $OUT is
# bundled into the files the device returns at the end (scripts/device_transfer.py). Knobs are env vars.
#
# Tests and benchmarks
#   tests      pytest -m gpu over GPU_TESTS (tests/), GPU_TESTS_K (-k), TESTS_S (300 s); TINY=1 drops -m gpu
#   main       the main job on the GPU (+arm=refeed_on), its FINGERPRINTS table, the run as run_refeed.tgz
#   runner     bench/bench_runner.py BENCH_ARGS (all its sections)
#   profile    bench_runner's grid with a profile: PROFILE_MODELS (gpu), PROFILE_WIDTHS (64), PROFILE (64,2),
#              ONLY_GRID (--only-grid; empty: levers too), BENCH_S (200)
#   bench      two GPUs side by side when there are two: bench_runner (GPU 0) | bench_forward, then
#              bench_runner's 5.7B grid (the other); then the 5.7B arm end to end, 64 x 8 (model=llama8b),
#              then bench_replay
#   sweep_1v2  +study=claims on one GPU, then over two (hydra/launcher=local_gpus): wall times, identical
#              step tables, the devices claimed (scripts/compare_sweeps.py); needs two GPUs
#   drafter    issue 50's drafter costs: DRAFTER_BENCHES ("drafter_split fp8_head kv_rows"; see stage_drafter)
#   kernels    bench/bench_step_kernels.py: the 33.6M B=64 K=2 step graph, kernel by kernel
#   gate       the lossless gate's power and bound on the GPU for GATE_MODELS ("default llama8b"), 20
#              seeded runs a cell; GATE_STARTUP=1 (default): bench_startup at the GPU's 8 gated sequences
#   startup    start-up before the first step: bench_startup --model STARTUP_MODEL (llama8b) for
#              STARTUP_RUNS ("cold_pyc warm_pyc warm": *_pyc lets Python cache bytecode)
# Time to a verdict (run on a FRESH machine; PYC=1, the default, caches bytecode under /tmp/pyc)
#   e2e        bench/bench_e2e.py: E2E_JOBS (the main job cold then warm, without graphs, compiled, on the
#              host CPU, the claims study, the 5.7B 64 x 8 twice, the tree study), E2E_TIMEOUT (240 s)
#   coldsplit  where a cold start goes: the page cache over the stages before it (put e2e first), the
#              disk's speed, then the main job with only Triton's cache emptied
#   grid       bench_runner's grid, GRID_MODELS (llama8b,gpu), B=16,64 K=1-3, GRID_TIMEOUT (150 s)
#   forward    bench_forward at 5.7B: the verify forward against its bytes at the rated bandwidth
#   fp         FINGERPRINTS on / off at B=256, 11 alternations
#   time_to_verdict   = e2e grid forward fp tests, the tests being GPU_TESTS=tests/run/test_gpu_fp32_rows.py
# TINY=1 makes e2e, coldsplit, grid, forward, fp and tests tiny, on the CPU when there is no GPU.
# Studies
#   claims     the claims study; the 33.6M preset trained beside it; claims_conf; see stage_claims
#   sequential the claims questions asked sequentially beside the fixed-n verdicts; see stage_sequential
#   ladder     the K ladder at three model sizes and the engines' configs; see stage_ladder
#   tree       the tree study at both model sizes, its prediction and report; see stage_tree
#   families_ladder  issue 49: each drafter family's tokens/s per batch width at FL_MODEL; see stage_families_ladder
#   peer       llama.cpp's server built with CUDA beside our runner (scripts/llamacpp_peer.sh, its knobs)
# Everywhere: OUT, WHL (.whl; .whl_gpu is the slim set; without wheels, hydra, omegaconf and statsmodels must
# import already, as here), SKIP_WHEELS=1 (none installed). The tree travels only under 64 MiB, which the committed reports'
# raw runs pass: `python scripts/device_transfer.py park` before a call that does not read them, `restore` after.
# The calls the per-task scripts this one replaced made (git log -- scripts/gpu_session.sh, ...):
#   gpu_session = tests main runner          gpu_quick = tests profile          gpu_bench = bench tests
#   gpu_checks  = GPU_TESTS="tests/run/test_whole_step_graph.py tests/runtime/test_fusion.py
#                 tests/run/test_gpu_fp32_rows.py tests/runtime/test_tree_verify.py tests/speculative/test_gpu_gate.py"
#                 GATE_MODELS=default GATE_STARTUP=0 ... tests kernels gate
#   gpu_gate_power = GPU_TESTS=tests/speculative/test_gpu_gate.py ... gate tests
#   gpu_startup    = GPU_TESTS=tests/speculative/test_gpu_gate.py ... tests startup
#   gpu_time_to_verdict = time_to_verdict (its STAGES: the stages themselves, e.g. `e2e grid`); gpu_claims,
#   gpu_sequential, gpu_ladder, gpu_tree, gpu_llamacpp_peer = claims, sequential, ladder, tree, peer
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
export PYTHONUNBUFFERED=1 REPO=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # NVLink multicast off
export OUT=${OUT:-/tmp/gpu_out}
LOG=$OUT/gpu.log
STAGES=(tests main runner profile bench sweep_1v2 drafter kernels gate startup e2e coldsplit grid forward fp
        claims sequential ladder tree peer families_ladder)

log() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
asked() { [[ " ${ASKED[*]} " == *" $1 "* ]]; }
T() { if [ -n "${TINY:-}" ]; then echo "$2"; else echo "$1"; fi; }     # T <real> <tiny>
ngpus() { python3 -c "import torch; print(torch.cuda.device_count())"; }
pack() { python3 "$REPO/scripts/device_transfer.py" pack --out "$OUT" "$@" | tee -a "$LOG"; }
pyc() { export PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc; }   # the image ships torch without bytecode
code_hash() { log "code: $(cd "$REPO" && python3 -m atlas_ab.run.provenance 2>&1)"; }   # as every manifest's code.hash

usage() { sed -n '2,/^set -uo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; }
[ $# = 0 ] && { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0;; esac
ASKED=()
for s in "$@"; do
  if [ "$s" = time_to_verdict ]; then
    ASKED+=(e2e grid forward fp tests); GPU_TESTS=${GPU_TESTS:-tests/run/test_gpu_fp32_rows.py}
    TESTS_S=${TESTS_S:-$(T 90 300)}
  elif [[ " ${STAGES[*]} " == *" $s "* ]]; then
    ASKED+=("$s")
  else
    echo "gpu.sh: unknown stage '$s' (stages: ${STAGES[*]} time_to_verdict)" >&2; exit 2
  fi
done
mkdir -p "$OUT"

# the wheels the device lacks (it reaches no package registry); none needed where hydra & co. import
if [ -z "${SKIP_WHEELS:-}" ]; then
  if compgen -G "${WHL:-.whl}/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "${WHL:-.whl}"/*.whl || { echo "gpu.sh: pip install from ${WHL:-.whl} failed" >&2; exit 1; }
  elif ! python3 -c "import hydra, omegaconf, statsmodels" 2> /dev/null; then
    echo "gpu.sh: no wheels in ${WHL:-.whl} and hydra, omegaconf or statsmodels missing (scripts/gpu_wheels.sh)" >&2
    exit 1
  fi
fi
export PYTHONPATH=/tmp/site:$REPO

# ---- tests and benchmarks -----------------------------------------------------------------------------
run_tests() {   # out_file timeout_s pytest_args...: pytest -m gpu (all of it under TINY=1)
  local f=$1 t=$2 S=$SECONDS; shift 2
  # shellcheck disable=SC2046
  timeout "$t" python3 -m pytest -q -p no:cacheprovider $(T "-m gpu" "") "$@" > "$f" 2>&1
  local rc=$?
  log "GPU tests: exit $rc in $((SECONDS - S)) s: $(tail -1 "$f")"
  return $rc
}

stage_tests() {
  local K=()
  [ -n "${GPU_TESTS_K:-}" ] && K=(-k "$GPU_TESTS_K")
  # shellcheck disable=SC2086
  run_tests "$OUT/gpu_tests.log" "${TESTS_S:-300}" "${K[@]}" ${GPU_TESTS:-tests/}
}

stage_main() {
  rm -rf /tmp/run_refeed
  ( time python3 -m atlas_ab +arm=refeed_on runner.progress=false hydra.run.dir=/tmp/run_refeed ) 2>&1 | tail -6 \
    | tee "$OUT/run.log"
  python3 -m atlas_ab.analysis fingerprints /tmp/run_refeed 2>&1 | tail -8 | tee -a "$OUT/run.log"
  tar czf "$OUT/run_refeed.tgz" -C /tmp run_refeed
}

stage_runner() {
  # shellcheck disable=SC2086
  python3 bench/bench_runner.py ${BENCH_ARGS:-} --json "$OUT/bench.json" 2> "$OUT/bench.err" | tail -3
  tail -40 "$OUT/bench.err"
}

stage_profile() {
  local m=${PROFILE_MODELS:-gpu}
  timeout "${BENCH_S:-200}" python3 bench/bench_runner.py --models "$m" ${ONLY_GRID---only-grid} \
    --widths "${PROFILE_WIDTHS:-64}" --profile "${PROFILE:-64,2}" --json "$OUT/bench_runner_${m//,/_}.json" 2>&1 \
    | grep -v '^ *"\|^{\|^}\|^ *[]}{]' | tail -40
}

stage_bench() {   # each bench owns one GPU; with one GPU, one after the other
  local NG G1 W=/tmp/bench
  NG=$(ngpus); G1=$(( NG > 1 ? 1 : 0 )); mkdir -p $W
  side() { if [ "$NG" -gt 1 ]; then "$@" & else "$@"; fi; }
  log "bench A: bench_runner (GPU 0) | bench_forward, then the 5.7B runner grid (GPU $G1)"
  side bash -c "CUDA_VISIBLE_DEVICES=$G1 timeout 200 python3 bench/bench_forward.py --json $OUT/bench_forward.json \
    --budget-s 150 > $W/bench_forward.log 2>&1; echo \"[\$(date +%T)] bench_forward: exit \$?\" >> $LOG; \
    CUDA_VISIBLE_DEVICES=$G1 timeout 100 python3 bench/bench_runner.py --models llama8b --only-grid --widths 16,64 \
    --json $OUT/bench_runner_8b.json > $W/bench_runner_8b.log 2>&1; echo \"[\$(date +%T)] bench_runner 5.7B: exit \$?\" >> $LOG"
  CUDA_VISIBLE_DEVICES=0 timeout 220 python3 bench/bench_runner.py --json "$OUT/bench_runner.json" > $W/bench_runner.log 2>&1
  log "bench_runner: exit $?"
  wait
  log "bench B: the 5.7B arm end to end, 64 x 8, then bench_replay"
  (cd $W && CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m atlas_ab model=llama8b workload.n_docs=64 \
    runner.batch_width=64 runner.progress=false hydra.run.dir=$W/llama8b > $W/llama8b.log 2>&1)
  log "5.7B run: exit $?"; cp $W/llama8b/manifest.json "$OUT/llama8b_manifest.json"
  CUDA_VISIBLE_DEVICES=0 timeout 90 python3 bench/bench_replay.py --json "$OUT/bench_replay.json" > $W/bench_replay.log 2>&1
  log "bench_replay: exit $?"
  mkdir -p $W/logs && cp $W/*.log $W/logs/ 2>/dev/null
  tar cJf "$OUT/bench_logs.tar.xz" -C $W logs
}

compare_sweeps() {   # a b json: one sweep against another, one line in the log
  python3 "$REPO/scripts/compare_sweeps.py" "$1" "$2" > "$3"
  log "$(python3 -c "import json; d = json.load(open('$3')); print('identical steps:', d['all_identical'], '| seconds', d['a']['seconds'], 'vs', d['b']['seconds'], '| devices', sorted(set(d['b']['devices'].values())))" 2>&1)"
}

stage_sweep_1v2() {   # issue 14: the claims sweep over one GPU, then over two
  local W=/tmp/bench S
  [ "$(ngpus)" -ge 2 ] || { log "sweep_1v2: needs two GPUs"; return 1; }
  mkdir -p $W && cd $W || return 1
  S=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m atlas_ab -m runner.progress=false +study=claims \
    hydra.sweep.dir=$W/s1 runner.trajectories=$W/t1 > $W/s1.log 2>&1
  log "one GPU: exit $? in $((SECONDS - S)) s"
  S=$SECONDS
  timeout 90 python3 -m atlas_ab -m runner.progress=false hydra/launcher=local_gpus +study=claims \
    hydra.sweep.dir=$W/s2 runner.trajectories=$W/t2 > $W/s2.log 2>&1
  log "two GPUs: exit $? in $((SECONDS - S)) s"
  compare_sweeps $W/s1 $W/s2 "$OUT/sweeps_1v2.json"
}

# Issue 50's drafter costs on one GPU, each bench's ratios taken in one run: the head vs the block
# (bench_drafter_split.py: 7.3M, 33.6M, 5.7B, 5.7B at a 151,936 vocabulary), HEAD_FP8 against bf16
# (bench_fp8_head.py), the KV-only rows against the whole block (bench_kv_rows.py, bf16).
stage_drafter() {
  local b S
  for b in ${DRAFTER_BENCHES:-drafter_split fp8_head kv_rows}; do
    S=$SECONDS
    case $b in
      drafter_split) timeout 240 python3 bench/bench_drafter_split.py > "$OUT/bench_$b.md" 2> "$OUT/bench_$b.err" ;;
      fp8_head) timeout 150 python3 bench/bench_fp8_head.py --json "$OUT/bench_$b.json" > "$OUT/bench_$b.md" \
                  2> "$OUT/bench_$b.err" ;;
      kv_rows) timeout 120 python3 bench/bench_kv_rows.py --device cuda > "$OUT/bench_$b.md" 2> "$OUT/bench_$b.err" ;;
    esac
    log "bench $b: exit $? in $((SECONDS - S)) s"
    cat "$OUT/bench_$b.md" | tee -a "$LOG"
  done
}

stage_kernels() {
  local S=$SECONDS rc
  timeout 120 python3 bench/bench_step_kernels.py --model gpu --batch 64 --k 2 --json "$OUT/step_kernels.json" \
    > "$OUT/step_kernels.log" 2>&1
  rc=$?; log "step kernels: exit $rc in $((SECONDS - S)) s"; grep "^== " "$OUT/step_kernels.log" | tee -a "$LOG"
  return $rc
}

stage_gate() {   # issue 37
  local m S
  for m in ${GATE_MODELS:-default llama8b}; do
    S=$SECONDS
    timeout 150 python3 bench/bench_gate_power.py --device cuda --model $m --json "$OUT/gate_power_$m.json" \
      2> "$OUT/gate_power_$m.err" | tee "$OUT/gate_power_$m.txt"
    log "gate power $m: exit ${PIPESTATUS[0]} in $((SECONDS - S)) s"; tail -3 "$OUT/gate_power_$m.err"
    S=$SECONDS
    timeout 90 python3 bench/bench_gate_bound.py --device cuda --model $m --json "$OUT/gate_bound_$m.json" \
      2> "$OUT/gate_bound_$m.err" | tee "$OUT/gate_bound_$m.txt"
    log "gate bound $m: exit ${PIPESTATUS[0]} in $((SECONDS - S)) s"; tail -3 "$OUT/gate_bound_$m.err"
  done
  if [ "${GATE_STARTUP:-1}" = 1 ]; then     # the gate / the steps' time at the GPU's 8 gated sequences a wave
    timeout 120 python3 bench/bench_startup.py --model llama8b --json "$OUT/startup_gate8.json" \
      2> "$OUT/startup_gate8.err" | tail -8
  fi
}

stage_startup() {
  local run pre
  python3 - <<'PY'
import os, sys, importlib.util
d = os.path.dirname(importlib.util.find_spec("torch").origin)
print("torch dir", d, "writable", os.access(d, os.W_OK), "dont_write_bytecode", sys.flags.dont_write_bytecode,
      "pycache there", os.path.isdir(os.path.join(d, "__pycache__")), "PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"))
PY
  # the image sets PYTHONDONTWRITEBYTECODE=1 and ships torch without bytecode, so every process
  # compiles torch's sources again; *_pyc runs let Python cache bytecode, as an install does by default
  for run in ${STARTUP_RUNS:-cold_pyc warm_pyc warm}; do
    pre=""; case $run in *_pyc) pre="env PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc";; esac
    timeout 200 $pre python3 bench/bench_startup.py --model "${STARTUP_MODEL:-llama8b}" --profile \
      --json "$OUT/startup_$run.json" 2> "$OUT/startup_$run.err" >/dev/null
    echo "== $run"; python3 -c "
import json; j = json.load(open('$OUT/startup_$run.json'))
print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in j.items() if not isinstance(v, (dict, list))})
for w in ('first_wave', 'same_wave_again'): print(w, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in j[w].items()})"
    tail -4 "$OUT/startup_$run.err"
  done
}

# ---- time to a verdict (issue 41) ---------------------------------------------------------------------
TTV=/tmp/ttv
stage_e2e() {
  local S=$SECONDS rc f
  [ "${PYC:-1}" = 1 ] && pyc
  # shellcheck disable=SC2046
  timeout $(T "${E2E_TIMEOUT:-240}" 900) python3 bench/bench_e2e.py \
    --jobs "${E2E_JOBS:-main,main,main_eager,main_fuse,main_cpu,claims,llama8b,llama8b,tree}" \
    --workdir $TTV/e2e --job-timeout $(T 110 300) --json "$OUT/e2e.json" $(T "" --smoke) \
    > $TTV/e2e.out 2> "$OUT/e2e.err"
  rc=$?; log "e2e: exit $rc in $((SECONDS - S)) s"
  grep -E "^\| |complete" "$OUT/e2e.err" | tee -a "$LOG"
  for f in $TTV/e2e/*.log; do tail -5 "$f" > "$OUT/e2e_$(basename "$f")"; done
  for f in $TTV/e2e/*.pstats; do if [ -f "$f" ]; then cp "$f" "$OUT/"; fi; done     # the *_prof jobs' profiles
  return $rc
}

stage_coldsplit() {   # its first snapshot is taken before every stage (below)
  [ "${PYC:-1}" = 1 ] && pyc
  python3 scripts/page_cache.py --json $TTV/pc1.json --top 0 > /dev/null
  python3 scripts/page_cache.py --diff $TTV/pc0.json $TTV/pc1.json --top 25 >> "$OUT/page_cache.txt" 2>&1
  python3 scripts/page_cache.py --read-mb 3000 --top 0 >> "$OUT/page_cache.txt" 2>&1
  rm -rf ~/.cache/atlas_ab/triton
  # shellcheck disable=SC2046
  timeout $(T 120 300) python3 bench/bench_e2e.py --jobs main --workdir $TTV/e2e_tc --job-timeout 110 \
    --json "$OUT/e2e_tritoncold.json" $(T "" --smoke) > /dev/null 2> "$OUT/e2e_tritoncold.err"
  log "coldsplit: $(grep -E 'complete' "$OUT/e2e_tritoncold.err" | head -1) | $(grep -E '^read between' "$OUT/page_cache.txt")"
}

stage_grid() {
  local S=$SECONDS rc
  [ "${PYC:-1}" = 1 ] && pyc
  # shellcheck disable=SC2046
  timeout $(T "${GRID_TIMEOUT:-150}" 600) python3 bench/bench_runner.py \
    $(T "--models ${GRID_MODELS:-llama8b,gpu} --widths 16,64" --smoke) --only-grid \
    --json "$OUT/runner_grid.json" > /dev/null 2> "$OUT/runner_grid.err"
  rc=$?; log "grid: exit $rc in $((SECONDS - S)) s"
  grep -E "^\| |B=" "$OUT/runner_grid.err" | tee -a "$LOG"
  return $rc
}

stage_forward() {
  local S=$SECONDS rc
  [ "${PYC:-1}" = 1 ] && pyc
  # shellcheck disable=SC2046
  timeout $(T 60 600) python3 bench/bench_forward.py $(T "--shapes 5.7B --budget-s 45 --no-check" --smoke) \
    --json "$OUT/forward.json" > "$OUT/forward.out" 2> "$OUT/forward.err"
  rc=$?; log "forward: exit $rc in $((SECONDS - S)) s"
  grep -E "copy|^\| (goal|forward)" "$OUT/forward.err" "$OUT/forward.out" | head -8 | tee -a "$LOG"
  return $rc
}

stage_fp() {
  local S=$SECONDS rc
  [ "${PYC:-1}" = 1 ] && pyc
  # shellcheck disable=SC2046
  timeout $(T 45 600) python3 bench/bench_runner.py $(T "" --smoke) --only-fingerprints --fp-alternations 11 \
    --json "$OUT/fingerprints.json" > /dev/null 2> "$OUT/fingerprints.err"
  rc=$?; log "fp: exit $rc in $((SECONDS - S)) s"
  grep -E "FINGERPRINTS" "$OUT/fingerprints.err" | tee -a "$LOG"
  return $rc
}

# ---- studies ------------------------------------------------------------------------------------------
train_large() {   # dir budget_s log: the 33.6M preset (preset gpu) trained on .carry/data, in the background
  timeout $(( $2 + 60 )) python3 -m atlas_ab.train.train --preset gpu --out "$1" --data "$REPO/.carry/data" \
    --tokenizer "$REPO/atlas_ab/models/default/tokenizer.json" --budget-s "$2" ${TRAIN_OVERRIDES:-} > "$3" 2>&1 &
}

# The claims study (issue 12) and the same sweep over two GPUs (issue 14) when the machine has two;
# kind nvidia-h200-x2 or nvidia-h200. Each part packed into $OUT as it ends:
#   1. the second model (preset gpu: 33.6M) trained on the last GPU while GPU 0 runs +study=claims on
#      the shipped model with one GPU (the single-GPU timing)
#   2. two GPUs: the same sweep over both: wall time and step tables against part 1's, the devices claimed
#   3. +study=claims on the second model (over every GPU)
#   4. +study=claims_conf (live, batch width 1) for CONF_MODELS ("default large"), one GPU each;
#      GPU0_EXTRA (a command) runs on GPU 0 beside the second model's sweep when set
#   5. (SAMPLED=1) claims question 7, REFEED under sampling (issue 22): +study=claims_sampled and
#      claims_sampled_t10 for SAMPLED_MODELS ("default large"); then
#      python -m atlas_ab.analysis claims <every sweep dir> --out DIR answers it beside the others
# Knobs: REUSE=1 (+study=claims_reuse for both models after part 3: issue 50's Q2-cold re-asked),
# FAMILIES=1 (+study=families on the shipped model: issue 49), SKIP_CONF=1 (no part 4), SKIP_TWO_GPU=1 (no part 2), SAMPLED_DEFAULT_ON_GPU0=1 (the shipped model's sampled studies on
# GPU 0 while GPU 1 trains), ONLY_SAMPLED=1 (part 5 alone, over a $CLAIMS_DIR/large a previous call
# trained), CLAIMS_OVERRIDES / TRAIN_OVERRIDES (tiny dry runs on the CPU), CLAIMS_DIR (/tmp/claims).
stage_claims() {
  local NG LAST W=${CLAIMS_DIR:-/tmp/claims} TRAIN S m G p PIDS=() MODEL=() L=(hydra/launcher=local_gpus)
  # shellcheck disable=SC2206
  local RUN=(python3 -m atlas_ab -m runner.progress=false ${CLAIMS_OVERRIDES:-})
  NG=$(ngpus); LAST=$(( NG > 1 ? NG - 1 : 0 ))
  [ "$NG" -lt 2 ] && L=()
  mkdir -p $W && cd $W || return 1
  log "GPUs: $NG"
  sampled_for() {   # part 5 for one model: claims_sampled (T 0.7) and claims_sampled_t10 (T 1.0)
    local m=$1 s MODEL=(); shift
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
    log "claims 1: train the second model (GPU $LAST) | claims on the shipped model, one GPU (GPU 0)"
    CUDA_VISIBLE_DEVICES=$LAST train_large $W/large 140 $W/train_large.log
    TRAIN=$!
    S=$SECONDS
    CUDA_VISIBLE_DEVICES=0 timeout 300 "${RUN[@]}" +study=claims hydra.sweep.dir=$W/default_1gpu \
      runner.trajectories=$W/traj_1gpu > $W/default_1gpu.log 2>&1
    log "claims default, 1 GPU: exit $? in $((SECONDS - S)) s"
    if [ -n "${SAMPLED_DEFAULT_ON_GPU0:-}" ]; then
      log "claims 5 (shipped model) on GPU 0 while the second model trains"
      CUDA_VISIBLE_DEVICES=0 sampled_for default
      pack --events refeed_on --name sampled_default $W/default_claims_sampled $W/default_claims_sampled_t10
    fi
    wait $TRAIN; log "training: exit $?"; tail -3 $W/train_large.log | tee -a "$LOG"
    pack --events refeed_on --name claims_default $W/default_1gpu

    if [ "$NG" -ge 2 ] && [ -z "${SKIP_TWO_GPU:-}" ]; then
      log "claims 2: the shipped model over $NG GPUs (issue #14)"
      S=$SECONDS
      timeout 200 "${RUN[@]}" "${L[@]}" +study=claims hydra.sweep.dir=$W/default_2gpu \
        runner.trajectories=$W/traj_2gpu > $W/default_2gpu.log 2>&1
      log "claims default, $NG GPUs: exit $? in $((SECONDS - S)) s"
      compare_sweeps $W/default_1gpu $W/default_2gpu $W/sweeps_1v2.json
    fi

    if [ -f $W/large/model.safetensors ]; then
      log "claims 3: the second model over $NG GPU(s)"
      S=$SECONDS
      timeout 240 "${RUN[@]}" "${L[@]}" +study=claims model=path model.path=$W/large \
        hydra.sweep.dir=$W/large_claims runner.trajectories=$W/traj_large > $W/large_claims.log 2>&1
      log "claims large: exit $? in $((SECONDS - S)) s"
      pack --events refeed_on --name claims_large $W/large_claims
    fi

    if [ -n "${REUSE:-}" ]; then   # issue 50: Q2-cold re-asked, PREFIX_REUSE and CARRY_DRAFTER (+study=claims_reuse)
      for m in default large; do
        if [ $m = default ]; then MODEL=(); else MODEL=(model=path model.path=$W/large); fi
        [ $m != default ] && [ ! -f $W/large/model.safetensors ] && continue
        S=$SECONDS
        timeout 200 "${RUN[@]}" +study=claims_reuse "${MODEL[@]}" runner.mode=replay workload.n_docs=192 \
          runner.batch_width=192 hydra.sweep.dir=$W/${m}_reuse runner.trajectories=$W/traj_${m}_reuse \
          > $W/${m}_reuse.log 2>&1
        log "claims_reuse $m: exit $? in $((SECONDS - S)) s"
      done
      pack --name claims_reuse $W/*_reuse
    fi
    if [ -n "${FAMILIES:-}" ]; then   # issue 49: every family over one stored trajectory (the shipped model)
      S=$SECONDS
      timeout 200 "${RUN[@]}" +study=families hydra.sweep.dir=$W/default_families \
        runner.trajectories=$W/traj_families > $W/default_families.log 2>&1
      log "families default: exit $? in $((SECONDS - S)) s"
      pack --name families_default $W/default_families
    fi
    [ -n "${SKIP_CONF:-}" ] && { log "claims 4 skipped (SKIP_CONF)"; CONF_MODELS=none; }
    log "claims 4: claims_conf (live, batch width 1) for: ${CONF_MODELS:-default large}"
    for m in ${CONF_MODELS:-default large}; do
      [ $m = none ] && continue
      if [ $m = default ]; then MODEL=(); G=0; else MODEL=(model=path model.path=$W/large); G=$LAST; fi
      [ $m != default ] && [ ! -f $W/large/model.safetensors ] && continue
      CUDA_VISIBLE_DEVICES=$G timeout 200 "${RUN[@]}" +study=claims_conf "${MODEL[@]}" \
        hydra.sweep.dir=$W/${m}_conf > $W/${m}_conf.log 2>&1 &
      PIDS+=($!)
      [ "$NG" -lt 2 ] && wait $!
    done
    if [ -n "${GPU0_EXTRA:-}" ]; then
      log "GPU 0 meanwhile: $GPU0_EXTRA"
      (cd "$REPO" && CUDA_VISIBLE_DEVICES=0 bash -c "$GPU0_EXTRA") > $W/gpu0_extra.log 2>&1
      log "GPU 0 extra: exit $?"
    fi
    for p in "${PIDS[@]}"; do wait $p; log "claims_conf job: exit $?"; done
    pack --events refeed_on --name claims_conf $W/*_conf
  fi
  if [ -n "${SAMPLED:-}" ]; then
    # issue 22: does REFEED's gain survive sampling? T 0.7 and 1.0, sampled and greedy drafts, coupled replay
    log "claims 5: claims_sampled (T 0.7) and claims_sampled_t10 (T 1.0) for: ${SAMPLED_MODELS:-default large}"
    for m in ${SAMPLED_MODELS:-default large}; do sampled_for $m "${L[@]}"; done
    pack --events refeed_on --name claims_sampled $W/*_claims_sampled $W/*_claims_sampled_t10
  fi
  mkdir -p $W/logs && cp $W/*.log $W/*.json $W/large/config.json $W/large/training.json $W/logs/ 2>/dev/null
  tar cJf "$OUT/logs.tar.xz" -C $W logs
}

# The claims questions asked sequentially (issue 38), at both model sizes: +study=claims_sequential
# (one job drives the questions' arms wave by wave, replay) beside the fixed-n +study=claims of the
# same model, then scripts/sequential_table.py: steps used against the fixed-n runs, and the verdicts.
# After the claims stage in the same call it reuses $CLAIMS_DIR/large and the fixed-n sweeps
# (default_1gpu, large_claims); without it, it trains the second model (TRAIN_BUDGET_S, 100 s).
# FIXED_N=0: no fixed-n sweep; the fixed-n verdicts and steps are the committed claims report's
# (analysis/reports/claims_2026-12-02: the same shipped model and workload; its 33.6M model is that
# day's training, not this call's), which saves ~1-2 min of device time per model.
# Knobs: CLAIMS_DIR, SEQ_OVERRIDES / CLAIMS_OVERRIDES / TRAIN_OVERRIDES (tiny dry runs on the CPU).
stage_sequential() {
  local W=${CLAIMS_DIR:-/tmp/claims} TRAIN= ROWS=() m S FIXED FIXED_JSON MODEL=()
  local RUN=(python3 -m atlas_ab -m runner.progress=false)
  mkdir -p $W && cd $W || return 1
  if [ ! -f $W/large/model.safetensors ]; then
    log "training the second model (preset gpu, ${TRAIN_BUDGET_S:-100} s) beside the shipped model's studies"
    train_large $W/large "${TRAIN_BUDGET_S:-100}" $W/train_large_seq.log
    TRAIN=$!
  fi
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
        # shellcheck disable=SC2086
        timeout 240 "${RUN[@]}" ${CLAIMS_OVERRIDES:-} +study=claims "${MODEL[@]}" hydra.sweep.dir=$FIXED \
          runner.trajectories=$W/traj_seq_$m > $W/${m}_fixed_seq.log 2>&1
        log "fixed-n claims $m: exit $? in $((SECONDS - S)) s"
      fi
      timeout 120 python3 -m atlas_ab.analysis report $FIXED/* --out $W/${m}_fixed_report --bootstrap 0 \
        > $W/${m}_fixed_report.log 2>&1
      log "fixed-n report $m: exit $?"
    fi
    S=$SECONDS
    # shellcheck disable=SC2086
    timeout 240 "${RUN[@]}" ${SEQ_OVERRIDES:-} +study=claims_sequential "${MODEL[@]}" hydra.sweep.dir=$W/${m}_sequential \
      runner.trajectories=$W/traj_seq_$m > $W/${m}_sequential.log 2>&1
    log "sequential claims $m: exit $? in $((SECONDS - S)) s"
    grep -A30 "^sequential study" $W/${m}_sequential.log | tee -a "$LOG"
    timeout 120 python3 -m atlas_ab.analysis report $W/${m}_sequential/* --out "$OUT/report_$m" --bootstrap 0 \
      > "$OUT/report_$m.log" 2>&1
    log "sequential report $m: exit $?"
    cp $W/${m}_sequential/study.json "$OUT/study_$m.json" 2>/dev/null
    cp "$FIXED_JSON" "$OUT/fixed_report_$m.json" 2>/dev/null
    ROWS+=("$m=$W/${m}_sequential:$FIXED_JSON")
  done
  python3 "$REPO/scripts/sequential_table.py" --out "$OUT" "${ROWS[@]}" 2>&1 | tee -a "$LOG"
  mkdir -p $W/seq_logs; cp $W/*.log $W/seq_logs/ 2>/dev/null
  tar cJf "$OUT/seq_logs.tar.xz" -C $W seq_logs
}

# The K ladder (issue 39) on one GPU: +study=ladder (K 0..K_MAX at each batch width, live, step by
# step, one wave a job) for LADDER_MODELS ("default gpu llama8b"), then `python -m atlas_ab.analysis
# ladder` for each, writing the ladders and the engine configs under $OUT:
#   default:  the shipped 7.3M model (trained): its acceptance is the one every ladder uses
#   gpu:      the 33.6M preset, random weights (runtime/presets.py, conf/model/gpu.yaml): timing only
#   llama8b:  the 5.7B-trunk shape, random weights (conf/model/llama8b.yaml): timing only
# Acceptance on random weights means nothing, so the gpu and llama8b ladders take their acceptance
# from the default model's runs (--acceptance) and their step times from their own; each ladder.md
# says so. One turn a document (workload.turns=1: 31 batched steps a job) keeps the three sweeps
# (72 jobs, each a model build and one wave) near 4 minutes of H200 time; a sweep cut by its timeout
# keeps its complete runs (the others are moved aside) and its ladder covers the widths that have every K.
# Each (B, K) is timed in REPLICATES jobs (study.replicates, default 3) in the study's seeded interleaved
# order, and the ladder pools them by random effects (docs/analysis.md); with REPLICATES=1 the ladders are
# "single replicate: not a verdict" and are written with --allow-single-replicate, which heads the configs.
# Three replicates triple a sweep: run one model a device call (LADDER_MODELS=default, then
# LADDER_MODELS=llama8b ACCEPTANCE_RUNS=<the default's runs, unpacked from ladder_runs_default.tar.xz>).
# Knobs: LADDER_WIDTHS ("[1,4,8,16,64,256]"), K_MAX (3), REPLICATES (3), ORDER_SEED (0), LADDER_OVERRIDES
# (after workload.turns=1; tiny dry runs on the CPU), LADDER_TIMEOUT (s a sweep; REPLICATES x 120 for default
# and gpu (70 cut the B=256 jobs on 2026-12-02), REPLICATES x 170 for llama8b, whose 24 jobs a replicate each
# build 11 GB of weights), ACCEPTANCE_RUNS (the default model's runs; default $LADDER_DIR/default),
# LADDER_DIR (/tmp/ladder), LADDER_PROCESSES (1; P > 1 runs the sweep in P processes one after another,
# order seeds ORDER_SEED + p, into $LADDER_DIR/<model>/p<p>, packed per process and analysed off the device:
# a process-level effect against the between-machine one, issue 51).
# A CPU check at a tiny size (no GPU, no wheels):
#   OUT=/tmp/ladder_out LADDER_MODELS="default gpu" LADDER_WIDTHS="[1,2]" K_MAX=1 \
#     LADDER_OVERRIDES="workload.turns=1 workload.chunk_tokens=16 workload.gen_tokens=8 study.waves=10 \
#     model.hidden_size=64 model.num_hidden_layers=2 model.num_attention_heads=4 model.num_key_value_heads=2 \
#     model.intermediate_size=96" bash scripts/gpu.sh ladder
stage_ladder() {
  local W=${LADDER_DIR:-/tmp/ladder} m S t d WS rc MODEL OV ACC ONE R=${REPLICATES:-3}
  local GRID=("study.widths=${LADDER_WIDTHS:-[1,4,8,16,64,256]}" "study.k_max=${K_MAX:-3}" "study.replicates=$R"
              "study.order_seed=${ORDER_SEED:-0}")
  rm -rf $W && mkdir -p $W
  for m in ${LADDER_MODELS:-default gpu llama8b}; do
    S=$SECONDS
    MODEL=()
    # model overrides in LADDER_OVERRIDES apply to random-weight shapes only (a checkpoint's config.json decides)
    # shellcheck disable=SC2206
    OV=(workload.turns=1 ${LADDER_OVERRIDES:-})
    if [ $m = default ]; then mapfile -t OV < <(printf '%s\n' "${OV[@]}" | grep -v '^model\.'); else MODEL=(model=$m); fi
    t=${LADDER_TIMEOUT:-$([ $m = llama8b ] && echo 170 || echo 120)}
    local p r G
    if [ -n "${LADDER_PROCESSES:-}" ]; then   # the experiment: P processes, each running every replicate
      for ((p = 0; p < LADDER_PROCESSES; p++)); do
        S=$SECONDS
        G=("${GRID[@]:0:3}" "study.order_seed=$(( ${ORDER_SEED:-0} + p ))")
        (cd $W && timeout $((t * R)) python3 -m atlas_ab -m +study=ladder "${MODEL[@]}" "${G[@]}" \
           runner.progress=false hydra.sweep.dir=$W/$m/p$p "${OV[@]}") > $W/${m}_p$p.log 2>&1
        log "ladder sweep $m process $p: exit $? in $((SECONDS - S)) s ($(ls -d $W/$m/p$p/*_k* 2>/dev/null | wc -l) runs)"
        pack --name ladder_runs_${m}_p$p $W/$m/p$p
      done
      continue
    fi
    for ((r = 0; r < R; r++)); do   # the protocol: each replicate its own process (config/ladder_order.py)
      (cd $W && timeout $t python3 -m atlas_ab -m +study=ladder "${MODEL[@]}" "${GRID[@]}" study.block=$r \
         runner.progress=false hydra.sweep.dir=$W/$m/r$r "${OV[@]}") > $W/${m}_r$r.log 2>&1
      log "ladder sweep $m replicate $r: exit $? ($(ls -d $W/$m/r$r/*_k* 2>/dev/null | wc -l) runs)"
    done
    log "ladder sweep $m: $R processes in $((SECONDS - S)) s"
    tail -2 $W/${m}_r$((R - 1)).log | tee -a "$LOG"
    for d in $W/$m/r*/*_k*; do   # a job cut by the timeout is not a result
      grep -q '"status": "complete"' $d/manifest.json 2>/dev/null || { mkdir -p $W/${m}_cut; mv $d $W/${m}_cut/; log "cut: $d"; }
    done
    pack --name ladder_runs_$m $W/$m/r*
  done
  # the widths of a sweep whose every K (0..K_MAX) ran to completion
  widths() { python3 -c "
import json, pathlib, sys
cells = {}
for m in pathlib.Path(sys.argv[1]).glob('r*/*_k*/manifest.json'):
    j = json.loads(m.read_text()); cells.setdefault(j['waves']['batch_width'], set()).add(j['levers']['num_drafts'])
print(' '.join(str(b) for b, ks in sorted(cells.items()) if ks >= set(range(int(sys.argv[2]) + 1))))" "$1" "${K_MAX:-3}"; }
  # the ladders: the default model's from its own runs; the shapes' timing with the default's acceptance
  [ -n "${LADDER_PROCESSES:-}" ] && { log "LADDER_PROCESSES: runs packed per process, analysed off the device"; return 0; }
  for m in ${LADDER_MODELS:-default gpu llama8b}; do
    ACC=()
    [ $m != default ] && ACC=(--acceptance ${ACCEPTANCE_RUNS:-$W/default})
    ONE=()
    [ $R = 1 ] && ONE=(--allow-single-replicate)   # asked for one replicate: configs written, headed "not a verdict"
    WS=$(widths $W/$m)
    [ -z "$WS" ] && { log "ladder $m: no width has every K"; continue; }
    # shellcheck disable=SC2086
    python3 -m atlas_ab.analysis ladder $W/$m "${ACC[@]}" --widths $WS "${ONE[@]}" --out "$OUT/ladder_$m" \
      > "$OUT/ladder_$m.txt" 2> "$OUT/ladder_$m.err"
    rc=$?
    log "ladder $m: exit $rc ($(tail -1 "$OUT/ladder_$m.err" 2>/dev/null))"
    if [ $rc = 2 ] && grep -q "their kind's median" "$OUT/ladder_$m.err"; then   # a stall: kept, and said so
      # shellcheck disable=SC2086
      python3 -m atlas_ab.analysis ladder $W/$m "${ACC[@]}" --widths $WS "${ONE[@]}" --allow-outliers \
        --out "$OUT/ladder_${m}_outliers_kept" > "$OUT/ladder_${m}_outliers_kept.txt" 2>> "$OUT/ladder_$m.err"
      log "ladder $m with --allow-outliers: exit $? (ladder_${m}_outliers_kept)"
    fi
    grep -hE 'pays|not known|replicates per cell|processes' "$OUT"/ladder_$m*.txt | tee -a "$LOG"
  done
  log "if an analysis failed here (matplotlib or statsmodels missing on the device), unpack ladder_runs_*.tar.xz and run"
  log "  python -m atlas_ab.analysis ladder RUNS_default --out ladder_default"
  log "  python -m atlas_ab.analysis ladder RUNS_gpu --acceptance RUNS_default --out ladder_gpu   (llama8b the same)"
}

# Issue 40, both model sizes: the tree study (claims question 8: the top-2 tree against the linear K=2
# chain, live, its steps captured as CUDA graphs on the Triton path), the SHADOW_TOPK run of the same
# documents that its prediction reads, the prediction (coverage --tree), the report with the registered
# verdict, the tree study replayed on one stored trajectory (the paired look), and the baseline without
# run-ahead (a tree step does not run ahead, so the cost side compares both ways); the tree arms' GPU
# tests while the second model trains. The second model is the 33.6M preset trained here
# (TRAIN_BUDGET_S, 100 s) or MODEL_DIR=DIR. Writes per model into $OUT: the prediction, the report and
# verdict, the logs, and the runs as one tar (runs_<model>.tar.xz).
# Knobs: N_DOCS (32: the tree arm then verifies > 2,000 steps), TREE_OVERRIDES / TRAIN_OVERRIDES (tiny
# dry runs on the CPU), TREE_PARTS (a subset of "shadow tree baseline_step tree_replay sampled analysis"),
# SAMPLED_ARMS, SKIP_TESTS=1, TREE_DIR (/tmp/tree).
stage_tree() {
  local W=${TREE_DIR:-/tmp/tree} LARGE=${MODEL_DIR:-} TRAIN= m S a t M O
  local PARTS=${TREE_PARTS:-shadow tree baseline_step tree_replay sampled analysis}
  part() { [[ " $PARTS " == *" $1 "* ]]; }
  read -r -a O <<< "${TREE_OVERRIDES:-}"
  mkdir -p $W
  if [ -z "$LARGE" ]; then
    LARGE=$W/large
    log "training the second model (preset gpu, ${TRAIN_BUDGET_S:-100} s) beside the shipped model's runs"
    train_large $LARGE "${TRAIN_BUDGET_S:-100}" "$OUT/train_large.log"
    TRAIN=$!
  fi
  for m in default large; do
    M=()
    if [ $m = large ]; then
      if [ -z "${SKIP_TESTS:-}" ]; then      # while the second model trains
        run_tests "$OUT/gpu_tree_tests.log" 150 -k tree tests/run/test_whole_step_graph.py tests/run/test_gpu_fp32_rows.py
      fi
      [ -n "$TRAIN" ] && { wait $TRAIN; log "training: exit $?"; tail -2 "$OUT/train_large.log" | tee -a "$LOG"; }
      [ -f $LARGE/model.safetensors ] || { log "no second model: $m skipped"; continue; }
      M=(model=path model.path=$LARGE)
    fi
    if part shadow; then
      S=$SECONDS
      python3 -m atlas_ab runner.progress=false +arm=shadow_topk_4 workload.n_docs=${N_DOCS:-32} \
        "${M[@]}" "${O[@]}" hydra.run.dir=$W/${m}_shadow > "$OUT/${m}_shadow.log" 2>&1
      log "$m shadow_topk_4: exit $? in $((SECONDS - S)) s"
    fi
    if part tree; then
      S=$SECONDS
      python3 -m atlas_ab -m runner.progress=false +study=tree workload.n_docs=${N_DOCS:-32} "${M[@]}" "${O[@]}" \
        hydra.sweep.dir=$W/${m}_tree > "$OUT/${m}_tree.log" 2>&1
      log "$m +study=tree: exit $? in $((SECONDS - S)) s"
    fi
    if part baseline_step; then
      S=$SECONDS
      python3 -m atlas_ab runner.progress=false +arm=baseline runner.run_ahead=false workload.n_docs=${N_DOCS:-32} \
        "${M[@]}" "${O[@]}" hydra.run.dir=$W/${m}_baseline_step > "$OUT/${m}_baseline_step.log" 2>&1
      log "$m baseline, no run-ahead: exit $? in $((SECONDS - S)) s"
    fi
    if part tree_replay; then
      S=$SECONDS
      python3 -m atlas_ab -m runner.progress=false +study=tree_replay workload.n_docs=${N_DOCS:-32} "${M[@]}" \
        "${O[@]}" hydra.sweep.dir=$W/${m}_tree_replay runner.trajectories=$W/traj_$m > "$OUT/${m}_tree_replay.log" 2>&1
      log "$m +study=tree_replay: exit $? in $((SECONDS - S)) s"
    fi
    if [ $m = default ] && part sampled; then      # sampled trees (tree_sampling.py) against the chain with greedy drafts, T=0.7
      for a in ${SAMPLED_ARMS:-"+arm=tree_top2" "+arm=baseline arm.draft_policy=greedy"}; do
        S=$SECONDS; t=$(echo "$a" | cut -d= -f2 | cut -d' ' -f1)
        # shellcheck disable=SC2086
        python3 -m atlas_ab runner.progress=false $a workload.sampling.temperature=0.7 workload.n_docs=${N_DOCS:-32} \
          "${O[@]}" hydra.run.dir=$W/${m}_sampled_$t > "$OUT/${m}_sampled_$t.log" 2>&1
        log "$m $a sampled T=0.7: exit $? in $((SECONDS - S)) s"; grep -h "^arm " "$OUT/${m}_sampled_$t.log" | tee -a "$LOG"
      done
    fi
    part analysis || continue
    grep -h "^arm " "$OUT/${m}_shadow.log" "$OUT/${m}_tree.log" "$OUT/${m}_baseline_step.log" "$OUT/${m}_tree_replay.log" \
      | tee -a "$LOG"
    python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 > "$OUT/${m}_prediction.md" 2>&1
    tail -3 "$OUT/${m}_prediction.md" | tee -a "$LOG"
    python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 --realized $W/${m}_tree/1_tree_top2 \
      --json > "$OUT/${m}_prediction.json" 2>&1
    python3 -m atlas_ab.analysis coverage $W/${m}_shadow --tree topk:2,1 --linear-k 2 --realized $W/${m}_tree/1_tree_top2 \
      > "$OUT/${m}_check.md" 2>&1
    tail -12 "$OUT/${m}_check.md" | tee -a "$LOG"
    python3 -m atlas_ab.analysis report $W/${m}_tree/0_baseline $W/${m}_tree/1_tree_top2 $W/${m}_tree/2_tree_linear2 \
      --out $W/${m}_report > "$OUT/${m}_verdict.txt" 2>&1
    log "$m report: exit $?"; head -5 "$OUT/${m}_verdict.txt" | tee -a "$LOG"
    python3 -m atlas_ab.analysis report $W/${m}_tree_replay/[0-9]* --out $W/${m}_replay_report > "$OUT/${m}_replay_verdict.txt" 2>&1
    log "$m replay report: exit $?"; head -5 "$OUT/${m}_replay_verdict.txt" | tee -a "$LOG"
  done
  for m in default large; do
    [ -d $W/${m}_tree ] || continue
    # shellcheck disable=SC2046
    tar cJf "$OUT/runs_$m.tar.xz" -C $W $(cd $W && ls -d ${m}_shadow ${m}_tree ${m}_baseline_step ${m}_tree_replay \
      ${m}_report ${m}_replay_report ${m}_sampled_* 2>/dev/null)      # the parts this call ran
  done
}

# Issue 49: which drafter family to serve at each batch width, at one model size (FL_MODEL: default, the
# shipped 7.3M model; gpu, the 33.6M preset trained here for TARGET_S s, 100, with its EAGLE-3 head for
# HEAD_S s, 90, and the shipped 7.3M model as its draft model). Timing: +study=families_ladder, REPLICATES
# (3) processes, one a replicate (study.block=r), widths FL_WIDTHS ([1,16,64]), families FL_FAMILIES (the
# study's: "[plain,ngram,baseline]" times those alone), nothing else on the GPU.
# Acceptance: +study=families in replay (FL_DOCS documents, 192), its four first arms while the head trains,
# then eagle3 into the same sweep; FL_ACC=0 skips it (the shipped model's families runs are committed:
# analysis/reports/families_h200_2026-12-03). Then the family ladder and the families report, when the
# acceptance ran here; every run packed into $OUT (families_acc_<m>, families_ladder_<m>). FL_OVERRIDES:
# overrides for every run (a tiny dry run on the CPU: "workload.turns=1 runner.device=cpu", FL_DOCS=8).
stage_families_ladder() {
  local W=${FL_DIR:-/tmp/families_ladder} m=${FL_MODEL:-default} R=${REPLICATES:-3} r S T H rc
  local M=() ACC=${FL_ACC:-1} t=${FL_TIMEOUT:-170} OV
  read -ra OV <<< "${FL_OVERRIDES:-}"
  rm -rf $W && mkdir -p $W
  if [ $m = gpu ]; then
    T=$W/target H=$W/head
    S=$SECONDS
    train_large $T ${TARGET_S:-100} $W/target.log; wait
    log "target: $(tail -1 $W/target.log) in $((SECONDS - S)) s"
    [ -f $T/config.json ] || { log "target: not trained"; return 1; }
    timeout $(( ${HEAD_S:-90} + 90 )) python3 -m atlas_ab.train eagle3 --preset gpu --target $T --out $H \
      --data "$REPO/.carry/data" --budget-s ${HEAD_S:-90} --log-every 200 > $W/head.log 2>&1 &
    M=(model=path model.path=$T model.draft_path=$REPO/atlas_ab/models/default model.eagle3_path=$H)
  fi
  if [ $ACC = 1 ]; then   # acceptance in replay (one trajectory): GPU-shared with the head's training, which moves no token
    S=$SECONDS
    (cd $W && timeout 400 python3 -m atlas_ab -m +study=families "${M[@]}" +arm=baseline,draft_model,ngram,suffix \
       workload.n_docs=${FL_DOCS:-192} "${OV[@]}" runner.progress=false hydra.sweep.dir=$W/acc) > $W/acc.log 2>&1
    log "families replay (4 arms): exit $? in $((SECONDS - S)) s"
  fi
  wait   # the head
  [ $m = gpu ] && { log "head: $(grep -E 'agreement|DONE' $W/head.log | tr '\n' ' ')"; [ -f $H/config.json ] || return 1; }
  if [ $ACC = 1 ]; then
    S=$SECONDS
    (cd $W && timeout 200 python3 -m atlas_ab -m +study=families "${M[@]}" +arm=eagle3 workload.n_docs=${FL_DOCS:-192} \
       "${OV[@]}" runner.progress=false hydra.sweep.dir=$W/acc) > $W/acc_eagle3.log 2>&1
    log "families replay (eagle3): exit $? in $((SECONDS - S)) s"
    grep -hE '^arm ' $W/acc.log $W/acc_eagle3.log | tee -a "$LOG"
    pack --name families_acc_$m $W/acc
  fi
  for ((r = 0; r < R; r++)); do   # each replicate its own process, nothing else on the GPU
    S=$SECONDS
    (cd $W && timeout $t python3 -m atlas_ab -m +study=families_ladder "${M[@]}" study.widths=${FL_WIDTHS:-[1,16,64]} \
       ${FL_FAMILIES:+study.families=$FL_FAMILIES} study.replicates=$R study.block=$r "${OV[@]}" runner.progress=false \
       hydra.sweep.dir=$W/ladder/r$r) > $W/ladder_r$r.log 2>&1
    log "families_ladder $m replicate $r: exit $? in $((SECONDS - S)) s ($(ls -d $W/ladder/r$r/*/ 2>/dev/null | wc -l) runs)"
    for d in $W/ladder/r$r/*/; do   # a job cut by the timeout is not a result
      grep -q '"status": "complete"' $d/manifest.json 2>/dev/null || { mkdir -p $W/cut; mv $d $W/cut/; log "cut: $d"; }
    done
    pack --name families_ladder_${m}_r$r $W/ladder/r$r   # each replicate as it ends: a call cut short keeps it
  done
  cp $W/*.log "$OUT/" 2>/dev/null
  [ $ACC = 1 ] || { log "families_ladder $m: acceptance elsewhere; analyse off the device"; return 0; }
  python3 -m atlas_ab.analysis ladder $W/ladder --acceptance $W/acc/* --out "$OUT/family_ladder_$m" \
    > "$OUT/family_ladder_$m.txt" 2> "$OUT/family_ladder_$m.err"
  rc=$?; log "family ladder $m: exit $rc ($(tail -1 "$OUT/family_ladder_$m.err" 2>/dev/null))"
  python3 -m atlas_ab.analysis report $W/acc/* --out "$OUT/families_$m" > "$OUT/families_$m.txt" 2>&1
  log "families report $m: exit $?"; grep -hE 'MET|pays|tied' "$OUT"/family_ladder_$m.txt "$OUT/families_$m.txt" | tee -a "$LOG"
  return $rc
}

stage_peer() { OUT=$OUT bash scripts/llamacpp_peer.sh; }

# ---- the call -----------------------------------------------------------------------------------------
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv 2>&1 | tee -a "$LOG"
log "stages: ${ASKED[*]}${TINY:+ (TINY)}"
if asked e2e || asked coldsplit; then    # a cold start's figures: nothing may warm the caches before them
  log "caches before: $(du -sh ~/.cache/atlas_ab 2>/dev/null || echo none)"
  mkdir -p $TTV
  asked coldsplit && python3 scripts/page_cache.py --json $TTV/pc0.json --top 12 > "$OUT/page_cache.txt" 2>&1
else
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$LOG"
  code_hash
fi
RC=0
for s in "${ASKED[@]}"; do
  log "== $s"
  ( "stage_$s" )
  rc=$?; log "== $s: exit $rc"
  [ $rc != 0 ] && [ $RC = 0 ] && RC=$rc
done
if asked e2e || asked coldsplit; then
  code_hash     # last: nothing warms the cold run's imports
  log "Triton kernels built into the caches: $(find ~/.cache/atlas_ab/triton $TTV/e2e/cache_1t/triton -name '*.cubin' 2>/dev/null | wc -l) cubins; by name: $(find ~/.cache/atlas_ab/triton -name '*.cubin' 2>/dev/null | xargs -r -n1 basename | sort | uniq -c | sort -rn | head -12 | tr '\n' ' ')"
  log "caches after: $(du -sh ~/.cache/atlas_ab 2>/dev/null || echo none)"
fi
log "done"
python3 scripts/device_transfer.py bundle "$OUT"        # the device returns at most 8 files
exit $RC
