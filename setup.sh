#!/usr/bin/env bash
# Sets up everything InfiniPipe needs on a fresh Debian machine and builds what the Python
# package needs: system packages (apt), a virtualenv in .venv with the pinned torch, and the
# module infinipipe._C in the CMake build in build/. Safe to re-run: each step skips what is
# already there. `./setup.sh --all` builds every target (tests, tools, the C++ example);
# tests/run_all.sh does that.
set -euo pipefail
cd "$(dirname "$0")"

ALL=false; [ "${1:-}" = "--all" ] && ALL=true
APT_PACKAGES=(build-essential ninja-build pkg-config nlohmann-json3-dev coinor-libcbc-dev
              libcli11-dev libspdlog-dev)
# For the tests and the C++ example: GoogleTest, clang-format (tests/check_format.sh), and
# libgloo-dev, only gloo's headers, for the C++ example's ProcessGroupGloo (never linked: the
# symbols come from libtorch_cpu; docs/runtime.md, "From C++ alone").
$ALL && APT_PACKAGES+=(libgtest-dev clang-format libgloo-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
# The runtime's packages; with --all also what the tests, the format check and the benchmarks use.
requirements=(-r requirements.txt)
$ALL && requirements+=(-r requirements-dev.txt -r tests/python/requirements.txt
                       -r benchmarks/requirements.txt)
.venv/bin/pip install -q "${requirements[@]}"

if $ALL; then target=(); tests=ON; else target=(--target infinipipe_C); tests=OFF; fi
echo "setup: building ${target[1]:-everything} (build/)"
# LibTorch comes from the torch installed in .venv (never from pip's isolated build env, which
# would pull a CUDA torch); the Python module uses torch's bundled pybind11 (DEVELOPERS.md).
TORCH_PREFIX=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFINIPIPE_WITH_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DPython_EXECUTABLE="$PWD/.venv/bin/python" -DINFINIPIPE_BUILD_TESTS=$tests >/dev/null
cmake --build build "${target[@]}"
# Make `import infinipipe` work in .venv without PYTHONPATH (the package lives in python/, with
# the extension module built into it).
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/python" > "$SITE/infinipipe-dev.pth"
echo "setup: done"
