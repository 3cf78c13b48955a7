"""The simulator validation's part of docs/benchmarks.md: the profile a run planned with, every
case predicted against measured, the errors per method and the step error's parts, computed
from the validation's JSON (benchmarks/experiments/validate_simulator.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

from lib.markdown import table_head
from lib.results import load
from lib.validation import errors, per_method, shared_rows

METHOD_NAMES = {
    "epp": "EPP",
    "seq1f1b": "Seq1F1B",
    "batch": "batch-level 1F1B",
    "chunkflow": "ChunkFlow",
}


def pct(x: float) -> str:
    """A relative error as a signed percentage."""
    return f"{100 * x:+.1f}%"


def case_lengths(r: dict) -> str:
    """A validation case's length mix, as the table gives it."""
    c, lengths = r["case"], r["lengths"]
    if c["distribution"] == "heavy":
        cut = sum(n for n in lengths if n >= c["context"]) / sum(lengths)
        return (
            f"heavy x{c['batch']} seed {c['seed']} ({sum(lengths)} tokens, longest "
            f"{max(lengths)}, {100 * cut:.0f}% in cut sequences)"
        )
    return (
        f"{c['distribution']} x{c['batch']} <= {c['context']} "
        f"({sum(lengths)} tokens, longest {max(lengths)})"
    )


def medians_text(per: dict) -> str:
    """Per method, its median step error and its busy time's against CPU time (per_method)."""

    def listed(key):
        return ", ".join(
            f"{METHOD_NAMES.get(m, m)} {'n/a' if e.get(key) is None else pct(e[key])}"
            for m, e in per.items()
        )

    return (
        f"median step error {listed('median_step_error')}; busy against CPU time "
        f"{listed('median_busy_cpu_error')}"
    )


def busy_cpu_errors(val: dict) -> list[float]:
    """|error| of every stage's busy time against its thread CPU time, over the cases."""
    return [abs(b) for r in val["cases"] for b in errors(r)["busy_cpu"]]


def busy_cpu_note(val: dict) -> str:
    """What the step-time error leaves out on a shared machine, when the run measured CPU time."""
    cpu = busy_cpu_errors(val)
    if not cpu:
        return ""
    return (
        f" The stages' busy time against their thread CPU time: median |error| "
        f"{100 * statistics.median(cpu):.1f}% (max {100 * max(cpu):.1f}%); the step's wall-clock "
        "error also holds the load of other work sharing the machine's cores."
    )


def gaps(table: dict, key: str) -> list[tuple[str, float]]:
    """Per baseline, how far its median (key) is from EPP's, in points."""
    return [
        (m, 100 * abs(table[m][key] - table["epp"][key]))
        for m in table
        if m != "epp" and table[m].get(key) is not None
    ]


def gaps_text(per: dict, before: dict, label: str) -> str:
    """EPP's median step error against each baseline's, with issue 12's target (2 points)."""
    step_gaps = gaps(per, "median_step_error")
    worst = max(g for _, g in step_gaps)
    text = (
        "EPP's median step error against each baseline's: "
        + ", ".join(f"{METHOD_NAMES.get(m, m)} {g:.1f} pp" for m, g in step_gaps)
        + f" apart (issue 12's target: at most 2 pp; "
        f"{'met' if worst <= 2 else '**not met**'}); of the busy time against its CPU "
        "time: " + ", ".join(f"{g:.1f} pp" for _, g in gaps(per, "median_busy_cpu_error"))
    )
    if before:
        text += (
            f"; with {label}, on the same measured plans: step "
            + ", ".join(f"{g:.1f}" for _, g in gaps(before, "median_step_error"))
            + " pp, busy CPU time "
            + ", ".join(f"{g:.1f}" for _, g in gaps(before, "median_busy_cpu_error"))
            + " pp"
        )
    return text + "."


def paired_text(paired: dict) -> str:
    """EPP's step error minus each baseline's on the same steps (lib/validation.py, paired)."""
    return (
        "EPP's step error minus the baseline's on the same step, median over the steps (and over "
        "the steps and rounds, each pair measured in the same round): "
        + ", ".join(
            f"{METHOD_NAMES.get(m, m)} {100 * e['median_step_gap']:+.1f} pp "
            f"({100 * e['median_round_gap']:+.1f} pp)"
            for m, e in paired.items()
        )
        + "."
    )


