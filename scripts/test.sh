#!/usr/bin/env bash
# The test command. GPU tests skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# Passive OpenMP waits, for pytest and every run it starts: spinning threads on a shared machine cost
# several times the run.
export OMP_WAIT_POLICY=PASSIVE
# The whole suite, slow end-to-end tests included, at one torch thread, one process (what CI has always run);
# the edit-test loop: pytest -m "not slow" -n 2.
python3 -m pytest -q -p no:cacheprovider "$@"
# The float_sensitive tests again at two threads (a GEMM splits its sums by thread count, so they must hold
# at any). 5 = none selected.
ATLAS_AB_TEST_THREADS=2 python3 -m pytest -q -p no:cacheprovider "$@" -m float_sensitive \
  || [ $? -eq 5 ]
