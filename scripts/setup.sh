#!/usr/bin/env bash
# Set up a fresh machine. The CPU build of torch goes in FIRST: a bare `torch`
# requirement with no torch installed would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[dev]"