def case_table(val: dict) -> list[str]:
    """Every case of a validation run, predicted against measured."""
    out = table_head(
        "#",
        "lengths",
        "method",
        "budget",
        "plan",
        "predicted step (s)",
        "measured step (s)",
        "step error",
        "activation peak error per stage",
        "busy error per stage",
        "busy error per stage, CPU time",
    )
    for i, r in enumerate(val["cases"]):
        c = r["case"]
        e = errors(r)
        budget = "none" if c["budget_mib"] is None else f"{c['budget_mib']:g} MiB"
        out.append(
            f"| {i} | {case_lengths(r)} | {c['method']} | "
            f"{budget} | {r['setting']}; {r['chunks']} chunks, {r['waves']} waves, "
            f"{r['recomputed_layer_chunks']} recomputed layer-chunks | "
            f"{r['predicted_step_s']:.2f} | {statistics.median(r['measured_step_s']):.2f} | "
            f"{pct(e['step'])} | "
            f"{', '.join(pct(m) for m in e['memory'])} | {', '.join(pct(b) for b in e['busy'])} | "
            f"{', '.join(pct(b) for b in e['busy_cpu']) or 'n/a'} |"
        )
    return out + [""]


def validation_section(val: dict | None, cases: bool = False) -> list[str]:
    """The errors per method of a validation run (validation.json), and with `cases` every case
    predicted against measured."""
    if val is None:
        return ["No validation results.\n"]
    out = []
    if cases:
        out += case_table(val)
    out += [
        f"Step time: median |error| **{100 * val['median_abs_step_error']:.1f}%** (max "
        f"{100 * val['max_abs_step_error']:.1f}%) over {len(val['cases'])} cases. Activation "
        f"memory: median |error| **{100 * val['median_abs_memory_error']:.1f}%** (max "
        f"{100 * val['max_abs_memory_error']:.1f}%) over every stage of every case. Error = "
        "predicted / measured - 1." + busy_cpu_note(val),
        "",
    ]
    per = val.get("per_method")
    if per:
        before = val.get("per_method_compare") or {}
        label = val.get("compare_label", "fit without a3")  # runs before the label existed
        out += table_head(
            "method",
            "cases",
            "median step error",
            "median absolute step error",
            "median busy error, CPU time",
            "median step error on the heavy steps",
            "median busy error, CPU time, on the heavy steps",
            "median forward error, CPU time",
            "median backward error, CPU time",
            f"median step error, {label}",
            f"median busy error, CPU time, {label}",
        )
        heavy, heavy_cpu = {}, {}
        for r in val["cases"]:
            if r["case"]["distribution"] == "heavy":
                heavy.setdefault(r["case"]["method"], []).append(errors(r)["step"])
                heavy_cpu.setdefault(r["case"]["method"], []).extend(errors(r)["busy_cpu"])

        def maybe(x):
            return "n/a" if x is None else pct(x)

        for m, e in per.items():
            h = heavy.get(m)
            b = before.get(m, {})
            out.append(
                f"| {METHOD_NAMES.get(m, m)} | {e['cases']} | {pct(e['median_step_error'])} | "
                f"{100 * e['median_abs_step_error']:.1f}% | "
                f"{maybe(e.get('median_busy_cpu_error'))} | "
                f"{'n/a' if not h else pct(statistics.median(h))} | "
                f"{'n/a' if not heavy_cpu.get(m) else pct(statistics.median(heavy_cpu[m]))} | "
                f"{maybe(e.get('median_forward_cpu_error'))} | "
                f"{maybe(e.get('median_backward_cpu_error'))} | "
                f"{maybe(b.get('median_step_error'))} | {maybe(b.get('median_busy_cpu_error'))} |"
            )
        shared = val.get("per_method_shared")
        if shared:
            out += ["", "On the steps every method ran (the same lengths and tokens):", ""]
            out += table_head("method", "cases", "median step error", "median busy error, CPU time")
            out += [
                f"| {METHOD_NAMES.get(m, m)} | {e['cases']} | {pct(e['median_step_error'])} | "
                f"{maybe(e.get('median_busy_cpu_error'))} |"
                for m, e in shared.items()
            ]
        if "epp" in per:
            # the other cost model's gaps over the same cases as the run's own
            if shared and before:
                keys = ("predicted_step_s_compare", "predicted_busy_s_compare")
                before = per_method(shared_rows(val["cases"]), *keys)
            out += ["", gaps_text(shared or per, before, label), ""]
        if val.get("paired"):
            out += [paired_text(val["paired"]), ""]
        bubble, over = {}, {}
        for r in val["cases"]:
            m = r["case"]["method"]
            busy = statistics.mean(r["predicted_busy_s"])
            bubble.setdefault(m, []).append(1 - busy / r["predicted_step_s"])
            over.setdefault(m, []).append(
                statistics.median(r["measured_step_s"]) / r["predicted_step_s"]
            )
        flat_b = [x for m in bubble for x in bubble[m]]
        flat_o = [x for m in over for x in over[m]]
        if len(flat_b) > 2:
            out += [
                "Measured over predicted step time against the plan's predicted bubble share (1 - "
                "a stage's mean predicted busy time over the step), over the cases: correlation "
                f"{statistics.correlation(flat_b, flat_o):+.2f}; "
                + ", ".join(
                    f"{METHOD_NAMES.get(m, m)} bubbles {100 * min(bubble[m]):.0f}-"
                    f"{100 * max(bubble[m]):.0f}%, ran {min(over[m]):.2f}-{max(over[m]):.2f}x "
                    "its prediction"
                    for m in bubble
                )
                + ".",
                "",
            ]
        for i, rep in enumerate(val.get("repeats", []), 1):
            rp = rep["per_method"]
            hp = per_method([r for r in rep["cases"] if r["case"]["distribution"] == "heavy"])
            text = (
                f"Repeat {i} (the same command"
                + (" with --pause-gc" if rep["pause_gc"] and not val.get("pause_gc") else "")
                + (
                    f" with --repeats {rep['rounds']}"
                    if rep["rounds"] != rounds_of(val["cases"])
                    else ""
                )
                + f", another time, `{rep['file']}`): "
                + medians_text(rp)
                + "; on the heavy steps alone, "
                + medians_text(hp)
            )
            if rep.get("per_method_shared"):
                text += "; on the steps every method ran, " + medians_text(rep["per_method_shared"])
                text += ". " + gaps_text(rep["per_method_shared"], {}, "")[:-1]
            if rep.get("paired"):
                text += ". " + paired_text(rep["paired"])[:-1]
            out += [text + ".", ""]
    return out


