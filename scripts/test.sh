#!/usr/bin/env bash
# The test command. GPU tests skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# ATLAS_AB_SLOW=1: include the end-to-end runs through the real runner (kill -9 + resume, two-arm sweep).
ATLAS_AB_SLOW=${ATLAS_AB_SLOW:-1} python3 -m pytest -q -p no:cacheprovider "$@"
