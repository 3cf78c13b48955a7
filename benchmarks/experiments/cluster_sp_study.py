#!/usr/bin/env python3
"""EPP with Ulysses sequence parallelism at the paper's layout, predicted by the simulator.

32 A800s as d_s = 8 SP ranks inside a node x d_p = 4 stages across nodes, and as d_s = 4 x
d_p = 8; LLaMA-7B/13B/30B at 48K/96K/192K, Wikipedia lengths, batch 512, 80 GiB per GPU. Runs
the built `infinipipe-plan --sp D_S --stages D_P` per case and writes the section "With
sequence parallelism" of docs/cluster_study.md (between its markers; cluster_study.py keeps it)
and benchmarks/results/cluster_sp_study.json. Lengths: the Wikipedia corpus's own lengths
(../shared/data/wikipedia_lengths.txt beside the checkout) when present, else the built-in
wikipedia sampler. `--smoke` runs one small case and writes into a temporary directory only.

Usage: python benchmarks/experiments/cluster_sp_study.py [build/infinipipe-plan] [--smoke]
"""

import datetime
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The benchmarks' shared code (benchmarks/lib) is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import plan_tool, results
from lib.markdown import machine
from lib.plan_tool import LABELS, run_tool
from lib.results import ROOT

MODELS = ["llama-7b", "llama-13b", "llama-30b"]
CONTEXTS = [49152, 98304, 196608]
LAYOUTS = [(8, 4), (4, 8)]  # (d_s, d_p): 32 GPUs on 8-GPU nodes
METHODS = ["seq1f1b", "batch", "chunkflow"]
# 8 steps: all 18 cases take about two minutes on the 2-core dev machine.
STEPS = 8
CORPUS = ROOT.parent / "shared" / "data" / "wikipedia_lengths.txt"
BASE = dict(batch=512, hardware="a800", memory_gib=80, seed=0, steps=STEPS, gpus_per_node=8)
SMOKE = dict(BASE, batch=32, steps=2)
START, END = "<!-- sp-study: start -->", "<!-- sp-study: end -->"


def lengths_args():
    if CORPUS.exists():
        where = "../shared/data/wikipedia_lengths.txt"  # as the page shows it, from the checkout
        return ["--lengths", str(CORPUS)], "the Wikipedia corpus's lengths (%s)" % where
    return ["--distribution", "wikipedia"], "the built-in wikipedia sampler"


def run_case(tool, model, context, d_s, d_p, base):
    """One case's rows summarised per method; or the tool's error when the layout cannot run."""
    command = [tool] + lengths_args()[0]
    for key in ("batch", "seed", "hardware", "memory_gib", "steps", "gpus_per_node"):
        command += ["--" + key.replace("_", "-"), str(base[key])]
    command += ["--model", model, "--context", str(context), "--stages", str(d_p)]
    command += ["--sp", str(d_s), "--method", "all", "--json"]
    done = subprocess.run(command, capture_output=True, text=True)
    case = dict(model=model, context=context, sp=d_s, stages=d_p, command=" ".join(command[1:]))
    if done.returncode == 2:
        case["error"] = done.stderr.strip().removeprefix("infinipipe-plan: error: ")
        return case
    rows = run_tool(command)
    steps = base["steps"]
    case["methods"] = {}
    picks = [("epp", lambda r: r["method"] == "epp")]
    for m in METHODS:
        picks.append(("static " + m, lambda r, m=m: r["method"] == m and r["static"]))
        picks.append(("best " + m, lambda r, m=m: r["method"] == m and not r["static"]))
    for name, pick in picks:
        chosen = [r for r in rows if pick(r)]
        if steps == 1 and name.startswith("best "):  # one step: static is the per-step best
            chosen = [r for r in rows if r["method"] == name.split()[1]]
        case["methods"][name] = summarise(chosen, steps)
    return case


def summarise(rows, steps):
    if len(rows) != steps or not all(r["feasible"] for r in rows):
        bad = [r for r in rows if not r["feasible"]]
        return {"feasible": False, "reason": bad[0]["reason"] if bad else "missing rows"}
    mean = plan_tool.mean
    return {
        "feasible": True,
        "step_time_s": mean([r["step_time_s"] for r in rows]),
        "bubble": mean([r["bubble_fraction"] for r in rows]),
        "recompute_s": mean([r["recompute_s"] for r in rows]),
        # one rank's all-to-all seconds per step on its busiest stage
        "alltoall_s": mean([max(r["alltoall_s_per_stage"]) for r in rows]),
        "peak_gib": max(max(r["peak_memory_gib_per_rank"]) for r in rows),
        "model_state_gib": max(max(r["model_state_gib_per_rank"]) for r in rows),
        "settings": sorted({r["setting_text"] for r in rows}),
    }


