#!/usr/bin/env bash
# The GPU machine's one command (issue 37): builds infinipipe._C against that machine's torch,
# runs the GPU checks, and writes every result and log to one folder. Over 400 lines for a reason:
# the GPU machine gets one command, so its steps and the helpers they share stay in this file.
#
#   scripts/gpu_check.sh [--out DIR] [--steps a,b] [--no-gpu] [--python PY] [--build-dir DIR]
#                        [--deps DIR|none] [--jobs N] [--budget SECONDS] [--list]
#
# The device tool's call (docs/runtime.md, "Running the GPU check"), after scripts/gpu_deps.sh
# has filled .gpu_deps/ on the dev machine:
#   run(command="bash scripts/gpu_check.sh --out $OUT", carry=[".gpu_deps"], timeout_s=590)
# It returns $OUT/summary.txt (one line per step) and $OUT/logs.tar.gz (each step's log).
#
# In order: (1) the environment into env.log (OS, glibc, nvidia-smi, python, torch, CUDA, nvcc,
# compilers, which of the build's libraries the system has); (2) no GPU (torch.cuda.is_available()
# false): says so and exits 3, unless --no-gpu, a dry run that builds and runs the rest anyway;
# (3) the steps, each writing <step>.log and a line of summary.txt:
#   deps          unpacks the .debs of --deps (default .gpu_deps) into BUILD/deps-prefix, for the
#                 headers and libraries the machine lacks (nlohmann-json, CLI11, spdlog, fmt,
#                 CoinOR's CBC; pkgconf); `--deps none` uses the system's
#   build         configures (torch < 2.14: C++17; a C++ compiler that links libstdc++ shared,
#                 checked on the module) and builds the Python module alone in
#                 BUILD/cmake, writing it into BUILD/tree/python/infinipipe beside a copy of the
#                 package, the tests, examples and benchmarks (never the checkout's module)
#   import        imports the module, lists the libraries it loads, the attention kernel chosen
#   kernels_cuda  tests/kernels/test_chunk_attention_cuda.py (1 GPU)
#   one_gpu       tests/python/gpu/test_one_gpu.py and test_one_gpu_hf.py: the trainer on one GPU
#                 (the tiny LLaMA in float64, float32 and bfloat16 with float32 masters; a
#                 transformers Llama in float32 and bfloat16) against the unpipelined model;
#                 test_one_gpu_profile.py: PlanConfig(cost_model="profile") on the GPU
#   shared_gpu    tests/python/gpu/test_shared_gpu.py: 2 and 4 pipeline ranks sharing the GPU over
#                 Gloo (RuntimeConfig(share_gpus=True)) against the unpipelined model
#   step_speed    benchmarks/experiments/gpu_step_speed.py: a ~1B LLaMA's training step on packed and
#                 split 16K-token batches, the executor against the plain step; OUT/gpu_step_speed.json
#   memory        benchmarks/experiments/gpu_memory.py: 4-layer stages of LLaMA-7B and -13B shape
#                 (13B also with the lean layer),
#                 the peak of torch.cuda.max_memory_allocated against the plan's; OUT/gpu_memory.json
#   efficiency    benchmarks/experiments/gpu_efficiency.py: bf16 GEMMs by rows and causal
#                 attention by length, TFLOP/s beside the h100 curves; OUT/gpu_efficiency.json
#   host_link     benchmarks/experiments/gpu_host_link.py: pinned copies to and from host
#                 memory, GB/s each way, alone and beside GEMMs (torch alone, no module);
#                 OUT/gpu_host_link.json
#   nccl_parity   tests/python/gpu/test_nccl_parity.py (2 GPUs: skips, saying so, on fewer)
#   cost_profile  `python -m infinipipe profile --device cuda --grid gpu` of a LLaMA-7B and a
#                 LLaMA-13B layer in bfloat16: OUT/cost_profile.tar.gz holds cost_gpu_llama{7,13}b.json
#                 and their .meta.json (the device tool returns 8 files at most)
#   kernels_cpu   tests/kernels/test_chunk_attention.py with this build, on the CPU
# Tests run from BUILD/tree, so their ranks, which import the repo's python/ first, get this build.
# A step after build where no module is built yet (a fresh machine) runs deps and build first,
# unless it needs torch alone (host_link).
# A pytest step counts as run only if something passed: "ALL SKIPPED" otherwise. Exit status: 0
# when every step passed, 1 when one did not, 2 for a bad command line, 3 for no GPU. --budget
# (default 560 s) bounds the whole run: a step is cut off at it and later ones are not started,
# so the logs are packed before the device tool's limit. Adding a step: a step_NAME function,
# its name in STEPS and a line in step_info.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
STEPS=(deps build import kernels_cuda one_gpu shared_gpu step_speed memory efficiency host_link
       nccl_parity cost_profile kernels_cpu)

