#!/usr/bin/env bash
# Issue 41, time to a verdict, in one device call on a FRESH machine (carry .whl; 585 s of stage
# timeouts at most, ~6-7 min expected; STAGES splits it over two calls):
#   device run (carry .whl, built by scripts/gpu_wheels.sh): bash scripts/gpu_time_to_verdict.sh
# Stages, each under `timeout`, each writing its JSON/log under $OUT as it ends (a call that runs
# out of time still returns what finished); STAGES picks some ("e2e grid forward fp gpu_test"):
#   e2e      bench/bench_e2e.py: the main job twice in separate processes (cold, then warm caches:
#            the manifests' timings say import / model / compile / capture), once without CUDA graphs,
#            once with its bookkeeping compiled, once on this machine's CPU, the claims study, the
#            5.7B 64 x 8 run twice, the tree study (the first job a timeout cuts)   -> $OUT/e2e.json
#            (E2E_JOBS picks other jobs, E2E_TIMEOUT (240) the stage's limit; *_prof jobs' .pstats come back)
#   gpu_test tests/run/test_gpu_fp32_rows.py: GPU fp32 step rows == CPU fp32 on every claims arm
#   grid     bench_runner's grid (GRID_MODELS, default the 5.7B shape, then the 33.6M preset), B=16,64 K=1-3:
#            step / its physical limit at 4.8 TB/s (the JSON is written after each model; GRID_TIMEOUT,
#            150 s: the 5.7B cells take ~17 s each, 90 s cut the sixth on 2026-12-03)
#   forward  bench_forward at 5.7B: the verify forward / its bytes at the rated bandwidth, and the
#            read-only bandwidth beside the copy and the rated one
#   fp       bench_runner --only-fingerprints: FINGERPRINTS on / off at B=256, 11 alternations
#   coldsplit where a cold start goes: the page cache before and after the e2e stage (what its jobs read,
#            scripts/page_cache.py) and the disk's speed, then the main job again with only Triton's cache
#            emptied (the cost of building our kernels)                  -> $OUT/page_cache.txt, $OUT/e2e_tritoncold.json
# TINY=1: each stage tiny, on the CPU if there is no GPU (the check of the mechanics; not timed).
# PYC=1 (default): Python caches bytecode (/tmp/pyc), as an install does by default; the image
# ships torch without it and sets PYTHONDONTWRITEBYTECODE=1, so every process compiled torch's sources.
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-/tmp/ttv_out}; mkdir -p "$OUT"
STAGES=${STAGES:-e2e grid forward fp gpu_test}
if [ "${PYC:-1}" = 1 ]; then export PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=/tmp/pyc; fi
W=/tmp/ttv && mkdir -p $W
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/ttv.log"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
T() { if [ -n "${TINY:-}" ]; then echo "$2"; else echo "$1"; fi; }     # T <real> <tiny>
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$OUT/ttv.log"
log "caches before: $(du -sh ~/.cache/atlas_ab 2>/dev/null || echo none) | stages: $STAGES${TINY:+ (TINY)}"

if has coldsplit; then python3 scripts/page_cache.py --json $W/pc0.json --top 12 > "$OUT/page_cache.txt" 2>&1; fi

if has e2e; then
  S=$SECONDS
  timeout $(T ${E2E_TIMEOUT:-240} 900) python3 bench/bench_e2e.py \
    --jobs ${E2E_JOBS:-main,main,main_eager,main_fuse,main_cpu,claims,llama8b,llama8b,tree} \
    --workdir $W/e2e --job-timeout $(T 110 300) --json "$OUT/e2e.json" $(T "" --smoke) \
    > $W/e2e.out 2> "$OUT/e2e.err"
  log "e2e: exit $? in $((SECONDS - S)) s"
  grep -E "^\| |complete" "$OUT/e2e.err" | tee -a "$OUT/ttv.log"
  for f in $W/e2e/*.log; do tail -5 "$f" > "$OUT/e2e_$(basename "$f")"; done
  for f in $W/e2e/*.pstats; do [ -f "$f" ] && cp "$f" "$OUT/"; done       # the *_prof jobs' profiles
fi

if has coldsplit; then
  python3 scripts/page_cache.py --json $W/pc1.json --top 0 > /dev/null
  python3 scripts/page_cache.py --diff $W/pc0.json $W/pc1.json --top 25 >> "$OUT/page_cache.txt" 2>&1
  python3 scripts/page_cache.py --read-mb 3000 --top 0 >> "$OUT/page_cache.txt" 2>&1
  rm -rf ~/.cache/atlas_ab/triton
  timeout $(T 120 300) python3 bench/bench_e2e.py --jobs main --workdir $W/e2e_tc --job-timeout 110 \
    --json "$OUT/e2e_tritoncold.json" $(T "" --smoke) > /dev/null 2> "$OUT/e2e_tritoncold.err"
  log "coldsplit: $(grep -E 'complete' "$OUT/e2e_tritoncold.err" | head -1) | $(grep -E '^read between' "$OUT/page_cache.txt")"
fi

if has grid; then
  S=$SECONDS
  timeout $(T ${GRID_TIMEOUT:-150} 600) python3 bench/bench_runner.py $(T "--models ${GRID_MODELS:-llama8b,gpu} --widths 16,64" --smoke) \
    --only-grid \
    --json "$OUT/runner_grid.json" > /dev/null 2> "$OUT/runner_grid.err"
  log "grid: exit $? in $((SECONDS - S)) s"
  grep -E "^\| |B=" "$OUT/runner_grid.err" | tee -a "$OUT/ttv.log"
fi

if has forward; then
  S=$SECONDS
  timeout $(T 60 600) python3 bench/bench_forward.py $(T "--shapes 5.7B --budget-s 45 --no-check" --smoke) \
    --json "$OUT/forward.json" > "$OUT/forward.out" 2> "$OUT/forward.err"
  log "forward: exit $? in $((SECONDS - S)) s"
  grep -E "copy|^\| (goal|forward)" "$OUT/forward.err" "$OUT/forward.out" | head -8 | tee -a "$OUT/ttv.log"
fi

if has fp; then
  S=$SECONDS
  timeout $(T 45 600) python3 bench/bench_runner.py $(T "" --smoke) --only-fingerprints --fp-alternations 11 \
    --json "$OUT/fingerprints.json" > /dev/null 2> "$OUT/fingerprints.err"
  log "fp: exit $? in $((SECONDS - S)) s"
  grep -E "FINGERPRINTS" "$OUT/fingerprints.err" | tee -a "$OUT/ttv.log"
fi
if has gpu_test; then
  S=$SECONDS
  timeout $(T 90 300) python3 -m pytest -q -p no:cacheprovider $(T "-m gpu" "") tests/run/test_gpu_fp32_rows.py \
    > "$OUT/gpu_test.log" 2>&1
  log "gpu_test: exit $? in $((SECONDS - S)) s: $(tail -1 "$OUT/gpu_test.log")"
fi

log "code: $(python3 -m atlas_ab.run.provenance 2>&1)"     # last: nothing warms the cold run's imports
log "Triton kernels built into the caches: $(find ~/.cache/atlas_ab/triton $W/e2e/cache_1t/triton -name '*.cubin' 2>/dev/null | wc -l) cubins; by name: $(find ~/.cache/atlas_ab/triton -name '*.cubin' 2>/dev/null | xargs -r -n1 basename | sort | uniq -c | sort -rn | head -12 | tr '\n' ' ')"
log "caches after: $(du -sh ~/.cache/atlas_ab 2>/dev/null || echo none)"
log "done"
python3 scripts/bundle_out.py "$OUT"                      # the device returns at most 8 files