def name(case):
    return "%s, %dK, d_s=%d x d_p=%d" % (
        case["model"].replace("llama-", "LLaMA-").upper().replace("LLAMA", "LLaMA"),
        case["context"] // 1024,
        case["sp"],
        case["stages"],
    )


def cell(m):
    if not m["feasible"]:
        return "infeasible"
    return "%.2f s" % m["step_time_s"]


def section(cases, meta):
    lines = [
        START,
        "\n## With sequence parallelism (d_s x d_p = 32 GPUs)\n\n",
        """The paper's layout (issue 11): every pipeline stage is a group of d_s Ulysses
sequence-parallel ranks, SP innermost, so with d_s = 8 a stage is one 8-GPU node and the stages
talk over InfiniBand. The cost model (docs/planning.md, "Parallel layout") divides each chunk's
compute and activations by d_s, adds 4 all-to-alls per layer forward and 4 backward over the
SP group's link (NVLink inside a node), sends each rank's share between stages over the
inter-node link when stages sit on different nodes, and shards the optimizer state over the
d_s ranks of a stage (ZeRO-1, d_r = 1). Times and memory are one rank's. Simulated, not
measured.

Settings: %s, batch %d, %s, %g GiB per GPU, %d sampled steps per case (seeds %d..%d), 8 GPUs
per node. Speed-up = baseline mean step time / EPP mean step time. "a2a" is one rank's
all-to-all seconds per step on its busiest stage (part of the step time); peak is per rank,
model state included, the largest over stages and steps.

"""
        % (
            meta["lengths"],
            meta["case"]["batch"],
            meta["case"]["hardware"],
            meta["case"]["memory_gib"],
            meta["case"]["steps"],
            meta["case"]["seed"],
            meta["case"]["seed"] + meta["case"]["steps"] - 1,
        ),
        "| case | EPP | Seq1F1B+SP static | per-step best | batch+SP static | per-step best "
        "| ChunkFlow+SP static | x Seq1F1B static | x batch static |\n",
        "|---|---|---|---|---|---|---|---|---|\n",
    ]
    for c in cases:
        if "error" in c:
            lines.append("| %s | not runnable: %s |||||||\n" % (name(c), short_error(c["error"])))
            continue
        m = c["methods"]
        e = m["epp"]

        def ratio(base):
            b = m[base]
            if not e["feasible"] or not b["feasible"]:
                return "-"
            return "%.3fx" % (b["step_time_s"] / e["step_time_s"])

        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n"
            % (
                name(c),
                cell(e),
                cell(m["static seq1f1b"]),
                cell(m["best seq1f1b"]),
                cell(m["static batch"]),
                cell(m["best batch"]),
                cell(m["static chunkflow"]),
                ratio("static seq1f1b"),
                ratio("static batch"),
            )
        )
    lines += [
        "\nPer method: bubble (mean over stages and steps), recompute (seconds per step, summed "
        "over stages), a2a and peak memory per rank.\n\n",
        "| case | method | step | bubble | recompute | a2a | peak GiB | model state GiB | "
        "setting(s) |\n",
        "|---|---|---|---|---|---|---|---|---|\n",
    ]
    for c in cases:
        if "error" in c:
            continue
        for key in ["epp", "static seq1f1b", "static batch", "static chunkflow"]:
            m = c["methods"][key]
            label = LABELS.get(key.split()[-1], key) + ("" if key == "epp" else " (static)")
            if not m["feasible"]:
                lines.append("| %s | %s | infeasible: %s ||||||\n" % (name(c), label, m["reason"]))
                continue
            lines.append(
                "| %s | %s | %.2f s | %.1f%% | %.2f s | %.2f s | %.1f | %.1f | %s |\n"
                % (
                    name(c),
                    label,
                    m["step_time_s"],
                    100 * m["bubble"],
                    m["recompute_s"],
                    m["alltoall_s"],
                    m["peak_gib"],
                    m["model_state_gib"],
                    "; ".join(m["settings"][:2]) + (" ..." if len(m["settings"]) > 2 else ""),
                )
            )
    lines += [
        "\n",
        meta["analysis"],
        "\nReproduce: `nice -n 19 .venv/bin/python benchmarks/experiments/cluster_sp_study.py "
        "build/infinipipe-plan`, which runs per case\n\n```\n%s\n```\n\n" % meta["command"],
        "Machine: %s. Date: %s. The study took %.0f s.\n"
        % (meta["machine"], meta["date"], meta["seconds"]),
        END + "\n",
    ]
    return "".join(lines)


