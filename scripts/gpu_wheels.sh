#!/usr/bin/env bash
# Built here, not on the device: the wheels the GPU machine lacks (it has torch, triton, transformers,
# pandas, scipy, safetensors, tokenizers; it reaches no package registry), for its Python 3.12, into
# .whl/ (git-ignored), so every call carries the same set: `device run ... carry=[".whl"]`, and
# scripts/gpu.sh installs them into /tmp/site first (WHL=.whl_gpu: the slim set, no statsmodels).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# pure-Python wheels (any platform)
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl \
  "hydra-core==1.3.2" "omegaconf==2.3.0" "hydra-joblib-launcher==1.2.0" "patsy==1.0.1"
# antlr4 4.9.3 (what omegaconf 2.3 pins) ships only as an sdist: build its pure-Python wheel here
python3 -m pip wheel -q --no-deps -w .whl "antlr4-python3-runtime==4.9.3"
# compiled: for CPython 3.12 on x86-64
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLAT[@]}" -d .whl "statsmodels==0.14.4"
# the slim set most calls need (no statsmodels), for when the tree nears the device's 64 MiB
rm -rf .whl_gpu && mkdir -p .whl_gpu && cp .whl/antlr4_* .whl/hydra_core-* .whl/omegaconf-* .whl_gpu/
ls -1 .whl .whl_gpu
du -sh .whl .whl_gpu
