#!/usr/bin/env python3
"""How close does EPP come to the physical limit (each step's compute spread evenly over the
stages) when the layers are split by per-stage cost, when the LM head is spread over the stages,
and when backwards are split into B and W (zero bubble), and what does that do to its speed-up
over the baselines?

Runs the built `infinipipe-plan` at LLaMA-7B, LLaMA-13B and LLaMA-3-8B, 96K context, 8 stages,
Wikipedia lengths, batch 512, 80 GiB per stage, 16 steps: every method on the even layer split
and on the split `--layers-per-stage balanced` chooses (the same split for every method); then
LLaMA-13B and LLaMA-3-8B on both with `--spread-head`, and on the even split with
`--ideal-even-head` (the ceiling of any head balancing); at LLaMA-13B each head placement again
with `--zero-bubble try`. At LLaMA-13B, where EPP's step goes
(compute, recompute, fill, drain, stalls) from each step's simulated timeline. Writes
benchmarks/results/balance_study.json; benchmarks/planning_report.py renders docs/cluster_study.md
("Balanced stages") from it. `--smoke` runs every case at batch 32 for 2 steps and renders the page
into a temporary directory.

Usage: python3 benchmarks/experiments/balance_study.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import sys
import tempfile
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import cluster_page, plan_tool, results, step_breakdown
from lib.balance_study import (
    CODE,
    IDEAL,
    MODELS,
    SPLITS,
    SPREAD,
    SPREAD_MODELS,
    TARGET,
    ZERO_BUBBLE,
    ZERO_BUBBLE_HEADS,
)
from lib.markdown import machine
from lib.plan_tool import tool_args
from lib.simulated_case import run_case

BASE = dict(distribution="wikipedia", batch=512, hardware="a800", memory_gib=80, seed=0, steps=16)
SMOKE = dict(BASE, batch=32, steps=2)


def plans():
    """(model, split name, the plan tool's extra flags) of every case."""
    out = [(m, split, extra) for m in MODELS for split, extra in SPLITS.items()]
    out += [
        (m, split + SPREAD, extra + ["--spread-head"])
        for m in SPREAD_MODELS
        for split, extra in SPLITS.items()
    ]
    out += [(m, "even" + IDEAL, ["--ideal-even-head"]) for m in SPREAD_MODELS]
    # Zero bubble tried by EPP (the baselines are planned as without), per head placement.
    flags = {"even": [], "even" + SPREAD: ["--spread-head"], "even" + IDEAL: ["--ideal-even-head"]}
    out += [
        (TARGET["model"], head + ZERO_BUBBLE, flags[head] + ["--zero-bubble", "try"])
        for head in ZERO_BUBBLE_HEADS
    ]
    # On the code lengths, the target model's splits and head placements (without zero bubble).
    code = dict(
        SPLITS, **{"even" + SPREAD: ["--spread-head"], "even" + IDEAL: ["--ideal-even-head"]}
    )
    return out + [(TARGET["model"], split + CODE, extra) for split, extra in code.items()]


def run(tool, base, stages=8, context=98304):
    """Per case its summary (simulated_case.run_case), at the target model with EPP's step
    broken down on the even split's head placements."""
    out = []
    for model, split, extra in plans():
        case = dict(base, model=model, stages=stages, context=context)
        if split.endswith(CODE):
            case["distribution"] = "code"
        result = run_case(tool, case, extra)
        if model == TARGET["model"] and split.startswith("even") and not split.endswith(CODE):
            result["epp_breakdown"] = step_breakdown.run(tool, case, extra)
        out.append(dict(case, split=split, result=result))
        print(
            "balance_study: %s, %s split: %.1f s" % (model, split, result["seconds"]),
            file=sys.stderr,
        )
    return out


def main():
    parser = plan_tool.parser(
        __doc__.splitlines()[0], "every case at batch 32, 2 steps, to a temp dir"
    )
    args = plan_tool.parse(parser, "balance_study")
    base = SMOKE if args.smoke else BASE
    started = time.monotonic()
    cases = run(args.tool, base)
    model, cores = machine()
    case = dict(base, model="MODEL", stages=8, context=98304)
    meta = dict(
        base,
        context=98304,
        stages=8,
        seconds=time.monotonic() - started,
        machine=model,
        cores=cores,
        date=datetime.date.today().isoformat(),
        tool_command=" ".join(["infinipipe-plan"] + tool_args(case, "all"))
        + " [--layers-per-stage balanced] [--spread-head | --ideal-even-head]",
    )
    data = {"meta": meta, "cases": cases}
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            page = cluster_page.render_with(Path(tmp), balance_study=data)
        print(
            "balance_study smoke: %d cases; the page renders (%d lines)"
            % (len(cases), page.count("\n"))
        )
        return
    path = results.RESULTS / "balance_study.json"
    results.write(path, data)
    print("balance_study: %d cases in %.0f s; wrote %s" % (len(cases), meta["seconds"], path))


if __name__ == "__main__":
    main()
