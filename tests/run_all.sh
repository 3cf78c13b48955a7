#!/usr/bin/env bash
# Sets everything up (setup.sh) and runs the tests, in two tiers (pytest.ini says which is which):
#
#   tests/run_all.sh          the README's test command: the C++ suites through ctest, the
#                             parsers' fuzzers briefly (beside ctest and the smoke modes), the
#                             benchmarks' smoke modes, and every Python test not marked slow, two
#                             at a time (about 10 minutes on 2 cores, the build apart)
#   tests/run_all.sh --slow   the slow tier alone, one test at a time: the examples end to end,
#                             long multi-process runs, soaks, the tests that time real runs or a
#                             lost rank's deadline, and the fuzzers for longer
#
# CI (.ci/run) runs both. Each tier prints its build time and its test time apart.
set -euo pipefail
cd "$(dirname "$0")/.."
SLOW=false; [ "${1:-}" = "--slow" ] && SLOW=true

started=$SECONDS
./setup.sh --all
fuzz/run.sh --build > /dev/null
echo "run_all: set-up and build took $((SECONDS - started)) s"
started=$SECONDS
if $SLOW; then
  fuzz/run.sh 30
  PYTHONPATH=python .venv/bin/python -m pytest -q -m slow tests/kernels tests/python tests/benchmarks
  echo "run_all: the slow tier took $((SECONDS - started)) s"
  exit 0
fi
tests/check_format.sh
# The parsers' fuzzers over their seed corpora, in build-fuzz/ (fuzz/README.md), beside ctest and
# the benchmarks' smoke modes: each fuzzer runs on one core, and the smoke runs mostly one
# process at a time. Their report follows the smoke's.
fuzz_log=$(mktemp)
fuzz/run.sh 5 > "$fuzz_log" 2>&1 &
fuzzing=$!
# A hung test fails after 300 s instead of holding CI to its limit (the slowest takes 8 s).
(cd build && ctest --output-on-failure -j2 --timeout 300)
bash benchmarks/run_all.sh --smoke
fuzzed=0; wait $fuzzing || fuzzed=$?
cat "$fuzz_log"; rm -f "$fuzz_log"
[ $fuzzed -eq 0 ] || { echo "run_all: the fuzzers failed"; exit 1; }
PYTHONPATH=python .venv/bin/python -m pytest -q -m "not slow" -n 2 --dist loadfile \
  tests/kernels tests/python tests/benchmarks
echo "run_all: the tests took $((SECONDS - started)) s"