step_info() {  # name -> "time limit in s|what it is"
  case $1 in
    deps) echo "60|unpack the build's system packages" ;;
    build) echo "420|configure and build infinipipe._C" ;;
    import) echo "60|import the module" ;;
    kernels_cuda) echo "240|chunk attention on CUDA" ;;
    one_gpu) echo "180|the trainer on one GPU against the unpipelined model" ;;
    shared_gpu) echo "180|2 and 4 ranks sharing the GPU over Gloo against the unpipelined model" ;;
    cost_profile) echo "240|a LLaMA-7B and -13B layer profiled and fitted on the GPU" ;;
    nccl_parity) echo "300|2 ranks over NCCL against the unpipelined model" ;;
    efficiency) echo "180|GEMM and attention TFLOP/s by size against the cited curves" ;;
    host_link) echo "90|pinned copies to and from host memory, GB/s, alone and beside GEMMs" ;;
    step_speed) echo "240|a 1B LLaMA's step: the executor against the plain training step" ;;
    memory) echo "180|a stage's measured peak GPU memory against the predicted one" ;;
    kernels_cpu) echo "240|chunk attention tests on the CPU" ;;
    *) return 1 ;;
  esac
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

OUT_DIR=${OUT:-/tmp/infinipipe-gpu-check}
BUILD=/tmp/infinipipe-gpu-build
PY=python3
DEPS="$REPO/.gpu_deps"
JOBS=$(nproc)
BUDGET=560
NO_GPU=false
SELECTED=("${STEPS[@]}")
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR=$2; shift 2 ;;
    --steps) IFS=, read -r -a SELECTED <<< "$2"; shift 2 ;;
    --no-gpu) NO_GPU=true; shift ;;
    --python) PY=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --deps) DEPS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --list) for s in "${STEPS[@]}"; do printf '%-13s %s\n' "$s" "$(step_info "$s" | cut -d'|' -f2)"; done; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for s in "${SELECTED[@]}"; do
  step_info "$s" >/dev/null || { echo "gpu_check: no step '$s' (steps: ${STEPS[*]})" >&2; exit 2; }