def short_error(text):
    # "parallel layout: sequence parallelism over d_s = 8 ranks needs d_s to divide the
    # attention heads, but model 'llama-30b' has 52 heads; ..." -> the reason, no advice.
    return re.sub(r"; choose .*", "", text).removeprefix("parallel layout: ")


def analysis(cases):
    """The numbers the text below the tables quotes, computed, not typed."""
    out = []
    feasible = []
    for c in cases:
        if "error" in c:
            continue
        if c["methods"]["epp"]["feasible"]:
            feasible.append(name(c))
    out.append(
        "EPP with SP is feasible in %d of %d runnable cases.\n"
        % (len(feasible), sum(1 for c in cases if "error" not in c))
    )
    target = [
        c
        for c in cases
        if c.get("model") == "llama-13b"
        and c["context"] == 98304
        and c["sp"] == 8
        and "error" not in c
    ]
    if target:
        m = target[0]["methods"]
        e, s = m["epp"], m["static seq1f1b"]
        if e["feasible"] and s["feasible"]:
            out.append(
                "Target (LLaMA-13B, 96K, d_s = 8 x d_p = 4): EPP %.2f s against static Seq1F1B "
                "+ SP %.2f s, %.3fx (target 1.3x).\n"
                % (e["step_time_s"], s["step_time_s"], s["step_time_s"] / e["step_time_s"])
            )
    same = [
        c["model"] + " d_s=%d" % c["sp"]
        for c in cases
        for d in cases
        if "error" not in c
        and "error" not in d
        and (c["model"], c["sp"], c["context"], d["context"])
        == (d["model"], d["sp"], 98304, 196608)
        and c["methods"] == d["methods"]
    ]
    if CORPUS.exists() and same:
        lengths = [int(x) for x in CORPUS.read_text().split()]
        over = sum(1 for n in lengths if n > 98304)
        out.append(
            "\nThe 96K and 192K rows are the same plans in %d of %d runnable pairs: %d of the "
            "corpus's %d lengths (%.3f%%) exceed 96K, so the %d x 512 sampled sequences of a case "
            "almost surely hold none, and truncating to 192K instead of 96K changes nothing.\n"
            % (
                len(same),
                sum(1 for c in cases if "error" not in c and c["context"] == 98304),
                over,
                len(lengths),
                100.0 * over / len(lengths),
                STEPS,
            )
        )
    return "".join(out)


NOTES_TEMPLATE = """
**Why EPP is barely ahead of Seq1F1B + SP here, and short of the 1.3x target.** With d_s ranks
per stage each rank holds 1/d_s of every chunk's activations and K/V buffers, so memory stops
binding: at 13B, 96K, d_s = 8 static Seq1F1B + SP fits with no recompute (peak per rank well
under 80 GiB), and so does EPP. What EPP saves over a baseline in this simulator is recompute
(where memory binds) and bubble; with neither left, the two plan nearly the same chunks (EPP
often picks Seq1F1B's chunking itself, its search includes the baselines' chunkings) and differ
by well under 1%%. The only case where memory still binds, LLaMA-30B at 96K on d_s = 4 x d_p = 8,
shows the mechanism: static Seq1F1B + SP recomputes %(s_rec).1f s per step (its one setting
must fit the worst step), EPP %(e_rec).1f s, and EPP is %(x30).3fx faster. Two more reasons the 1.3x of the
paper cannot appear: (1) the analytic coefficients (src/cost/hardware.cc) give every GEMM and
attention block the same efficiency whatever its size, so Seq1F1B's many small slices are not
penalised (on GPUs they are, and with d_s = 8 each rank's share of a slice is 8x smaller
still); profiled coefficients would show that; (2) the Wikipedia lengths are short (see the
note above): long sequences, where EPP's elastic slicing matters most, are rare. Batch-level
+ SP, which packs whole sequences, is %(b_lo).2f-%(b_hi).2fx slower, from bubbles and recompute. No constant was
changed to move these numbers.

**Feasibility.** LLaMA-30B cannot run at d_s = 8 at all: Ulysses gives each SP rank whole
heads and 8 does not divide its 52 heads (this project does not pad or replicate heads), so the
cost model refuses the layout; at d_s = 4 x d_p = 8 (4 divides 52) it is feasible at every
context, as are 13B at 96K on both layouts and every 7B and 13B case. Without SP (the tables
above) 30B does not fit 80 GiB per stage.

**What the all-to-all costs.** Per rank and step it is %(a_lo).1f-%(a_hi).1f%% of EPP's step time (a2a above): with
d_s = 8 inside a node it runs over NVLink at 200 GB/s per direction. Not modelled: overlap of the
all-to-all with compute (none assumed), the gradient all-reduce across the SP group once per
step, ZeRO's collectives.
"""


