"""The planner's report in the plan tool's output: per method and step, the planning call's CPU
time, EPP's candidates (tried + pruned), the step time's lower bound (busiest stage's compute
without recompute) and the prediction over it, in --json ("planner") and in the table; with
--spread-head, the heads each stage runs.

    python3 tests/tools/plan_tool_report.py build/infinipipe-plan

Only the standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unittest
from pathlib import Path

TOOL = ""
STEPS = ["--distribution", "wikipedia", "--batch", "32", "--context", "16384", "--steps", "3"]
STEPS += ["--model", "tiny", "--stages", "4", "--memory-gib", "1", "--checkpoint-seconds", "0"]
FIELDS = {"cpu_ms", "candidates", "tried", "pruned", "recomputed"}
FIELDS |= {"step_time_lower_bound_s", "predicted_over_bound", "work", "budget_exhausted"}


def plan(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([TOOL, *STEPS, *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return r


def epp_runs(model: str, stages: int, memory_gib: int, batch: int, context: int):
    """run(*extra): the plan tool's EPP plan of one sampled Wikipedia step, as JSON."""
    case = ["--model", model, "--stages", str(stages), "--memory-gib", str(memory_gib)]
    case += ["--method", "epp", "--distribution", "wikipedia", "--batch", str(batch)]
    case += ["--context", str(context), "--checkpoint-seconds", "0", "--json"]
    return lambda *extra: subprocess.run([TOOL, *case, *extra], capture_output=True, text=True)


