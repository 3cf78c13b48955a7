# Sourced, not run: what scripts/check_cuda_build.sh (a dev machine, a CUDA torch, no GPU) and
# scripts/gpu_check.sh (the GPU machine) both need to configure the project against a torch of
# their own, outside the checkout's build/ and python/infinipipe/.

# torch_cuda_toolkit PYTHON: when PYTHON's torch is a CUDA build, finds the CUDA toolkit and sets
# NVCC, CUDA_ROOT, NVCC_VERSION, TORCH_CUDA and TORCH_CMAKE_ARGS (the arguments that point
# torch's CMake config at that toolkit), exporting CUDA_HOME and CUDACXX; a CPU build of torch
# leaves TORCH_CMAKE_ARGS empty. Returns 1, saying why, when a CUDA torch finds no nvcc.
torch_cuda_toolkit() {
  local py=$1
  TORCH_CMAKE_ARGS=()
  TORCH_CUDA=$("$py" -c 'import torch; print(torch.version.cuda or "")')
  NVCC="" CUDA_ROOT="" NVCC_VERSION=""
  [ -n "$TORCH_CUDA" ] || return 0
  # nvcc: CUDA_HOME wins when set, then PATH, then the usual install
  if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC="$CUDA_HOME/bin/nvcc"
  elif command -v nvcc >/dev/null; then NVCC=$(command -v nvcc)
  elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc
  else
    echo "no CUDA toolkit (nvcc) found for torch's CUDA $TORCH_CUDA: set CUDA_HOME or put nvcc" \
      "on PATH" >&2
    return 1
  fi
  # The toolkit's root as nvcc itself knows it (an nvcc on PATH may be a wrapper script
  # elsewhere): torch's CMake config finds the toolkit with its own FindCUDA, starting from the
  # nvcc on PATH, so /usr/local/bin/nvcc would make it look under /usr/local.
  CUDA_ROOT=$("$NVCC" --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  CUDA_ROOT=$(realpath "${CUDA_ROOT:-$(dirname "$(dirname "$(realpath "$NVCC")")")}")
  NVCC="$CUDA_ROOT/bin/nvcc"
  NVCC_VERSION=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  if [ "$NVCC_VERSION" != "$TORCH_CUDA" ]; then
    echo "warning: nvcc $NVCC_VERSION, torch built with CUDA $TORCH_CUDA" >&2
  fi
  export CUDA_HOME="$CUDA_ROOT" CUDACXX="$NVCC"
  TORCH_CMAKE_ARGS=(-DCUDAToolkit_ROOT="$CUDA_ROOT" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT"
                    -DCMAKE_CUDA_COMPILER="$NVCC")
  # A toolkit without NVRTC (a compiler-only install) gets the one torch's wheel depends on.
  if ! ls "$CUDA_ROOT"/lib*/libnvrtc.so* >/dev/null 2>&1; then
    local nvrtc
    nvrtc=$("$py" -c 'import glob, os, nvidia
print(next(iter(sorted(p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")) if "builtins" not in p and ".alt." not in p)), ""))' 2>/dev/null || true)
    if [ -n "$nvrtc" ]; then TORCH_CMAKE_ARGS+=(-DCUDA_nvrtc_LIBRARY="$nvrtc"); fi
  fi
}

# copy_python_package SOURCE_REPO DEST: a copy of python/infinipipe's Python files at
# DEST/infinipipe, without any built module, for a build to write its own _C beside (through
# INFINIPIPE_PYTHON_MODULE_DIR) while the checkout's module stays as it is.
copy_python_package() {
  rm -rf "$2/infinipipe"
  mkdir -p "$2"
  cp -r "$1/python/infinipipe" "$2/infinipipe"
  find "$2/infinipipe" \( -name '_C*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
}
