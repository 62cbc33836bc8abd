#!/usr/bin/env bash
# The test command. GPU tests skip themselves without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pytest -q -p no:cacheprovider "$@"
