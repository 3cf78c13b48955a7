#!/usr/bin/env bash
# Reproduces every figure of docs/benchmarks.md on this machine, in order:
#   1. calibration: profile one layer of the tiny LLaMA (1 thread, as each pipeline rank runs,
#      beside one neighbour process doing the same work, as the other rank does)
#   2. simulator validation: real 2-rank pipelined steps against the simulator's predictions,
#      with the Python stage and with the C++ one (each profiled as itself)
#   3. measured comparison: EPP, its baselines and torch.distributed.pipelining (padded batches
#      and packed documents), side by side,
#      and MEASURED_REPEATS (default 2) repeats of it
#   4. simulated timelines of one step (EPP and Seq1F1B) of the measured case, and the measured
#      setup simulated over more steps and other budgets
#      and the same comparison under the paper's layout (pipeline 2 x sequence 2, x data 2)
#   5. the planning experiments (simulated, analytic A800 coefficients): EPP against the
#      baselines on the headline case, and the cluster-scale studies without and with sequence
#      parallelism, with balanced stages, and against FlexSP; docs/planning.md and
#      docs/cluster_study.md rendered from their results (benchmarks/planning_report.py)
#   6. docs/benchmarks.md and its plots from the JSON results
# Run it on a quiet machine: the timings are wall clock. `--smoke` runs every stage in a tiny
# configuration into a temporary directory (CI runs it through tests/run_all.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TORCHRUN=.venv/bin/torchrun
export PYTHONPATH=python

if [ "${1:-}" = "--smoke" ]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
  $PY -m infinipipe profile --grid quick --layers-per-stage 4,4 --neighbours 1 --output "$OUT/cost_cpu.json" --no-progress
  $TORCHRUN --nproc_per_node=2 benchmarks/validate_simulator.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/validation.json"
  $TORCHRUN --nproc_per_node=2 benchmarks/validate_simulator.py --smoke --stage cpp \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/validation_cpp.json"
  $TORCHRUN --nproc_per_node=2 benchmarks/measured_comparison.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/measured.json"
  $PY benchmarks/cpu_simulated.py --cost-model "$OUT/cost_cpu.json" --batch 6 --context 1024 \
    --steps 1 --budget-mib 48 --horizon-steps 2 --horizon-budgets-mib 48 --output "$OUT/timeline.png" \
    --json "$OUT/timeline_cpu.json" --horizon-json "$OUT/cpu_horizon.json"
  $PY benchmarks/experiments/cluster_study.py build/infinipipe-plan --smoke
  $PY benchmarks/planning_report.py --check  # the planning pages are their results' rendering
  $PY benchmarks/recorded_forward.py --repeats 1 > /dev/null
  $PY benchmarks/stage_alone.py --smoke > /dev/null
  $PY benchmarks/query_lengths.py --smoke > /dev/null
  $TORCHRUN --nproc_per_node=2 benchmarks/action_times.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/action_times.json" > /dev/null
  $TORCHRUN --nproc_per_node=2 benchmarks/step_replay.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/step_replay.json" > /dev/null
  $TORCHRUN --nproc_per_node=2 benchmarks/gc_pause.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/gc_pause.json" > /dev/null
  $PY benchmarks/report.py --results "$OUT" --docs "$OUT/docs"
  echo "benchmarks smoke: OK"
  exit 0
fi

R=benchmarks/results
mkdir -p "$R" docs/img
$PY -m infinipipe profile --grid full --layers-per-stage 4,4 --neighbours 1 --output "$R/cost_cpu.json"
for out in validation validation_repeat_1; do  # the same command twice: the wall clock moves
  $TORCHRUN --nproc_per_node=2 benchmarks/validate_simulator.py \
    --cost-model "$R/cost_cpu.json" --output "$R/$out.json"
done
# the same with the C++ stage, profiled as such: the Python stage's own time per call left out
$PY -m infinipipe profile --stage cpp --grid full --layers-per-stage 4,4 --neighbours 1 --output "$R/cost_cpu_cpp.json"
for out in validation_cpp validation_cpp_repeat_1; do
  $TORCHRUN --nproc_per_node=2 benchmarks/validate_simulator.py --stage cpp \
    --cost-model "$R/cost_cpu_cpp.json" --output "$R/$out.json"
