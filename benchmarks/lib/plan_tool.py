"""Running build/infinipipe-plan and reading its JSON lines: what the planning experiments share
(planning_comparison, cluster_study, cpu_simulated, measured_comparison)."""

import argparse
import json
import os
import subprocess
import sys

# The headline case: Wikipedia lengths, LLaMA-13B, A800, 8 stages, 80 GiB, 96K.
HEADLINE = dict(
    distribution="wikipedia",
    batch=512,
    context=98304,
    model="llama-13b",
    hardware="a800",
    stages=8,
    memory_gib=80,
    steps=5,
    seed=0,
)
BASELINES = ["seq1f1b", "batch", "chunkflow"]
LABELS = {"epp": "EPP", "seq1f1b": "Seq1F1B", "batch": "batch-level", "chunkflow": "ChunkFlow"}


def tool_args(case, method):
    """The plan tool's arguments for a case (a dict with the keys below) and a method."""
    args = []
    for key in (
        "distribution",
        "batch",
        "context",
        "seed",
        "model",
        "hardware",
        "stages",
        "memory_gib",
        "steps",
    ):
        args += ["--" + key.replace("_", "-"), str(case[key])]
    return args + ["--method", method, "--json"]


def parser(description, smoke_help):
    """A planning experiment's command line: the plan tool (build/infinipipe-plan unless given)
    and --smoke."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("tool", nargs="?", default="build/infinipipe-plan")
    p.add_argument("--smoke", action="store_true", help=smoke_help)
    return p


def parse(p, who):
    """`p`'s arguments; exits, naming the script `who`, when the plan tool is not built."""
    args = p.parse_args()
    if not os.path.exists(args.tool):
        sys.exit(
            "%s: %s not found; build it first (ninja -C build infinipipe-plan)" % (who, args.tool)
        )
    return args


def run_tool(command):
    """The JSON rows the plan tool prints for `command`; exits with its error when it fails."""
    done = subprocess.run(command, capture_output=True, text=True)
    # Exit 3: every method infeasible, which the rows say; the studies chart that too.
    if done.returncode not in (0, 3):
        sys.exit(
            "plan tool: %s failed (%d): %s"
            % (" ".join(command), done.returncode, done.stderr.strip())
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def collect(rows, steps):
    """Per method: per-step rows for EPP, static and per-step-best baselines."""
    epp = {r["step"]: r for r in rows if r["method"] == "epp"}
    static, best = {}, {}
    for r in rows:
        if r["method"] == "epp":
            continue
        (static if r["static"] else best).setdefault(r["method"], {})[r["step"]] = r
    # With one step the tool prints the static row only: it is also the per-step best.
    for m in static:
        best.setdefault(m, static[m])
    for name, table in [("epp", {"epp": epp})] + [
        ("static " + m, {m: static.get(m, {})}) for m in BASELINES
    ]:
        for by_step in table.values():
            missing = [i for i in range(steps) if i not in by_step]
            if missing:
                sys.exit("plan tool: no %s row for steps %s" % (name, missing))
    return epp, static, best


def mean(values):
    """The mean of `values`; NaN for none."""
    return sum(values) / len(values) if values else float("nan")


def times(by_step, steps):
    """The step times of steps 0..steps-1, or None when a step is infeasible."""
    if not all(by_step[i]["feasible"] for i in range(steps)):
        return None
    return [by_step[i]["step_time_s"] for i in range(steps)]


def setting_text(row):
    """A plan row's setting as the planner writes it (the tool's `setting_text`)."""
    return row["setting_text"]
