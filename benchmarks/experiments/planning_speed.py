"""How long does EPP's search take, and what does it find, on the cases issue 12 names?

    python3 benchmarks/experiments/planning_speed.py build/infinipipe-plan [--build REV] \
        [--baseline /path/to/older/infinipipe-plan --baseline-build REV]

Writes benchmarks/results/planning_speed.json (or --out); benchmarks/planning_report.py renders
docs/planning.md's "Search speed" from it.

Each case runs the plan tool once, pinned to one core (`taskset -c 0` when available), with
`--method epp --json --checkpoint-seconds 0` (no CBC: the trainer's setting, and the only one
whose answer does not depend on the machine's load). Per step it records the planner's own
CPU time (`planner.cpu_ms`, the thread's clock), the predicted step time, the candidates, and the
tool's peak resident memory (`/usr/bin/time`'s maximum RSS, the whole process). With
`--baseline`, the same cases run with the other build too, so the two are compared step by
step: the quality check is that the chosen plans' predicted step times stay within 0.5%.

Cases (LLaMA-13B, A800, 96K context, 80 GiB, 8 stages unless said):
- every built-in distribution, batch 512, 5 steps each (20 steps in all);
- a heavy mix, batch 512, 5 steps: lengths sampled from a file where a third of the tokens are in
  sequences longer than 32K (written by this script: see heavy_lengths);
- wikipedia, batch 2048, 32 stages, 2 steps;
- one long sequence under a tight budget: 400,000 tokens, the tiny model on the CPU hardware
  model, 2 stages, 12 GiB; and 2,097,152 tokens, 8 stages, 12 GiB.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lib import results  # noqa: E402
from lib.plan_tool import parser  # noqa: E402

LLAMA = ["--model", "llama-13b", "--hardware", "a800", "--context", "98304", "--memory-gib", "80"]


def heavy_lengths(path: Path) -> float:
    """Writes a length population where a third of the tokens are in sequences over 32K: short
    documents (log-normal, median 1,000 tokens) and long ones (uniform over 32K-96K), the long
    ones 1 in 80 (seeded). Returns the share of tokens in sequences over 32K."""
    rng = random.Random(12)
    lengths = []
    for _ in range(60000):
        if rng.random() < 1 / 80:
            lengths.append(rng.randint(32769, 98304))
        else:
            lengths.append(max(16, min(32768, int(rng.lognormvariate(6.9, 1.0)))))
    path.write_text("".join(f"{n}\n" for n in lengths))
    return sum(n for n in lengths if n > 32768) / sum(lengths)


def cases(lengths_dir: Path, smoke: bool) -> list[dict]:
    steps = "1" if smoke else "5"
    out = []
    for dist in ("wikipedia", "uniform", "lognormal", "extreme"):
        out.append(
            dict(
                name=f"{dist}, batch 512, 8 stages",
                args=["--distribution", dist, "--batch", "512", "--steps", steps, "--stages", "8"]
                + LLAMA,
                quality=True,
            )
        )
    heavy = lengths_dir / "heavy_lengths.txt"
    share = heavy_lengths(heavy)
    out.append(
        dict(
            name=f"heavy mix ({share:.0%} of tokens in sequences over 32K), batch 512, 8 stages",
            args=["--lengths", str(heavy), "--batch", "512", "--steps", steps, "--stages", "8"]
            + LLAMA,
            quality=True,
        )
    )
    if smoke:
        return out
    out.append(
        dict(
            name="wikipedia, batch 2048, 32 stages",
            args=["--distribution", "wikipedia", "--batch", "2048", "--steps", "2"]
            + ["--stages", "32"]
            + LLAMA,
            quality=True,
        )
    )
    for tokens, stages in ((400000, 2), (2097152, 8)):
        one = lengths_dir / f"one_{tokens}.txt"
        one.write_text(f"{tokens}\n")
        out.append(
            dict(
                name=f"one {tokens}-token sequence, tiny, {stages} stages, 12 GiB",
                args=["--step-lengths", str(one), "--model", "tiny", "--hardware", "cpu"]
                + ["--stages", str(stages), "--memory-gib", "12"],
                quality=True,
            )
        )
    return out


def run(tool: str, case: dict) -> dict:
    prefix = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    with tempfile.NamedTemporaryFile(suffix=".time") as rss:
        cmd = ["/usr/bin/time", "-f", "%M", "-o", rss.name, *prefix, tool, *case["args"]]
        cmd += ["--method", "epp", "--json", "--checkpoint-seconds", "0"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
        peak_kib = int(Path(rss.name).read_text().split()[-1])
    steps = []
    for line in done.stdout.splitlines():
        j = json.loads(line)
        p = j.get("planner", {})
        steps.append(
            dict(
                step=j.get("step", 0),
                feasible=j.get("feasible", True),
                step_time_s=j.get("step_time_s"),
                cpu_ms=p.get("cpu_ms"),
                candidates=p.get("candidates"),
                tried=p.get("tried"),
                recomputed=p.get("recomputed"),
                work=p.get("work"),
                budget_exhausted=p.get("budget_exhausted"),
            )
        )
    return dict(peak_rss_mib=peak_kib / 1024, steps=steps)


def main() -> None:
    p = parser(__doc__.split("\n\n")[0], "one step of the batch-512 cases only (CI)")
    p.add_argument("--baseline", help="another build's plan tool to compare with, step by step")
    p.add_argument("--out", default=str(results.RESULTS / "planning_speed.json"))
    p.add_argument("--build", help="the commit the plan tool was built at (default: this HEAD)")
    p.add_argument("--baseline-build", help="the commit the --baseline tool was built at")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for case in cases(Path(tmp), args.smoke):
            row = dict(name=case["name"], new=run(args.tool, case))
            if args.baseline:
                row["baseline"] = run(args.baseline, case)
            worst = max(s["cpu_ms"] or 0 for s in row["new"]["steps"])
            line = f"{case['name']}: worst {worst:.0f} ms, RSS {row['new']['peak_rss_mib']:.0f} MiB"
            if args.baseline:
                old = max(s["cpu_ms"] or 0 for s in row["baseline"]["steps"])
                ratios = [
                    n["step_time_s"] / b["step_time_s"]
                    for n, b in zip(row["new"]["steps"], row["baseline"]["steps"], strict=True)
                    if n["step_time_s"] and b["step_time_s"]
                ]
                line += f" (baseline {old:.0f} ms, RSS {row['baseline']['peak_rss_mib']:.0f} MiB)"
                if ratios:
                    line += f"; predicted step / baseline: max {max(ratios):.4f}"
            print(line, flush=True)
            rows.append(row)
    head = ["git", "-C", str(results.ROOT), "rev-parse", "--short", "HEAD"]
    build = args.build or subprocess.run(head, capture_output=True, text=True).stdout.strip()
    meta = dict(date=datetime.now(UTC).isoformat(timespec="seconds"), build=build)
    if args.baseline:
        meta["baseline_build"] = args.baseline_build or "unknown"
    results.write(args.out, dict(meta, cases=rows))


if __name__ == "__main__":
    main()
