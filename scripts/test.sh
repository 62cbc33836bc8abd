#!/usr/bin/env bash
# The test command. GPU tests skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# The whole suite, slow end-to-end tests included; the edit-test loop: pytest -m "not slow".
python3 -m pytest -q -p no:cacheprovider "$@"
