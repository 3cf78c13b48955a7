"""docs/planning.md's section on checkpointing, tied or untied: every program solved again on the
schedules of EPP's plans that recompute (the plan tool's `checkpoint_compare`), and simulated."""

from lib.markdown import table_head
from lib.plan_tool import setting_text


def checkpoint_section(epp_rows, first_seed):
    """Tied against untied recompute on the schedules of EPP's plans that recompute."""
    text = ["\n## Checkpointing: tied or untied\n\n"]
    text.append(
        """The paper ties the recompute of chunk k on stage p to a diagonal of the schedule
(ckpt(p, k) = C[k' + d - 1 - p]): recompute on one stage delays every later stage by as much, so
the others can recompute along the same diagonal for free; the issue asks for the golden case
"diagonal-tied checkpointing never loses to the untied greedy". The tied integer program charges
each diagonal its largest per-layer time as a delay. In the simulator a backward that has slack
after it (its stage waits for the next gradient anyway) absorbs its recompute, so that charge
can be too high, and the untied greedy, which covers each stage's memory with the chunks that
save the most bytes per second there, recomputes fewer seconds and can give the faster step;
on other schedules the tied answer is faster. So EPP does not trust either: it solves the tied
greedy for every setting it weighs (the untied greedy too when within 3%% of the best), the tied
program with CBC for the winner, and keeps what the simulator finds fastest (the plan's
`checkpoint_solver` says which). On the schedules of EPP's plans that recompute, over %d
sampled steps of the case above (seeds %d..%d), each program solved again and simulated:

"""
        % (len(epp_rows), first_seed, first_seed + len(epp_rows) - 1)
    )
    compared = [r for r in epp_rows if r.get("checkpoint_compare")]
    if not compared:
        text.append("No EPP plan in these steps recomputes.\n")
        return text
    names = ["tied cbc", "tied greedy", "untied greedy", "uniform"]
    columns = ["%s: step s (recompute s)" % n for n in names]
    text.extend(
        line + "\n" for line in table_head("seed", "EPP setting", "waves", *columns, "kept")
    )
    margins = []  # (seed, tied step / untied step - 1)
    for r in compared:
        by = {c["method"]: c for c in r["checkpoint_compare"]}
        cells = []
        for n in names:
            c = by.get(n)
            if c is None:
                cells.append("not run")  # CBC with --checkpoint-seconds 0
            elif c["feasible"]:
                cells.append("%.3f (%.2f)" % (c["step_time_s"], c["recompute_s"]))
            else:
                cells.append("infeasible")
        tied = [
            by[n]["step_time_s"]
            for n in ("tied cbc", "tied greedy")
            if by.get(n, {}).get("feasible")
        ]
        if tied and by.get("untied greedy", {}).get("feasible"):
            margins.append(
                (first_seed + r["step"], min(tied) / by["untied greedy"]["step_time_s"] - 1)
            )
        text.append(
            "| %d | %s | %d | %s | %s |\n"
            % (
                first_seed + r["step"],
                setting_text(r),
                r["num_waves"],
                " | ".join(cells),
                r["checkpoint_solver"],
            )
        )
    untied = [(s, d) for s, d in margins if d > 0]
    tied = [(s, d) for s, d in margins if d < 0]
    text.append(
        "\nThe untied greedy gave the faster step on %d of %d schedules%s; the better tied program on %d%s.\n"
        % (
            len(untied),
            len(margins),
            " (by up to %.1f%%)" % (100 * max(d for _, d in untied)) if untied else "",
            len(tied),
            " (by up to %.1f%%)" % (-100 * min(d for _, d in tied)) if tied else "",
        )
    )
    return text
