#!/usr/bin/env bash
# Reproduces every figure of docs/benchmarks.md, docs/planning.md, docs/cluster_study.md and
# docs/properties.md on this machine, in order: each experiment (benchmarks/experiments/) writes its
# results to benchmarks/results/, benchmarks/planning_report.py renders the planning pages and
# benchmarks/report.py docs/benchmarks.md from them. Run it on a quiet
# machine: the timings are wall clock. `--smoke` runs every experiment in a tiny configuration
# into a temporary directory (CI runs it through tests/run_all.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TORCHRUN=.venv/bin/torchrun
E=benchmarks/experiments
export PYTHONPATH=python

if [ "${1:-}" = "--smoke" ]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
  $PY -m infinipipe profile --grid quick --layers-per-stage 4,4 --neighbours 1 --output "$OUT/cost_cpu.json" --no-progress
  $TORCHRUN --nproc_per_node=2 $E/validate_simulator.py --smoke --stage cpp \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/validation_cpp.json"
  $TORCHRUN --nproc_per_node=2 $E/measured_comparison.py --smoke \
    --cost-model "$OUT/cost_cpu.json" --output "$OUT/measured.json"
  $PY $E/cpu_simulated.py --cost-model "$OUT/cost_cpu.json" --batch 6 --context 1024 \
    --steps 1 --budget-mib 48 --horizon-steps 2 --horizon-budgets-mib 48 --output "$OUT/timeline.png" \
    --json "$OUT/timeline_cpu.json" --horizon-json "$OUT/cpu_horizon.json"
  # The cluster studies' smoke runs and the planning pages' check are tests of their own
  # (tests/benchmarks/test_experiments.py, test_planning_pages.py), run beside the others.
  $PY $E/planning_comparison.py build/infinipipe-plan --smoke --output "$OUT/planning_comparison.json"
  $PY benchmarks/report.py --results "$OUT" --docs "$OUT/docs"
  echo "benchmarks smoke: OK"
  exit 0
fi

R=benchmarks/results
mkdir -p "$R" docs/img
$PY -m infinipipe profile --grid full --layers-per-stage 4,4 --neighbours 1 --output "$R/cost_cpu.json"
$PY -m infinipipe profile --stage cpp --grid full --layers-per-stage 4,4 --neighbours 1 --output "$R/cost_cpu_cpp.json"
# The validation, twice each (the wall clock moves): with the C++ stage, then the Python stage.
for out in validation_cpp.json validation_cpp_repeat_1.json; do
  $TORCHRUN --nproc_per_node=2 $E/validate_simulator.py --stage cpp \
    --cost-model "$R/cost_cpu_cpp.json" --output "$R/$out"
done
for out in validation.json validation_repeat_1.json; do
  $TORCHRUN --nproc_per_node=2 $E/validate_simulator.py \
    --cost-model "$R/cost_cpu.json" --output "$R/$out"
done
$TORCHRUN --nproc_per_node=2 $E/measured_comparison.py \
  --cost-model "$R/cost_cpu.json" --output "$R/measured.json"
# The packed peer with rows of the whole context (the fewest documents cut), in a run of its own.
$TORCHRUN --nproc_per_node=2 $E/measured_comparison.py --cost-model "$R/cost_cpu.json" \
  --skip-torch --packed-config interleaved_1f1b,8192,all --output "$R/measured_packed_context.json"
# The paper's layout on 4 processes: pipeline 2 x sequence 2, pipeline 2 x data 2.
$TORCHRUN --nproc_per_node=4 $E/measured_comparison.py --sequence 2 \
  --cost-model "$R/cost_cpu.json" --output "$R/measured_sp2.json"
$TORCHRUN --nproc_per_node=4 $E/measured_comparison.py --replicas 2 \
  --cost-model "$R/cost_cpu.json" --output "$R/measured_dp2.json"
# Zero bubble against torch's zero-bubble schedules: 2 stages, and 4 (the 2-stage profile refitted
# for 2 layers per stage, cost_cpu_4stages.json and cost_cpu_4stages.meta.json; the same budget
# per stage: at half of it the forced mode found no plan that fits).
$TORCHRUN --nproc_per_node=2 $E/zero_bubble_measured.py \
  --cost-model "$R/cost_cpu.json" --output "$R/zero_bubble_measured.json"
$PY -m infinipipe profile --layers-per-stage 2,2,2,2 --refit "$R/cost_cpu.meta.json" \
  --output "$R/cost_cpu_4stages.json"
$TORCHRUN --nproc_per_node=4 $E/zero_bubble_measured.py --cost-model "$R/cost_cpu_4stages.json" \
  --output "$R/zero_bubble_measured_4.json"
$PY $E/cpu_simulated.py --cost-model "$R/cost_cpu.json"
$TORCHRUN --nproc_per_node=2 $E/planning_ahead.py --steps 20 --out "$R/planning_ahead.json"
$TORCHRUN --nproc_per_node=2 $E/planning_ahead.py --steps 20 --hidden 64 --layers 2 --batch 64 \
  --context 4096 --out "$R/planning_ahead_heavy.json"
$PY $E/planning_comparison.py build/infinipipe-plan
$PY $E/planning_speed.py build/infinipipe-plan --out "$R/planning_speed.json"
$PY $E/cluster_study.py build/infinipipe-plan
$PY $E/balance_study.py build/infinipipe-plan
$PY $E/cluster_sp_study.py build/infinipipe-plan
$PY $E/flexsp_study.py build/infinipipe-plan
$PY $E/corpus_study.py build/infinipipe-plan
# Plans with the cost models profiled on a GPU (scripts/gpu_check.sh's cost_profile, committed).
$PY $E/gpu_cost_plans.py build/infinipipe-plan
$PY benchmarks/planning_report.py
$PY benchmarks/report.py