done
OUT_DIR=$(realpath -m "$OUT_DIR")
BUILD=$(realpath -m "$BUILD")
[ "$DEPS" = none ] || DEPS=$(realpath -m "$DEPS")
case "$BUILD/" in "$REPO"/*) echo "gpu_check: --build-dir must be outside the checkout" >&2; exit 2 ;; esac
command -v "$PY" >/dev/null || { echo "gpu_check: no python '$PY'" >&2; exit 2; }
PY=$(command -v "$PY")

PREFIX="$BUILD/deps-prefix"
TREE="$BUILD/tree"
# Every step after build but host_link (torch alone) needs its module: where there is none yet
# (each device call's machine is fresh), `--steps kernels_cuda` builds first.
needs_module=false rest=()
for s in "${SELECTED[@]}"; do
  case $s in
    deps) ;;
    build) needs_module=false; break ;;
    host_link) rest+=("$s") ;;
    *) needs_module=true; rest+=("$s") ;;
  esac
done
if $needs_module && ! compgen -G "$TREE/python/infinipipe/_C*.so" >/dev/null; then
  SELECTED=(deps build "${rest[@]}")
fi
LOGS="$BUILD/logs"  # packed into OUT/logs.tar.gz after every step: a run cut off still returns them
mkdir -p "$OUT_DIR" "$LOGS"
rm -f "$LOGS"/* "$OUT_DIR/summary.txt" "$OUT_DIR/logs.tar.gz"
SUMMARY="$OUT_DIR/summary.txt"
START=$SECONDS
FAILED=0

say() { echo "gpu_check: $*"; echo "$*" >> "$SUMMARY"; }
pack() {
  tar czf "$OUT_DIR/logs.tar.gz.tmp" -C "$BUILD" logs && mv "$OUT_DIR/logs.tar.gz.tmp" "$OUT_DIR/logs.tar.gz"
}

# The C++ compiler the module is built with: one that links libstdc++ as a shared library
# (INFINIPIPE_CXX, then CXX, then c++ and g++ on PATH). On the device machine of 2026-11-29,
# CXX=/opt/gcc/bin/g++ linked its libstdc++ into the module, whose copy then met the system's,
# loaded with torch, in one process: formatting an integer into a stream crashed (the facet
# ids of one copy index the locale of the other).
shared_cxx() {
  local cxx lib
  for cxx in ${INFINIPIPE_CXX:-} ${CXX:-} c++ g++; do
    command -v "$cxx" >/dev/null || continue
    lib=$("$cxx" -print-file-name=libstdc++.so 2>/dev/null) || continue
    # without a shared libstdc++ the compiler prints the bare name back
    if [ "$lib" != libstdc++.so ] && [ -e "$lib" ]; then command -v "$cxx"; return 0; fi
  done
  return 1
}

# --- (1) the environment -----------------------------------------------------------------------
environment() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  # the device tool's copy may carry a .git older than its files: say how far they differ
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo 'unknown (no git in this copy)')" \
    "($(git -C "$REPO" status --porcelain 2>/dev/null | wc -l) paths differ from it)"
  echo "uname: $(uname -a)"
  echo "--- /etc/os-release"; cat /etc/os-release 2>&1 || true
  echo "--- glibc: $(ldd --version 2>&1 | head -1)"
  echo "cores: $(nproc)"; free -g 2>&1 | head -2 || true
  df -h /tmp 2>&1 | tail -1 || true
  echo "--- nvidia-smi"; nvidia-smi 2>&1 || echo "(nvidia-smi failed or is missing)"
  echo "--- python: $PY"
  "$PY" - <<'EOF' 2>&1 || echo "(importing torch failed)"
import os, sys, sysconfig
include = sysconfig.get_paths()["include"]  # the module's build needs Python.h (Development.Module)
have = "yes" if os.path.exists(os.path.join(include, "Python.h")) else "NO"
print(f"Python {sys.version.split()[0]} ({sys.base_prefix}), Python.h in {include}: {have}")
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
if torch.version.cuda:
    print("NCCL", ".".join(map(str, torch.cuda.nccl.version())))
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB")
print("cmake prefix:", torch.utils.cmake_prefix_path)
EOF
  echo "CC=${CC:-} CXX=${CXX:-} CXXFLAGS=${CXXFLAGS:-} LDFLAGS=${LDFLAGS:-}"
  for cxx in ${CXX:-} c++ g++; do
    command -v "$cxx" >/dev/null || continue
    echo "$cxx: libstdc++.so $("$cxx" -print-file-name=libstdc++.so), configured with:" \
      "$("$cxx" -v 2>&1 | sed -n 's/^Configured with: //p' | grep -oE -- '--(en|dis)able-(shared|static)[^ ]*' | tr '\n' ' ')"
  done
  echo "the build's C++ compiler: $(shared_cxx || echo none)"
  for tool in nvcc c++ g++ cmake ninja pkg-config dpkg-deb readelf; do
    if command -v "$tool" >/dev/null; then
      echo "$tool: $(command -v "$tool"), $("$tool" --version 2>&1 | sed -n 1p)"
    else echo "$tool: missing"; fi
  done
  "$PY" -m pip list 2>/dev/null | grep -iE '^(pytest|pytest-xdist|pybind11|numpy|transformers|nvidia-cuda-nvrtc) ' || true
  echo "--- the build's libraries, as the system has them (the deps step ships what is missing)"
  for h in nlohmann/json.hpp CLI/CLI.hpp spdlog/spdlog.h fmt/format.h coin/CbcModel.hpp; do
    if [ -e "/usr/include/$h" ]; then echo "/usr/include/$h: yes"; else echo "/usr/include/$h: no"; fi
  done
  ldconfig -p 2>/dev/null | grep -E 'lib(Cbc|CoinUtils|spdlog|fmt|lapack|blas|gfortran|bz2|z)\.so' || echo "(none of them in ldconfig's cache)"
}
environment > "$LOGS/env.log" 2>&1
say "InfiniPipe GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), steps: ${SELECTED[*]}"
grep -E '^(commit|Python|torch|cuda available|  cuda:|--- glibc|PRETTY_NAME)' "$LOGS/env.log" | sed 's/^/  /' | tee -a "$SUMMARY"
pack

# --- (2) a GPU, or --no-gpu --------------------------------------------------------------------
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if ! $NO_GPU; then
    say "NO GPU: torch.cuda.is_available() is False for $PY (env.log says why: nvidia-smi, torch's CUDA)."
    say "This check is for a GPU machine; --no-gpu builds and runs the rest anyway (a dry run)."
    exit 3
  fi
  say "no GPU, --no-gpu: a dry run (the CUDA tests skip; their skips count as nothing run)"
fi

# --- (3) the steps -------------------------------------------------------------------------------
# The prefix's libraries that the system lacks, for the loader: the build's RUNPATH finds the
# module's own, not those they load in turn (libCoinUtils's LAPACK, libspdlog's fmt). Only those
# the system lacks, so none of the system's own (zlib, libgfortran) is shadowed by an older one.
use_prefix() {
  [ -d "$PREFIX/usr" ] || return 0
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig"
  export LD_LIBRARY_PATH="$PREFIX/ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

step_deps() {
  rm -rf "$PREFIX"
  if [ "$DEPS" = none ]; then echo "--deps none: the system's packages"; return 0; fi
  mkdir -p "$PREFIX/ldpath"
  local debs=("$DEPS"/*.deb)
  [ -e "${debs[0]}" ] || { echo "no .deb in $DEPS: run scripts/gpu_deps.sh on the dev machine, carry .gpu_deps"; return 1; }
  for deb in "${debs[@]}"; do
    echo "unpacking $(basename "$deb")"
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$deb" "$PREFIX"
    else  # dpkg -x without dpkg: the ar archive's data.tar.*
      "$PY" - "$deb" "$PREFIX" <<'EOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
pos = 8  # after "!<arch>\n": 60-byte member headers, each member padded to an even size
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(data[pos + 60:pos + 60 + size])).extractall(sys.argv[2])
    pos += 60 + size + size % 2
EOF
    fi
  done
  local lib="$PREFIX/usr/lib/x86_64-linux-gnu"
  # .pc files name /usr: point them at the prefix
  sed -i "s#=/usr\\b#=$PREFIX/usr#g" "$lib"/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc 2>/dev/null || true
  # dpkg's alternatives are not run: give LAPACK and BLAS their usual names
  ln -sf lapack/liblapack.so lapack/liblapack.so.3 blas/libblas.so blas/libblas.so.3 -t "$lib"
  # absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) into the prefix
  find "$PREFIX" -type l -lname '/*' | while read -r link; do
    ln -sfn "$PREFIX$(readlink "$link")" "$link"
  done
  local cache
  cache=$(ldconfig -p 2>/dev/null || true)  # once: `ldconfig -p | grep -q` fails on SIGPIPE
  for d in "$lib" "$PREFIX/lib/x86_64-linux-gnu"; do
    for f in "$d"/*.so.*; do
      [ -e "$f" ] || continue
      local soname
      soname=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
      [ -n "$soname" ] && [ ! -e "$PREFIX/ldpath/$soname" ] || continue
      if grep -q "^[[:space:]]$soname " <<< "$cache"; then continue; fi
      ln -s "$f" "$PREFIX/ldpath/$soname"
    done
  done
  echo "loader path for what the system lacks ($PREFIX/ldpath):"; ls "$PREFIX/ldpath"
  echo "pkg-config files:"; ls "$lib/pkgconfig"
  du -sh "$PREFIX"
}

step_build() {
  use_prefix
  rm -rf "$TREE"
  mkdir -p "$TREE"
  # the tests, examples and benchmarks (later steps' profiling), beside a package copy that
  # receives this build's module
  cp -r "$REPO/tests" "$REPO/examples" "$REPO/benchmarks" "$REPO/pytest.ini" "$TREE/"
  copy_python_package "$REPO" "$TREE/python"
  torch_cuda_toolkit "$PY"
  local torch_prefix pkgconf=() std
  torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  if ! command -v pkg-config >/dev/null && [ -x "$PREFIX/usr/bin/pkgconf" ]; then
    pkgconf=(-DPKG_CONFIG_EXECUTABLE="$PREFIX/usr/bin/pkgconf")
  fi
  echo "torch: $("$PY" -c 'import torch; print(torch.__version__)'), CUDA ${TORCH_CUDA:-none}, nvcc ${NVCC_VERSION:-none}"
  local cxx
  cxx=$(shared_cxx) || { echo "no C++ compiler with a shared libstdc++ (set INFINIPIPE_CXX)"; return 1; }
  echo "C++ compiler: $cxx"
  # not the tests, tools or fuzzers: the module and what it links
  cmake -S "$REPO" -B "$BUILD/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CUDA_HOST_COMPILER="$cxx" \
    -DINFINIPIPE_WITH_TORCH=ON -DINFINIPIPE_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$PREFIX/usr" -DPython_EXECUTABLE="$PY" \
    "${TORCH_CMAKE_ARGS[@]}" "${pkgconf[@]}" \
    -DINFINIPIPE_PYTHON_MODULE_DIR="$TREE/python/infinipipe"
  echo "--- where the build's packages were found"
  grep -E '^(nlohmann_json_DIR|CLI11_DIR|spdlog_DIR|fmt_DIR|Torch_DIR|PKG_CONFIG_EXECUTABLE|CBC_INCLUDE_DIRS|CBC_LIBRARY_DIRS|pkgcfg_lib_CBC_Cbc(Solver)?)' \
    "$BUILD/cmake/CMakeCache.txt" || true
  std=$(grep -o -- '-std=[a-z+0-9]*' "$BUILD/cmake/build.ninja" | sort | uniq -c | tr '\n' ' ' || true)
  echo "C++ standards in the build: $std"
  cmake --build "$BUILD/cmake" --target infinipipe_C -j "$JOBS"
  ls -la "$TREE"/python/infinipipe/_C*.so
  # one C++ runtime per process: the module must load the system's libstdc++, not carry its own
  local so
  so=$(compgen -G "$TREE/python/infinipipe/_C*.so")
  if ! readelf -d "$so" | grep -q 'NEEDED.*libstdc++'; then
    echo "the module does not load libstdc++.so: $cxx linked the C++ runtime into it, and two"
    echo "copies of it in one process crash (set INFINIPIPE_CXX to a compiler with a shared one)"
    rm -f "$so"
    return 1
  fi
}

# runs python from the tree, with this build's package first
tree_python() { (cd "$TREE" && PYTHONPATH="$TREE/python" "$PY" "$@"); }
need_module() {
  compgen -G "$TREE/python/infinipipe/_C*.so" >/dev/null ||
    { echo "no module in $TREE: run the build step first (same --build-dir)"; return 1; }
}

step_import() {
  use_prefix
  need_module
  echo "--- the module's libraries"; ldd "$TREE"/python/infinipipe/_C*.so
  tree_python - <<'EOF'
import torch

import infinipipe._C as C

print(f"import infinipipe._C: ok ({C.__file__}), torch {torch.__version__}")
for dtype, head_dim in ((torch.bfloat16, 128), (torch.float32, 128), (torch.float64, 64)):
    kernel = C.kernels.attention_kernel("cuda", dtype, head_dim)
    print(f"chunk attention on CUDA, {dtype}, head_dim {head_dim}: {kernel}")
if torch.cuda.is_available():
    q = torch.zeros(4, 2, 128, dtype=torch.bfloat16, device="cuda")
    print(f"for a bf16 tensor on {torch.cuda.get_device_name()}: {C.kernels.attention_kernel_for(q)}")
EOF
}

pytest_step() {  # name, paths...
  local name=$1 xdist=()
  shift
  use_prefix
  need_module
  if [ "$name" = kernels_cpu ] && tree_python -c 'import xdist' 2>/dev/null; then
    xdist=(-n "$(( JOBS < 8 ? JOBS : 8 ))")
  fi
  tree_python -m pytest -rs -p no:cacheprovider "${xdist[@]}" --junitxml="$LOGS/$name.xml" "$@"
}
step_kernels_cuda() { pytest_step kernels_cuda tests/kernels/test_chunk_attention_cuda.py; }
step_one_gpu() {
  pytest_step one_gpu tests/python/gpu/test_one_gpu.py tests/python/gpu/test_one_gpu_hf.py \
    tests/python/gpu/test_one_gpu_profile.py
}
step_shared_gpu() { pytest_step shared_gpu tests/python/gpu/test_shared_gpu.py; }
step_nccl_parity() { pytest_step nccl_parity tests/python/gpu/test_nccl_parity.py; }
step_cost_profile() {  # LLaMA-7B and -13B shapes (vocab 32000), 8 even stages
  use_prefix
  need_module
  local shapes=("llama7b 4096 32 32 11008" "llama13b 5120 40 40 13824") name hidden layers heads ffn
  rm -rf "$BUILD/cost" && mkdir -p "$BUILD/cost"
  for shape in "${shapes[@]}"; do
    read -r name hidden layers heads ffn <<< "$shape"
    echo "--- $name"
    tree_python -m infinipipe profile --device cuda --dtype bfloat16 --grid gpu --no-progress \
      --vocab 32000 --hidden "$hidden" --layers "$layers" --heads "$heads" --kv-heads "$heads" \
      --ffn "$ffn" --layers-per-stage "$(yes "$((layers / 8))" | head -8 | paste -sd,)" \
      --output "$BUILD/cost/cost_gpu_$name.json"
  done
  tar czf "$OUT_DIR/cost_profile.tar.gz" -C "$BUILD" cost
}
step_kernels_cpu() { pytest_step kernels_cpu tests/kernels/test_chunk_attention.py; }
step_step_speed() {
  use_prefix
  need_module
  tree_python benchmarks/experiments/gpu_step_speed.py --out "$OUT_DIR/gpu_step_speed.json"
}
step_memory() {
  use_prefix
  need_module
  tree_python benchmarks/experiments/gpu_memory.py --out "$OUT_DIR/gpu_memory.json"
}
step_efficiency() {
  use_prefix
  need_module
  tree_python benchmarks/experiments/gpu_efficiency.py --out "$OUT_DIR/gpu_efficiency.json"
}

step_host_link() {
  "$PY" "$REPO/benchmarks/experiments/gpu_host_link.py" --out "$OUT_DIR/gpu_host_link.json"
}

source "$REPO/scripts/torch_build.sh"
for s in "${SELECTED[@]}"; do
  IFS='|' read -r limit what <<< "$(step_info "$s")"
  left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -le 5 ]; then
    say "$(printf '%-13s NOT RUN: the budget (%s s) is spent' "$s" "$BUDGET")"; FAILED=1; continue
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "gpu_check: === $s: $what (limit $limit s)"
  t0=$SECONDS
  set +e
  # exported so that the step, run in a child bash under timeout, sees the script's functions
  export -f "step_$s" pytest_step tree_python need_module use_prefix torch_cuda_toolkit copy_python_package \
    shared_cxx
  export REPO PY BUILD PREFIX TREE LOGS DEPS JOBS OUT_DIR
  timeout --kill-after=10 "$limit" bash -eo pipefail -c "step_$s" 2>&1 | tee "$LOGS/$s.log"
  rc=${PIPESTATUS[0]}
  set -e
  result=$(grep -E '^=+ .*(passed|failed|skipped|error|no tests ran).* in [0-9.]+s' "$LOGS/$s.log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//' || true)
  if [ "$rc" = 0 ] && [ -n "$result" ] && ! grep -q passed <<< "$result"; then
    status="ALL SKIPPED (nothing ran)"
  elif [ "$rc" = 0 ]; then status=ok
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="TIMED OUT at $limit s"; FAILED=1
  else status="FAILED (exit $rc)"; FAILED=1
  fi
  say "$(printf '%-13s %s, %d s%s, %s.log' "$s" "$status" $((SECONDS - t0)) "${result:+: $result}" "$s")"
  pack
  if [ "$s" = build ] && [ "$rc" != 0 ]; then
    say "the build failed: the later steps are not run (build.log)"; break
  fi
done
say "total $((SECONDS - START)) s; $([ $FAILED = 0 ] && echo 'every step passed' || echo 'NOT every step passed'); logs: logs.tar.gz"
echo "gpu_check: === summary ($SUMMARY)"
cat "$SUMMARY"  # again at the end, where the device tool's output tail shows it
exit $FAILED