def notes(cases):
    """NOTES_TEMPLATE with its numbers taken from the cases."""
    ok = [c for c in cases if "error" not in c and c["methods"]["epp"]["feasible"]]
    values = {}
    ratios = [
        c["methods"]["static batch"]["step_time_s"] / c["methods"]["epp"]["step_time_s"]
        for c in ok
        if c["methods"]["static batch"]["feasible"]
    ]
    values["b_lo"], values["b_hi"] = min(ratios), max(ratios)
    shares = [
        100 * c["methods"]["epp"]["alltoall_s"] / c["methods"]["epp"]["step_time_s"] for c in ok
    ]
    values["a_lo"], values["a_hi"] = min(shares), max(shares)
    big = [c for c in ok if c["model"] == "llama-30b" and c["sp"] == 4 and c["context"] == 98304]
    if not big or not ratios:  # the smoke run: the notes are about the full grid
        return ""
    m = big[0]["methods"]
    values["s_rec"] = m["static seq1f1b"]["recompute_s"]
    values["e_rec"] = m["epp"]["recompute_s"]
    values["x30"] = m["static seq1f1b"]["step_time_s"] / m["epp"]["step_time_s"]
    return NOTES_TEMPLATE % values


def write_section(text, md_path):
    md = md_path.read_text() if md_path.exists() else ""
    if START in md and END in md:
        md = md[: md.index(START)] + text + md[md.index(END) + len(END) + 1 :]
    else:
        md = md.rstrip("\n") + "\n\n" + text
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(md)


def main():
    p = plan_tool.parser(__doc__.splitlines()[0], "one small case, written to a temporary dir")
    args = plan_tool.parse(p, "cluster_sp_study")
    base = SMOKE if args.smoke else BASE
    grid = (
        [("llama-7b", 49152, 8, 4)]
        if args.smoke
        else [(m, c, s, d) for (s, d) in LAYOUTS for m in MODELS for c in CONTEXTS]
    )
    started = time.time()
    cases = []
    for model, context, d_s, d_p in grid:
        t = time.time()
        cases.append(run_case(args.tool, model, context, d_s, d_p, base))
        print("%-40s %.1f s" % (name(cases[-1]), time.time() - t), flush=True)
    meta = {
        "case": base,
        "lengths": lengths_args()[1],
        "machine": "%s, %d cores" % machine(),
        "date": datetime.date.today().isoformat(),
        "seconds": time.time() - started,
        "command": "infinipipe-plan %s --batch %d --seed 0 --hardware a800 --memory-gib 80 "
        "--steps %d --gpus-per-node 8 --model MODEL --context CONTEXT --stages D_P --sp D_S "
        "--method all --json"
        % (
            lengths_args()[0][0]
            + " "
            + (
                lengths_args()[0][1]
                if not CORPUS.exists()
                else "../shared/data/wikipedia_lengths.txt"
            ),
            base["batch"],
            base["steps"],
        ),
    }
    meta["analysis"] = analysis(cases) + notes(cases)
    out = ROOT if not args.smoke else tempfile.mkdtemp(prefix="cluster_sp_study_")
    out = Path(out)
    write_section(section(cases, meta), out / "docs" / "cluster_study.md")
    results.write(
        out / "benchmarks" / "results" / "cluster_sp_study.json", {"meta": meta, "cases": cases}
    )
    print("wrote", out / "docs" / "cluster_study.md", out / "benchmarks" / "results")


if __name__ == "__main__":
    main()