done
$PY benchmarks/recorded_forward.py  # why the profiler times a layer after the one before it
$PY benchmarks/stage_alone.py  # a stage's slices outside the pipeline against the profiler
$PY benchmarks/query_lengths.py  # the fit at query lengths between the grid's, one a1 or by regime
# each method's forwards and backwards against the cost model, the profiler's grid timed beside
$TORCHRUN --nproc_per_node=2 benchmarks/action_times.py \
  --cost-model "$R/cost_cpu.json" --output "$R/action_times.json"
# the validation's steps replayed with every action's measured time: structure against action times
$TORCHRUN --nproc_per_node=2 benchmarks/step_replay.py \
  --cost-model "$R/cost_cpu.json" --output "$R/step_replay.json"
# Python's garbage collector paused while the pipeline runs against left on (docs/runtime.md)
$TORCHRUN --nproc_per_node=2 benchmarks/gc_pause.py \
  --cost-model "$R/cost_cpu.json" --output "$R/gc_pause.json"
$TORCHRUN --nproc_per_node=2 benchmarks/measured_comparison.py \
  --cost-model "$R/cost_cpu.json" --output "$R/measured.json"
# Repeats of the measured comparison with the main run's torch configuration (its tuning takes
# minutes): report.py judges each measured ratio by the median over the main run and these.
rm -f "$R"/measured_repeat_*.json
TORCH_CONFIG=$($PY -c 'import json, sys; c = json.load(open(sys.argv[1]))["torch_config"]; print(c["microbatch_size"], c["checkpoint"], sep=",")' "$R/measured.json")
PACKED_CONFIG=$($PY -c 'import json, sys; c = json.load(open(sys.argv[1]))["packed_config"]; print(c["schedule"], c["row_length"], c["checkpoint"], sep=",")' "$R/measured.json")
for i in $(seq 1 "${MEASURED_REPEATS:-2}"); do
  $TORCHRUN --nproc_per_node=2 benchmarks/measured_comparison.py --cost-model "$R/cost_cpu.json" \
    --torch-config "$TORCH_CONFIG" --packed-config "$PACKED_CONFIG" --output "$R/measured_repeat_$i.json" \
    --note "repeat $i, $(date -u '+%Y-%m-%d %H:%M UTC'): the same command with the main run's torch configurations ($TORCH_CONFIG; packed $PACKED_CONFIG)"
done
# The packed peer with rows of the whole context (the fewest documents cut) in a run of its own,
# at the configuration its tuning chose (docs/benchmarks.md, measured_packed_tuning.json).
$TORCHRUN --nproc_per_node=2 benchmarks/measured_comparison.py --cost-model "$R/cost_cpu.json" \
  --skip-torch --packed-config interleaved_1f1b,8192,all --output "$R/measured_packed_context.json" \
  --note "$(date -u '+%Y-%m-%d %H:%M UTC'): the packed peer with rows of the context only, the padded peer left out"
# The paper's layout on 4 processes: pipeline 2 x sequence 2, pipeline 2 x data 2.
$TORCHRUN --nproc_per_node=4 benchmarks/measured_comparison.py --sequence 2 \
  --cost-model "$R/cost_cpu.json" --output "$R/measured_sp2.json"
$TORCHRUN --nproc_per_node=4 benchmarks/measured_comparison.py --replicas 2 \
  --cost-model "$R/cost_cpu.json" --output "$R/measured_dp2.json"
$PY benchmarks/cpu_simulated.py --cost-model "$R/cost_cpu.json"
$PY benchmarks/experiments/planning_comparison.py build/infinipipe-plan
$PY benchmarks/experiments/cluster_study.py build/infinipipe-plan
$PY benchmarks/experiments/balance_study.py build/infinipipe-plan
$PY benchmarks/experiments/cluster_sp_study.py build/infinipipe-plan
$PY benchmarks/experiments/flexsp_study.py build/infinipipe-plan
$PY benchmarks/planning_report.py
$PY benchmarks/report.py
