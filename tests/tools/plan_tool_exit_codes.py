"""The plan tool's exit codes and option checks: budgets and time limits that are not finite
numbers in range are errors (exit 2) naming the option and the value; a run where no requested
method is feasible exits 3 and still prints its output.

    python3 tests/tools/plan_tool_exit_codes.py build/infinipipe-plan

Only the standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

TOOL = ""
# A step small enough to plan in well under a second.
STEP = ["--distribution", "uniform", "--batch", "4", "--context", "1024", "--model", "tiny"]
STEP += ["--stages", "2"]
SMALL = [*STEP, "--checkpoint-seconds", "0"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120)


class OptionValues(unittest.TestCase):
    def test_memory_budget_must_be_finite_and_positive(self):
        for value in ["-1", "0", "-0", "nan", "inf", "-inf", "1e400"]:
            with self.subTest(value=value):
                r = run(*SMALL, "--memory-gib", value, "--method", "epp")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"--memory-gib {value}: expected a finite number of GiB", r.stderr)
                self.assertIn("more than 0", r.stderr)
                self.assertEqual(r.stdout, "", "nothing is planned after a bad option")

    def test_recompute_seconds_must_be_finite_and_not_negative(self):
        # --checkpoint-seconds, its name before the recompute planner was named for what it
        # plans, is the same option.
        for flag in ["--recompute-seconds", "--checkpoint-seconds"]:
            for value in ["-1", "nan", "inf"]:
                with self.subTest(flag=flag, value=value):
                    r = run(*STEP, flag, value, "--method", "epp")
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn(
                        f"--recompute-seconds {value}: expected a finite number", r.stderr
                    )
                    self.assertIn("0 or more", r.stderr)

    def test_a_negative_seed_is_not_wrapped(self):
        r = run(*SMALL, "--seed", "-1", "--method", "epp")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--seed -1: expected an integer from 0", r.stderr)

    def test_a_budget_in_range_plans(self):
        r = run(*SMALL, "--memory-gib", "8", "--method", "epp", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        row = json.loads(r.stdout)
        self.assertTrue(row["feasible"])
        self.assertEqual(row["budget_gib"], 8)


class Infeasible(unittest.TestCase):
    # 10 MiB per stage cannot hold even the tiny model's state.
    TOO_SMALL = [*SMALL, "--memory-gib", "0.01"]

    def test_nothing_feasible_exits_3_with_the_json_printed(self):
        r = run(*self.TOO_SMALL, "--method", "all", "--json")
        self.assertEqual(r.returncode, 3, r.stderr)
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([row["method"] for row in rows], ["epp", "batch", "seq1f1b", "chunkflow"])
        self.assertTrue(all(not row["feasible"] and row["reason"] for row in rows))
        self.assertIn("no requested method has a feasible plan", r.stderr)

    def test_nothing_feasible_exits_3_with_the_table_printed(self):
        r = run(*self.TOO_SMALL, "--method", "batch")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("infeasible: ", r.stdout)

    def test_nothing_feasible_writes_no_plan(self):
        with tempfile.TemporaryDirectory() as tmp:
            plan = pathlib.Path(tmp) / "plan.json"
            r = run(*self.TOO_SMALL, "--method", "epp", "--plan", str(plan))
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("nothing written", r.stderr)
            self.assertFalse(plan.exists())

    def test_one_feasible_method_is_success(self):
        # A budget where EPP fits: the run succeeds even if a baseline does not.
        r = run(*SMALL, "--memory-gib", "8", "--method", "all", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(any(json.loads(line)["feasible"] for line in r.stdout.splitlines()))

    def test_help_lists_the_exit_codes(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("3 when every requested method is infeasible", r.stdout)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
