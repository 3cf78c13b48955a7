"""Tied against untied checkpointing on the schedules of EPP's plans that recompute: every program
solved again and simulated (the plan tool's `checkpoint_compare`), summarised for the results
JSON (planning_comparison) and rendered as docs/planning.md's table ("Checkpointing: tied or
untied")."""

from lib.markdown import table_head

PROGRAMS = ["tied cbc", "tied greedy", "untied greedy", "uniform"]


def summarise(epp_rows, first_seed):
    """Per EPP plan that recomputes: its seed, setting, waves, each program's step and recompute
    seconds ("infeasible", or absent when not run: CBC with --checkpoint-seconds 0) and the one
    kept; and over them all, how often and by how much the untied greedy or the better tied
    program gave the faster step."""
    rows, margins = [], []  # margins: (seed, tied step / untied step - 1)
    for r in epp_rows:
        if not r.get("checkpoint_compare"):
            continue
        by = {c["method"]: c for c in r["checkpoint_compare"]}
        programs = {}
        for n in PROGRAMS:
            c = by.get(n)
            if c is not None:
                programs[n] = (
                    dict(step_s=c["step_time_s"], recompute_s=c["recompute_s"])
                    if c["feasible"]
                    else "infeasible"
                )
        tied = [
            by[n]["step_time_s"]
            for n in ("tied cbc", "tied greedy")
            if by.get(n, {}).get("feasible")
        ]
        if tied and by.get("untied greedy", {}).get("feasible"):
            margins.append(min(tied) / by["untied greedy"]["step_time_s"] - 1)
        rows.append(
            dict(
                seed=first_seed + r["step"],
                setting=r["setting_text"],
                waves=r["num_waves"],
                programs=programs,
                kept=r["checkpoint_solver"],
            )
        )
    untied = [d for d in margins if d > 0]
    tied = [-d for d in margins if d < 0]
    return dict(
        steps=len(epp_rows),
        first_seed=first_seed,
        rows=rows,
        compared=len(margins),
        untied_faster=dict(schedules=len(untied), by_up_to=max(untied) if untied else None),
        tied_faster=dict(schedules=len(tied), by_up_to=max(tied) if tied else None),
    )


def table(summary):
    """The comparison's table lines, one row per schedule."""
    if not summary["rows"]:
        return ["No EPP plan in these steps recomputes."]
    columns = ["%s: step s (recompute s)" % n for n in PROGRAMS]
    out = table_head("seed", "EPP setting", "waves", *columns, "kept")
    for r in summary["rows"]:
        cells = []
        for n in PROGRAMS:
            c = r["programs"].get(n)
            if c is None:
                cells.append("not run")
            elif c == "infeasible":
                cells.append(c)
            else:
                cells.append("%.3f (%.2f)" % (c["step_s"], c["recompute_s"]))
        out.append(
            "| %d | %s | %d | %s | %s |"
            % (r["seed"], r["setting"], r["waves"], " | ".join(cells), r["kept"])
        )
    return out


def verdict(summary):
    """How often each side gave the faster step: "the untied greedy on 2 of 9 schedules (by up to
    0.3%); the better tied program on 7 (by up to 0.7%)"."""

    def by(s):
        return " (by up to %.1f%%)" % (100 * s["by_up_to"]) if s["schedules"] else ""

    untied, tied = summary["untied_faster"], summary["tied_faster"]
    return "the untied greedy on %d of %d schedules%s; the better tied program on %d%s" % (
        untied["schedules"],
        summary["compared"],
        by(untied),
        tied["schedules"],
        by(tied),
    )
