"""No-behaviour-change check for the planner: plan steps with the plan tool and compare every
method's plan hash and predicted step time with the recorded ones (plan_fingerprints.json).

    python3 tests/tools/plan_fingerprints.py build/infinipipe-plan            # check
    python3 tests/tools/plan_fingerprints.py build/infinipipe-plan --update   # record anew

A refactor must leave the file unchanged; a change that means to alter plans records them anew
and says why in its commit. Only the standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from plan_rows import plan_rows

RECORD = pathlib.Path(__file__).with_name("plan_fingerprints.json")
PROFILED = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cost_cpu.json"

# LLaMA-13B, A800, 8 stages (the tool's defaults); batch 512 at 96K for wikipedia, smaller batches
# for the other distributions, whose long tails make that case take minutes. CBC is off: its
# answer within a wall-clock limit depends on the machine's load, so with it the same command
# can print other plans (the greedy solvers are deterministic, and the trainer plans with them).
COMMON = ["--steps", "5", "--checkpoint-seconds", "0"]
# This machine's models: the analytic CPU hardware and a profiled cost file, which no GPU
# hardware change may move.
SMALL = [
    "--distribution",
    "wikipedia",
    "--stages",
    "2",
    "--memory-gib",
    "2",
    "--batch",
    "64",
    "--context",
    "8192",
]
CASES = {
    "wikipedia": ["--distribution", "wikipedia"],
    "uniform": ["--distribution", "uniform", "--batch", "128", "--context", "32768"],
    "lognormal": ["--distribution", "lognormal", "--batch", "128", "--context", "32768"],
    "extreme": ["--distribution", "extreme", "--batch", "128", "--context", "32768"],
    "cpu": ["--model", "tiny", "--hardware", "cpu", *SMALL],
    "cpu-profiled": ["--model", str(PROFILED), *SMALL],
}


def fingerprints(tool: str, args: list[str]) -> list[str]:
    rows = []
    for row in plan_rows(tool, [*args, *COMMON]):
        kind = "epp" if row["method"] == "epp" else ("static" if row.get("static") else "per-step")
        # repr() of the float keeps every bit: byte-identical predictions, not just close ones.
        rows.append(
            f"{row['method']} {kind} step {row['step']}: "
            f"{row.get('hash', 'infeasible')} {row.get('step_time_s', 0.0)!r}"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", help="path to infinipipe-plan")
    parser.add_argument("--update", action="store_true", help="record the current plans")
    args = parser.parse_args()
    current = {name: fingerprints(args.tool, case) for name, case in CASES.items()}
    if args.update:
        RECORD.write_text(json.dumps(current, indent=1) + "\n")
        print(f"recorded {sum(map(len, current.values()))} plans in {RECORD}")
        return 0
    recorded = json.loads(RECORD.read_text())
    differences = [
        f"{name}: recorded {want!r}, now {got!r}"
        for name in CASES
        for want, got in zip(recorded[name], current[name])
        if want != got
    ]
    differences += [
        f"{name}: {len(recorded[name])} plans recorded, {len(current[name])} now"
        for name in CASES
        if len(recorded[name]) != len(current[name])
    ]
    for line in differences:
        print(line)
    print(f"{sum(map(len, current.values()))} plans compared, {len(differences)} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
