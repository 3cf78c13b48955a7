#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzzer.cc) with clang, ASan and UBSan in build-fuzz/ (the
# planning core only, no LibTorch; INFINIPIPE_FUZZ_BUILD=DIR builds elsewhere) and runs each for
# SECONDS (default 20) over its seed corpus tests/fuzz_corpus/<target>/. Fails when any target
# crashes, leaks, hangs or trips a sanitizer; the input that did is left in <build>/findings/.
# fuzz/README.md says how to reproduce one.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#   fuzz/run.sh --build [TARGET...]     builds them only (tests/run_all.sh times the build apart)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECONDS_EACH=${1:-20}
shift || true
BUILD_ONLY=false; [ "$SECONDS_EACH" = "--build" ] && BUILD_ONLY=true
# Absolute: the plan tool's fuzzer changes its directory before libFuzzer reads the corpora.
mkdir -p "${INFINIPIPE_FUZZ_BUILD:-build-fuzz}"
OUT=$(realpath "${INFINIPIPE_FUZZ_BUILD:-build-fuzz}")

# Debian 12's clang; libFuzzer's runtime (libclang_rt.fuzzer) is in libclang-rt-14-dev.
CLANG=clang++-14
APT_PACKAGES=(clang-14 libclang-rt-14-dev ninja-build cmake pkg-config nlohmann-json3-dev
              coinor-libcbc-dev libcli11-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ ! -f "$OUT/build.ninja" ]; then
  cmake -S . -B "$OUT" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CLANG" -DINFINIPIPE_FUZZ=ON -DINFINIPIPE_BUILD_TESTS=OFF >/dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzzer.cc; do targets+=("$(basename "$f" .cc)"); done
fi
# Two jobs at most: the development machine has two cores, shared.
cmake --build "$OUT" -j 2 --target "${targets[@]}"
$BUILD_ONLY && exit 0

# A hang is an input that takes over 10 s; an allocation over 1 GiB is a finding too (a parser
# must not size anything from a number in its input alone).
FLAGS=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
       -print_final_stats=1)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$OUT/findings"
failed=()
for t in "${targets[@]}"; do
  # New inputs go to <build>/corpus: the seed corpus in tests/ stays small and reviewed.
  work=$OUT/corpus/$t
  mkdir -p "$work"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="$ROOT/fuzz/$t.dict")
  log=$OUT/$t.log
  echo "fuzz: $t for ${SECONDS_EACH} s"
  if ! "$OUT/fuzz/$t" "${FLAGS[@]}" "${dict[@]}" -artifact_prefix="$OUT/findings/$t-" \
      "$work" "$ROOT/tests/fuzz_corpus/$t" > "$log" 2>&1; then
    failed+=("$t")
    # The finding's own lines and our frames; nlohmann's template frames run to pages.
    grep -E "what\(\)|ERROR:|runtime error|fuzz property|SUMMARY|Test unit written|in infinipipe::|in LLVMFuzzerTestOneInput" \
      "$log" | cut -c1-300 | head -n 30
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | sed "s/^/  /" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $OUT/findings/, logs $OUT/<target>.log)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, no findings"
