"""docs/cluster_study.md and docs/img/cluster_speedup.png from the results of cluster_study,
balance_study, cluster_sp_study, flexsp_study and corpus_study, through
benchmarks/templates/cluster_study.md."""

import tempfile
from pathlib import Path

from lib import balance_study, corpus_tables, results, sp_study_tables
from lib.cluster_tables import (
    case_name,
    detail_table,
    infeasible_text,
    longer_than,
    repeat_spread,
    repeated_cases,
    speedup_table,
    spread_text,
)
from lib.cluster_target import TARGET, target_lines
from lib.page_template import case_values, lines, render
from lib.plan_tool import BASELINES, LABELS
from lib.simulated_case import traces_text

PAPER_OVER_SEQ1F1B = (1.27, 1.40)  # the paper's measured speed-ups over Seq1F1B (on GPUs)
STUDIES = ["cluster_study", "balance_study", "cluster_sp_study", "flexsp_study", "corpus_study"]


def detail_sections(cases):
    """Per stage count, EPP and the static baselines of every case. A case whose sampled steps
    are those of a shorter context is left out (its speed-ups are in the first table)."""
    out = []
    repeated = repeated_cases(cases)
    shown = [c for i, c in enumerate(cases) if i not in repeated]
    for stages in sorted({c["stages"] for c in cases}):
        out += ["", "## %d stages" % stages, ""]
        out += detail_table([c for c in shown if c["stages"] == stages])
    if repeated:
        out += [
            "",
            "Left out, with the sampled steps of a shorter context (the speed-up table has them): "
            "%s." % "; ".join(case_name(cases[i]) for i in sorted(repeated)),
        ]
    return out


def study_values(data):
    cases, meta = data["cases"], data["meta"]
    case, t = meta["case"], meta["timeline"]
    tc = t["case"]
    return dict(
        case_values(case),
        longer_than=longer_than(cases),
        longest_context="%dK" % (max(c["context"] for c in cases) // 1024),
        repeat_spread=spread_text(repeat_spread(cases)),
        speedup_table=lines(speedup_table(cases)),
        detail_tables=lines(detail_sections(cases)),
        target_speedup="%.1fx" % TARGET["speedup"],
        target_context="%dK" % (TARGET["context"] // 1024),
        target_stages=TARGET["stages"],
        target_lines="".join(target_lines(cases)).rstrip("\n"),
        paper_over_seq1f1b="%.2f-%.2fx" % PAPER_OVER_SEQ1F1B,
        t_seed=tc["seed"],
        t_model=tc["model"],
        t_hardware=tc["hardware"],
        t_stages=tc["stages"],
        t_batch=tc["batch"],
        t_context="%dK" % (tc["context"] // 1024),
        t_steps=tc["steps"],
        t_traces=traces_text(t["traces"], "%.3f"),
        t_commands="\n".join(t["commands"]),
        tool_command=meta["tool_command"],
        machine="%s, %s cores" % (meta["machine"], meta["cores"]),
        date=meta["date"],
        seconds="%.0f" % meta["seconds"],
    )


def render_page(studies):
    """docs/cluster_study.md's text from the studies' results (name -> JSON)."""
    values = study_values(studies["cluster_study"])
    values.update(balance_study.values(studies["balance_study"]))
    values.update(sp_study_tables.sp_values(studies["cluster_sp_study"]))
    values.update(sp_study_tables.flexsp_values(studies["flexsp_study"]))
    values.update(corpus_tables.corpus_values(studies["corpus_study"]))
    return render("cluster_study.md", values)


def load(res):
    """The studies' results from the folder `res`."""
    return {name: results.load(Path(res) / (name + ".json")) for name in STUDIES}


def render_with(docs, **studies):
    """The page and its plot under `docs`, from the committed results with `studies` (name ->
    JSON, a smoke run's) in place of theirs; the page's text."""
    data = dict(load(results.RESULTS), **studies)
    text = render_page(data)
    (docs / "img").mkdir(parents=True, exist_ok=True)
    (docs / "cluster_study.md").write_text(text)
    plot_speedups(data["cluster_study"]["cases"], docs / "img" / "cluster_speedup.png")
    return text


def finish(name, data, smoke):
    """A study's end: its results JSON under benchmarks/results/, or with `smoke` the page rendered
    with them into a new temporary folder; the path written."""
    if smoke:
        docs = Path(tempfile.mkdtemp(prefix=name + "_"))
        render_with(docs, **{name: data})
        return docs / "cluster_study.md"
    path = results.RESULTS / (name + ".json")
    results.write(path, data)
    return path


def vertical_note(ax, x, text, color, **style):
    """A note standing up from the bottom of the bars' axis at `x`."""
    ax.text(x, 0.05, text, rotation=90, ha="center", va="bottom", fontsize=7, color=color, **style)


def plot_speedups(cases, path):
    """Bars of EPP's speed-up over each static baseline, one panel per stage count."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines
    import matplotlib.pyplot as plt

    stage_counts = sorted({c["stages"] for c in cases})
    ratios = [
        s["speedup"]
        for c in cases
        for s in c["result"].get("methods", {}).values()
        if "speedup" in s
    ]
    top = 1.25 * max(ratios + [TARGET["speedup"]])  # room for the value labels and the legend
    fig, axes = plt.subplots(
        len(stage_counts), 1, figsize=(11, 3.4 * len(stage_counts)), squeeze=False
    )
    width = 0.8 / len(BASELINES)
    for ax, stages in zip(axes[:, 0], stage_counts):
        group = [c for c in cases if c["stages"] == stages]
        for i, c in enumerate(group):
            if not c["result"].get("methods", {}).get("epp", {}).get("feasible"):
                vertical_note(
                    ax,
                    i,
                    "EPP " + infeasible_text(c, c["result"].get("methods")).replace(" steps", ""),
                    "grey",
                    bbox=dict(facecolor="white", edgecolor="none", pad=1),
                )
        for j, m in enumerate(BASELINES):
            for i, c in enumerate(group):
                x = i + (j - (len(BASELINES) - 1) / 2) * width
                s = c["result"].get("methods", {}).get(m + " static", {})
                if "speedup" in s:
                    ax.bar(
                        x, s["speedup"], width, color="C%d" % j, label=LABELS[m] if i == 0 else None
                    )
                    ax.text(
                        x, s["speedup"], "%.2f" % s["speedup"], ha="center", va="bottom", fontsize=6
                    )
                elif c["result"]["methods"]["epp"]["feasible"]:  # say so instead of drawing nothing
                    ax.bar(x, 0, width, color="C%d" % j, label=LABELS[m] if i == 0 else None)
                    vertical_note(ax, x, "infeasible", "C%d" % j)
        ax.axhline(1.0, color="black", linewidth=0.6)
        if stages == TARGET["stages"]:
            ax.axhline(
                TARGET["speedup"],
                color="grey",
                linestyle="--",
                linewidth=0.8,
                label="target %.1fx at %dK" % (TARGET["speedup"], TARGET["context"] // 1024),
            )
        ax.set_ylim(0, top)
        ax.set_xlim(-0.5, len(group) - 0.5)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([case_name(c) for c in group], fontsize=8)
        ax.set_ylabel("EPP speed-up over static")
        ax.set_title("%d stages (simulated, analytic A800)" % stages, loc="left", fontsize=10)
        ax.legend(fontsize=7, ncol=4, loc="upper left")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)