class Report(unittest.TestCase):
    def test_every_feasible_row_reports_the_planning_call(self):
        got = [json.loads(line) for line in plan("--method", "all", "--json").stdout.splitlines()]
        feasible = [row for row in got if row["feasible"]]
        self.assertGreaterEqual(len(feasible), 12)  # EPP and 3 baselines' rows on 3 steps
        bounds = {}
        for row in feasible:
            with self.subTest(method=row["method"], step=row["step"], static=row["static"]):
                r = row["planner"]
                self.assertEqual(set(r), FIELDS)
                self.assertEqual(r["candidates"], r["tried"] + r["pruned"])
                self.assertLessEqual(r["recomputed"], r["tried"])
                self.assertGreater(r["step_time_lower_bound_s"], 0)
                self.assertLessEqual(r["step_time_lower_bound_s"], row["step_time_s"] * (1 + 1e-12))
                ratio = row["step_time_s"] / r["step_time_lower_bound_s"]
                self.assertAlmostEqual(r["predicted_over_bound"], ratio, places=12)
                self.assertGreaterEqual(r["cpu_ms"], 0)
                if row["method"] == "epp":
                    self.assertGreater(r["cpu_ms"], 0)
                    self.assertGreater(r["candidates"], 1)
                    self.assertGreater(r["work"], 0)
                    self.assertFalse(r["budget_exhausted"])  # far below the default limit
                else:
                    self.assertEqual((r["candidates"], r["tried"], r["pruned"]), (1, 1, 0))
                # The bound is the step's, whatever the method.
                bounds.setdefault(row["step"], set()).add(r["step_time_lower_bound_s"])
        self.assertTrue(all(len(b) == 1 for b in bounds.values()), bounds)

    def test_a_work_limit_keeps_the_best_plan_so_far_and_says_so(self):
        def rows(*args):
            out = plan("--method", "epp", "--json", *args).stdout
            return [json.loads(line) for line in out.splitlines()]

        unlimited, limited = rows("--search-work", "0"), rows("--search-work", "1")
        self.assertTrue(all(row["feasible"] for row in limited))
        self.assertTrue(any(row["planner"]["budget_exhausted"] for row in limited))
        for a, b in zip(unlimited, limited, strict=True):
            self.assertLessEqual(b["planner"]["tried"], a["planner"]["tried"])
        bad = subprocess.run([TOOL, *STEPS, "--search-work", "-1"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--search-work", bad.stderr)

    def test_the_table_prints_it(self):
        out = plan("--method", "epp").stdout
        self.assertEqual(out.count("      planner    cpu "), 3)
        self.assertIn("predicted/bound ", out)

    def test_spread_head_names_the_heads_per_stage(self):
        # LLaMA-3-8B's 128K-vocabulary head on 4 stages: spread wherever the simulator finds it
        # faster; the bound is then the head poured over the stages, below the plain one. 120 GiB
        # so that no method recomputes, with or without the replicas' bytes.
        case = ["--model", "llama3-8b", "--stages", "4", "--memory-gib", "120", "--method", "all"]
        case += ["--distribution", "wikipedia", "--batch", "32", "--context", "32768"]
        case += ["--checkpoint-seconds", "0"]

        def rows(*args):
            r = subprocess.run([TOOL, *case, "--json", *args], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            return [json.loads(line) for line in r.stdout.splitlines()]

        plain, spread = rows(), rows("--spread-head")
        self.assertFalse(any(row.get("spread_head") for row in plain))
        self.assertTrue(any(row.get("spread_head") for row in spread))
        for a, b in zip(plain, spread, strict=True):
            with self.subTest(method=b["method"], static=b["static"]):
                # The mode keeps a head replica on every stage and all-reduces them every step,
                # spread or not: the plain plan plus that sync bounds the spread one.
                sync = max(b["gradient_sync_s_per_stage"])
                self.assertGreater(sync, 0)
                self.assertEqual(max(a["gradient_sync_s_per_stage"]), 0)
                self.assertLessEqual(b["step_time_s"], a["step_time_s"] + sync + 1e-9)
                self.assertEqual(b["recompute_s"], 0)
                if not b["spread_head"]:
                    self.assertEqual(a["hash"], b["hash"])
                    # The same plan, but every stage before the last holds a head replica: the
                    # last stage's model state over a middle one's (same layers, plus the head).
                    state = a["model_state_gib_per_rank"]
                    replica = state[3] - state[1]
                    for p in range(4):
                        extra = replica if p < 3 else 0
                        self.assertAlmostEqual(
                            b["peak_memory_gib"][p], a["peak_memory_gib"][p] + extra, places=6
                        )
                    continue
                self.assertEqual(len(b["heads_per_stage"]), 4)
                self.assertEqual(sum(b["heads_per_stage"]), b["num_chunks"])
                self.assertEqual(len(b["head_stages"]), b["num_chunks"])
                bound = b["planner"]["step_time_lower_bound_s"]
                self.assertLess(bound, a["planner"]["step_time_lower_bound_s"])
                self.assertLessEqual(bound, b["step_time_s"])
        table = subprocess.run([TOOL, *case, "--spread-head"], capture_output=True, text=True)
        self.assertIn("(spread head)", table.stdout)

    def test_ideal_even_head_is_a_what_if_with_a_lower_bound_and_no_plan_file(self):
        # The head shared evenly by the stages (CostModel::with_ideal_even_head): the same total
        # work, so the bound of a step with the head on its last stage can only fall.
        run = epp_runs("llama3-8b", 4, 80, 32, 32768)
        plain, ideal = run(), run("--ideal-even-head")
        self.assertEqual(ideal.returncode, 0, ideal.stderr)
        a, b = json.loads(plain.stdout), json.loads(ideal.stdout)
        self.assertLess(
            b["planner"]["step_time_lower_bound_s"], a["planner"]["step_time_lower_bound_s"]
        )
        self.assertLess(b["step_time_s"], a["step_time_s"])
        self.assertFalse(b["spread_head"])
        # Not runnable: no plan file; and not with the spread head, a real placement of the head.
        for extra in (["--plan", "/tmp/never_written.json"], ["--spread-head"]):
            r = run("--ideal-even-head", *extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(extra[0], r.stderr)

    def test_v_shape_is_a_what_if_beside_an_unchanged_plan(self):
        # --v-shape (planner/v_shape_plan.h): EPP's chunks on 2d stages placed in a V, reported
        # in the EPP row; the plan itself is the same as without it.
        run = epp_runs("llama-7b", 2, 160, 16, 16384)
        plain, v = run(), run("--v-shape")
        self.assertEqual(v.returncode, 0, v.stderr)
        a, b = json.loads(plain.stdout), json.loads(v.stdout)
        self.assertEqual(a["hash"], b["hash"])
        self.assertEqual(a["step_time_s"], b["step_time_s"])
        self.assertNotIn("v_shape", a)
        shape = b["v_shape"]
        self.assertTrue(shape["fits"], shape)
        self.assertGreater(shape["step_time_s"], 0)
        self.assertEqual(len(shape["layers_per_stage"]), 4)
        self.assertEqual(sum(shape["layers_per_stage"]), sum(b["layers_per_stage"]))
        self.assertEqual(len(shape["rank_peak_memory_gib"]), 2)
        self.assertTrue(all(0 < g <= 160 for g in shape["rank_peak_memory_gib"]))
        # Where the V needs recompute it does not fit, and says which rank is over.
        tight = json.loads(epp_runs("llama-7b", 2, 80, 16, 16384)("--v-shape").stdout)
        self.assertFalse(tight["v_shape"]["fits"])
        self.assertIn("rank 0 needs", tight["v_shape"]["reason"])
        table = subprocess.run(
            [TOOL, "--model", "llama-7b", "--stages", "2", "--distribution", "wikipedia"]
            + ["--batch", "16", "--context", "16384", "--steps", "2", "--v-shape"]
            + ["--checkpoint-seconds", "0", "--method", "epp"],
            capture_output=True,
            text=True,
        )
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertEqual(table.stdout.count("V shape    "), 2)
        self.assertIn("epp, V shape where faster", table.stdout)
        # One pipeline, and EPP's plans: --dp and a baseline alone are refused.
        r = run("--v-shape", "--dp", "2")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--dp", r.stderr)
        small = ["--model", "tiny", "--stages", "2", "--distribution", "uniform", "--batch", "4"]
        r = subprocess.run([TOOL, *small, "--method", "batch", "--v-shape"], capture_output=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"--method epp", r.stderr)

    def test_offload_is_a_what_if_beside_an_unchanged_plan(self):
        # --offload-from (planner/offload_plan.h): EPP's plan with more memory, fitted into the
        # budget by offloading, reported in the EPP row; the plan itself is unchanged.
        run = epp_runs("llama-7b", 4, 40, 32, 32768)
        plain, o = run(), run("--offload-from", "1000")
        self.assertEqual(o.returncode, 0, o.stderr)
        a, b = json.loads(plain.stdout), json.loads(o.stdout)
        self.assertEqual(a["hash"], b["hash"])
        self.assertEqual(a["step_time_s"], b["step_time_s"])
        self.assertNotIn("offload", a)
        off = b["offload"]
        self.assertTrue(off["fits"], off)
        self.assertGreater(off["step_time_s"], 0)
        self.assertEqual(len(off["resident"]), 4)
        self.assertTrue(any(r >= 1 for r in off["resident"]))
        self.assertTrue(all(r == -1 or r >= 1 for r in off["resident"]))
        self.assertTrue(all(0 < g <= 40 for g in off["peak_memory_gib"]))
        moved = [g for g, r in zip(off["offload_gib_each_way"], off["resident"]) if r >= 1]
        self.assertTrue(all(g > 0 for g in moved))
        # The A800's host link: two GPUs, here two stages, share each (hardware.cc).
        self.assertEqual(off["stages_per_host_link"], 2)
        self.assertEqual(off["host_link_bytes_per_s"], 26e9)
        table = subprocess.run(
            [TOOL, "--model", "llama-7b", "--stages", "4", "--memory-gib", "40"]
            + ["--distribution", "wikipedia", "--batch", "32", "--context", "32768"]
            + ["--steps", "2", "--offload-from", "1000", "--checkpoint-seconds", "0"]
            + ["--method", "epp"],
            capture_output=True,
            text=True,
        )
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertEqual(table.stdout.count("offload    "), 2)
        self.assertIn("epp, offload where faster", table.stdout)
        # One pipeline, EPP's plans, and a host link: --dp, a baseline alone and hardware
        # without a host link are refused.
        for extra, said in (
            (["--dp", "2"], "--dp"),
            (["--hardware", "cpu"], "host_link_bandwidth"),
        ):
            r = run("--offload-from", "1000", *extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(said, r.stderr)
        small = ["--model", "tiny", "--stages", "2", "--distribution", "uniform", "--batch", "4"]
        r = subprocess.run(
            [TOOL, *small, "--method", "batch", "--offload-from", "10"], capture_output=True
        )
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"--method epp", r.stderr)

    def test_lean_layer_keeps_less_and_refuses_a_measured_cost_model(self):
        # ModelShape::lean_layer: the same step with less kept per token, so a tight budget
        # recomputes less; a cost model file's bytes were measured, so the flag is refused there.
        run = epp_runs("llama-13b", 8, 40, 64, 98304)
        eager, lean = run(), run("--lean-layer")
        self.assertEqual(lean.returncode, 0, lean.stderr)
        a, b = json.loads(eager.stdout), json.loads(lean.stdout)
        self.assertGreater(a["recompute_s"], 0)  # the budget binds
        self.assertLess(b["recompute_s"], a["recompute_s"])
        self.assertLessEqual(b["step_time_s"], a["step_time_s"])
        cost = Path(__file__).resolve().parents[2] / "benchmarks/results/cost_h200_llama13b.json"
        r = subprocess.run(
            [TOOL, "--model", str(cost), "--lean-layer", "--distribution", "wikipedia"],
            capture_output=True,
            text=True,
        )
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--lean-layer", r.stderr)
        self.assertIn("profile the lean layer", r.stderr)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