def with_repeats(val: dict | None, results_dir: Path, stem: str = "validation") -> dict | None:
    """The validation with its repeats (stem_repeat_*.json, the same command run again)."""
    if val is None:
        return None
    reps = []
    for path in sorted(results_dir.glob(f"{stem}_repeat_*.json")):
        rep = load(path)
        if rep and rep.get("per_method"):
            reps.append(
                dict(
                    file=f"benchmarks/results/{path.name}",
                    per_method=rep["per_method"],
                    per_method_shared=rep.get("per_method_shared"),
                    paired=rep.get("paired"),
                    cases=rep["cases"],
                    pause_gc=rep.get("pause_gc", False),
                    rounds=rounds_of(rep["cases"]),
                )
            )
    return dict(val, repeats=reps)


def rounds_of(cases: list[dict]) -> int:
    """How many timed rounds a validation ran (--repeats): its cases' measured steps."""
    return len(cases[0]["measured_step_s"]) if cases else 0


def time_outside_section(val: dict) -> list[str]:
    """Each run's step error in parts, per method (the median over its cases of the two stages'
    mean, over the measured step): the compute the simulator over-predicts (predicted busy minus
    the executor's action wall time), the rest of the step it misses (measured step minus busy,
    minus the same predicted), and the executor's own time outside its actions and waits; each
    round against its own busy time, the median over the rounds."""

    def split(step: float, busy: list[float], c: dict) -> tuple[float, float]:
        pairs = list(zip(busy, c["predicted_busy_s"], strict=True))
        rest = (c["predicted_step_s"] - bp for _, bp in pairs)
        return (
            statistics.mean(bp - bm for bm, bp in pairs) / step,
            statistics.mean((step - bm) - r for (bm, _), r in zip(pairs, rest)) / step,
        )

    def parts(c: dict) -> tuple[float, ...]:
        if "measured_rank_busy_s" not in c:
            return split(statistics.median(c["measured_step_s"]), c["measured_busy_s"], c)
        rounds = zip(
            c["measured_step_s"],
            c["measured_rank_busy_s"],
            c["measured_actions_s"],
            c["measured_wait_s"],
            strict=True,
        )
        each = [
            (
                *split(step, busy, c),
                statistics.mean(a - b - w for a, b, w in zip(actions, busy, wait, strict=True))
                / step,
            )
            for step, busy, actions, wait in rounds
        ]
        return tuple(statistics.median(e[k] for e in each) for k in range(3))

    runs = [("run", val["cases"])] + [
        (f"repeat {i}", r["cases"]) for i, r in enumerate(val.get("repeats", []), 1)
    ]
    out = [
        "The step error in parts (each cell: compute over-predicted, the rest of the step "
        "under-predicted, the executor's time outside its actions and waits; the stages' mean, "
        "over the measured step, median over the method's cases and the rounds):",
        "",
    ]
    out += table_head("run", *(METHOD_NAMES[m] for m in METHOD_NAMES))
    for name, cases in runs:
        cells = []
        for m in METHOD_NAMES:
            got = [parts(c) for c in cases if c["case"]["method"] == m]
            width = min((len(g) for g in got), default=0)
            cells.append(
                " / ".join(f"{statistics.median(g[k] for g in got):+.1%}" for k in range(width))
                or "-"
            )
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out + [""]
