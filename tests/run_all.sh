#!/usr/bin/env bash
# Sets everything up (setup.sh) and runs every test: the C++ suites through ctest, the Python
# suites through pytest (multi-process runs on CPU with Gloo included); the benchmarks' smoke
# modes run in between.
set -euo pipefail
cd "$(dirname "$0")/.."
./setup.sh --all
tests/check_format.sh
# A hung test fails after 300 s instead of holding CI to its limit (the slowest takes 8 s).
(cd build && ctest --output-on-failure -j2 --timeout 300)
# The parsers' fuzzers, 10 s each over their seed corpora, in build-fuzz/ (fuzz/README.md).
fuzz/run.sh 10
.venv/bin/python benchmarks/experiments/planning_comparison.py build/infinipipe-plan --smoke > /dev/null
bash benchmarks/run_all.sh --smoke
PYTHONPATH=python .venv/bin/python -m pytest -q tests/kernels tests/python
