#!/usr/bin/env bash
# Downloads the Debian 12 (bookworm, amd64) packages that scripts/gpu_check.sh unpacks on the GPU
# machine into .gpu_deps/ (ignored, never committed: the device tool carries it, `carry`
# [".gpu_deps"]; docs/runtime.md, "Running the GPU check").
#
#   scripts/gpu_deps.sh [DIR]     (default: .gpu_deps in the checkout; replaces its .debs)
#
# Why these: the GPU machine has torch, CMake, ninja and nvcc but no network and no apt, and
# whether it has the headers and libraries the build finds outside torch is not recorded.
# Building only the Python module (INFINIPIPE_BUILD_TESTS=OFF) needs nlohmann-json, CLI11 (found
# unconditionally by CMakeLists.txt, header-only), spdlog with its fmt, and CBC, found through
# pkg-config, with the rest of CoinOR. Each library's runtime package comes too, since a -dev
# package's libX.so is a link to it; and what CoinUtils links (-llapack -lblas -lbz2 -lz, which
# its .pc file names), with LAPACK's and BLAS's Fortran runtime. pkgconf in case the machine has
# no pkg-config. GoogleTest is left out: the GPU check builds no test suite.
#
# Each package is pinned to the version this was made with (bookworm's, 2026-11-29); one the
# mirror no longer has is fetched at its current version, with a warning. About 17 MiB.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(realpath -m "${1:-$REPO/.gpu_deps}")
PINNED=(
  nlohmann-json3-dev=3.11.2-2
  libcli11-dev=2.1.2+ds-1
  libspdlog-dev=1:1.10.0+ds-0.4 libspdlog1.10=1:1.10.0+ds-0.4
  libfmt-dev=9.1.0+ds1-2 libfmt9=9.1.0+ds1-2
  coinor-libcbc-dev=2.10.8+ds1-1 coinor-libcbc3=2.10.8+ds1-1
  coinor-libcgl-dev=0.60.3+repack1-4 coinor-libcgl1=0.60.3+repack1-4
  coinor-libclp-dev=1.17.6-3 coinor-libclp1=1.17.6-3
  coinor-libosi-dev=0.108.6+repack1-2 coinor-libosi1v5=0.108.6+repack1-2
  coinor-libcoinutils-dev=2.11.4+repack1-2 coinor-libcoinutils3v5=2.11.4+repack1-2
  liblapack-dev=3.11.0-2 liblapack3=3.11.0-2 libblas-dev=3.11.0-2 libblas3=3.11.0-2
  libgfortran5=12.2.0-14+deb12u1 libquadmath0=12.2.0-14+deb12u1
  libbz2-dev=1.0.8-5+b1 libbz2-1.0=1.0.8-5+b1
  zlib1g-dev=1:1.2.13.dfsg-1 zlib1g=1:1.2.13.dfsg-1
  pkgconf=1.8.1-1 pkgconf-bin=1.8.1-1 libpkgconf3=1.8.1-1
)

mkdir -p "$DIR"
rm -f "$DIR"/*.deb
cd "$DIR"
for pin in "${PINNED[@]}"; do
  if ! apt-get download -q "$pin" >/dev/null 2>&1; then
    echo "gpu_deps: warning: $pin is not on the mirror; taking ${pin%%=*} as apt has it" >&2
    apt-get download -q "${pin%%=*}" >/dev/null
  fi
done
echo "gpu_deps: $(find . -name '*.deb' | wc -l) packages, $(du -sh . | cut -f1) in $DIR"
