#!/usr/bin/env bash
# Builds the whole project against the CUDA build of torch and imports the module: the check
# that InfiniPipe compiles and links against CUDA PyTorch (docs/runtime.md, "On GPUs").
#
#   scripts/check_cuda_build.sh [--venv DIR] [--build-dir DIR] [--torch VERSION] [--fresh]
#
# - A virtualenv of its own (default: ../infinipipe-cuda-venv beside the checkout) with
#   torch==$TORCH_VERSION as pip resolves it: on Linux x86-64 that is the CUDA build, several GB
#   (pip's configured indexes and caches serve it; on the dev machine it lies on local disk).
#   Never the project's .venv, which keeps the pinned CPU torch.
# - The CUDA toolkit: nvcc from PATH, else /usr/local/cuda/bin (CUDA_HOME wins when set).
# - A build directory of its own (default: ../infinipipe-build-cuda), everything built (the
#   planning core, its tests, the LibTorch parts, the tools, the Python module), niced, after
#   any other ninja on the machine has finished. The module goes into the build directory
#   (INFINIPIPE_PYTHON_MODULE_DIR), beside a copy of the package's Python files, so the
#   checkout's python/infinipipe/_C*.so (built against the CPU torch) is left alone.
# - Then, with torch's CUDA build: `import infinipipe._C`, which kernel chunk attention would
#   pick on CUDA, and tests/kernels on the CPU (the GPU tests skip, saying why, without a GPU).
#
# Not in CI: the download is several GB and the build takes a quarter of an hour on 2 cores.
# Prints a report (versions, wall times) and writes it to BUILD_DIR/cuda_build_report.txt.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PARENT=$(dirname "$REPO")
VENV="$PARENT/infinipipe-cuda-venv"
BUILD="$PARENT/infinipipe-build-cuda"
TORCH_VERSION=2.14.1
FRESH=false
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) VENV=$(realpath -m "$2"); shift 2 ;;
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --torch) TORCH_VERSION=$2; shift 2 ;;
    --fresh) FRESH=true; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "check_cuda_build: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$VENV/" in "$REPO"/*) echo "check_cuda_build: --venv must be outside the checkout" >&2; exit 2 ;; esac
case "$BUILD/" in "$REPO"/*) echo "check_cuda_build: --build-dir must be outside the checkout" >&2; exit 2 ;; esac

START=$(date +%s)
phase_start=$START
declare -a TIMES=()
phase_done() {  # name
  local now; now=$(date +%s)
  TIMES+=("$1: $((now - phase_start)) s")
  echo "check_cuda_build: $1 took $((now - phase_start)) s"
  phase_start=$now
}

if $FRESH; then rm -rf "$VENV" "$BUILD"; fi

# --- the virtualenv with torch's CUDA build -------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  echo "check_cuda_build: creating $VENV"
  python3 -m venv "$VENV"
fi
have=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${have%%+*}" != "$TORCH_VERSION" ]; then
  echo "check_cuda_build: installing torch==$TORCH_VERSION (CUDA build) into $VENV"
  nice -n 19 "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy tqdm pytest
fi
source "$REPO/scripts/torch_build.sh"
torch_cuda_toolkit "$VENV/bin/python" || { echo "check_cuda_build: see above" >&2; exit 1; }
if [ -z "$TORCH_CUDA" ]; then
  echo "check_cuda_build: $VENV has a torch without CUDA ($("$VENV/bin/python" -c \
    'import torch; print(torch.__version__)')); this check needs the CUDA build" >&2
  exit 1
fi
phase_done "virtualenv (torch $TORCH_VERSION)"

# --- configure and build ----------------------------------------------------------------------
waited=false
while pgrep -x ninja >/dev/null; do  # one build at a time on a small machine
  echo "check_cuda_build: waiting for another ninja to finish ($(pgrep -ax ninja | head -1))"
  waited=true
  sleep 30
done
if $waited; then phase_done "waiting for another build"; else phase_start=$(date +%s); fi
PKG="$BUILD/python-package"
# the package's Python files beside the module this build writes (never the checkout's module)
copy_python_package "$REPO" "$PKG"
TORCH_PREFIX=$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
nice -n 19 cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DINFINIPIPE_WITH_TORCH=ON -DINFINIPIPE_BUILD_TESTS=ON \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DPython_EXECUTABLE="$VENV/bin/python" \
  "${TORCH_CMAKE_ARGS[@]}" \
  -DINFINIPIPE_PYTHON_MODULE_DIR="$PKG/infinipipe" > "$BUILD/configure.log" 2>&1 || {
  tail -40 "$BUILD/configure.log" >&2
  echo "check_cuda_build: configure failed (whole log: $BUILD/configure.log)" >&2
  exit 1
}
grep -E "CUDA|cuDNN|Torch" "$BUILD/configure.log" | grep -v "^--   " | head -20 || true
phase_done "configure"
nice -n 19 cmake --build "$BUILD" -j "$(nproc)"
phase_done "build"

# --- import with torch's CUDA build ------------------------------------------------------------
PYTHONPATH="$PKG" "$VENV/bin/python" - <<'EOF'
import torch

import infinipipe._C as C

assert torch.version.cuda, "not torch's CUDA build"
print(f"import infinipipe._C: ok ({C.__file__})")
print(f"torch.cuda.is_available(): {torch.cuda.is_available()}")
for dtype, head_dim in ((torch.bfloat16, 128), (torch.float32, 128), (torch.float64, 64)):
    kernel = C.kernels.attention_kernel("cuda", dtype, head_dim)
    print(f"chunk attention on CUDA, {dtype}, head_dim {head_dim}: {kernel}")
EOF
PYTHONPATH="$PKG" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$REPO/tests/kernels" -rs \
  2>&1 | tail -15
phase_done "import and tests/kernels on CPU"

REPORT="$BUILD/cuda_build_report.txt"
{
  echo "InfiniPipe CUDA build check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$REPO" rev-parse --short HEAD)"
  "$VENV/bin/python" -c 'import sys, torch
nccl = ".".join(map(str, torch.cuda.nccl.version()))
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"NCCL {nccl}), Python {sys.version.split()[0]}")'
  echo "nvcc $NVCC_VERSION ($NVCC)"
  echo "$(c++ --version | head -1)"
  echo "$(cmake --version | head -1), ninja $(ninja --version)"
  echo "cores: $(nproc)"
  for t in "${TIMES[@]}"; do echo "  $t"; done
  echo "total: $(($(date +%s) - START)) s"
} | tee "$REPORT"
echo "check_cuda_build: ok (report: $REPORT)"
