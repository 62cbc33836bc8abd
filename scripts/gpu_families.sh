#!/usr/bin/env bash
# Issue 49 on one H200 (< 5 min): the weightless families' GPU tests (eager and captured step graphs, bf16),
# then the MTP head, n-gram and suffix decoding live on the default model and workload (their step times
# are the cost side: a weightless family's draft costs no forward), and the two family registrations
# judged on them (UNLOCKED: live runs outside the study lock nothing; the study itself is the replay sweep).
#   bash scripts/gpu_families.sh [OUT]
set -euo pipefail
out=${1:-${OUT:-runs}/gpu_families}
python -m pytest -q -p no:cacheprovider tests/run/test_gpu_runner.py -k weightless
for arm in baseline ngram suffix; do
  python -m atlas_ab +arm="$arm" runner.device=cuda runner.progress=false hydra.run.dir="$out/$arm"
done
python -m atlas_ab.analysis report "$out/ngram" "$out/baseline" --prereg families_mtp_vs_ngram \
  --evaluate-unlocked --out "$out/report_mtp_vs_ngram" || true
python -m atlas_ab.analysis report "$out/ngram" "$out/suffix" --prereg families_suffix_vs_ngram \
  --evaluate-unlocked --out "$out/report_suffix_vs_ngram" || true
