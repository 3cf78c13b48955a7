"""EPP never loses a step: its search holds the baselines' chunkings (with its own waves and
recompute on them), so on every sampled step its predicted time is at most each baseline's
per-step best. Plans the study's cases (docs/cluster_study.md) with the plan tool and fails
naming every step where a baseline's best plan is faster.

    python3 tests/tools/epp_never_loses.py build/infinipipe-plan

CBC is off (its answer within a wall-clock limit depends on the machine's load); only the
standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import sys

from plan_rows import plan_rows

COMMON = ["--batch", "512", "--steps", "16", "--checkpoint-seconds", "0"]
# The paper-scale study's grid on the size-aware A800, with and without SP, on both corpora.
CASES = [
    ["--model", "llama-7b", "--context", "49152", "--stages", "4"],
    ["--model", "llama-13b", "--context", "98304", "--stages", "8"],
    ["--model", "llama-13b", "--context", "98304", "--stages", "4", "--sp", "8"],
    ["--model", "llama-7b", "--context", "98304", "--stages", "8", "--sp", "4"],
    ["--model", "llama-13b", "--context", "98304", "--stages", "8", "--distribution", "code"],
    [
        "--model",
        "llama-13b",
        "--context",
        "98304",
        "--stages",
        "4",
        "--sp",
        "8",
        "--distribution",
        "code",
    ],
]


def losses(tool: str, case: list[str]) -> list[str]:
    if "--distribution" not in case:
        case = [*case, "--distribution", "wikipedia"]
    epp, best = {}, {}
    for row in plan_rows(tool, [*case, *COMMON]):
        if "step_time_s" not in row:
            continue
        if row["method"] == "epp":
            epp[row["step"]] = row["step_time_s"]
        elif not row.get("static"):
            best[(row["step"], row["method"])] = (row["step_time_s"], row.get("setting_text", ""))
    found = []
    for (step, method), (seconds, setting) in sorted(best.items()):
        # A rounding's worth of slack: the same chunks simulated by two paths.
        if step in epp and epp[step] > seconds * (1 + 1e-12):
            found.append(
                f"{' '.join(case)}: step {step}: EPP {epp[step]:.6f} s, {method} per-step best "
                f"{seconds:.6f} s ({setting}), {epp[step] / seconds - 1:+.4%}"
            )
    return found


def main(tool: str) -> int:
    found = [line for case in CASES for line in losses(tool, case)]
    print("\n".join(found))
    print(
        f"{len(CASES)} cases x 16 steps: EPP slower than a baseline's per-step best on {len(found)}"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
