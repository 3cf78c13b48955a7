"""The plan tool's layer split: `--layers-per-stage balanced` (planner/stage_balance.h) moves layers
off the last stage when the LM head is heavy, every method runs on the chosen split, and every
JSON row names the split; a given list is reported as given; bad values exit 2.

    python3 tests/tools/plan_tool_split.py build/infinipipe-plan

Only the standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = ""
# A profiled cost model of an 8-layer model on [4, 4] (python -m infinipipe profile).
COST_FILE = os.path.join(
    os.path.dirname(__file__), "..", "..", "benchmarks", "results", "cost_cpu.json"
)
# LLaMA-3-8B: its 128K vocabulary makes the head about two layers (docs/cluster_study.md).
STEPS = ["--distribution", "wikipedia", "--batch", "16", "--context", "8192", "--steps", "2"]
STEPS += ["--model", "llama3-8b", "--stages", "4", "--checkpoint-seconds", "0"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOL, *STEPS, *args], capture_output=True, text=True, timeout=300)


def rows(*args: str) -> list[dict]:
    r = run(*args, "--json")
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


class Split(unittest.TestCase):
    def test_balanced_moves_layers_off_the_head_stage_for_every_method(self):
        got = rows("--method", "all", "--layers-per-stage", "balanced")
        splits = {tuple(r["layers_per_stage"]) for r in got}
        self.assertEqual(len(splits), 1)
        split = list(splits.pop())
        self.assertEqual(sum(split), 32)
        self.assertLess(split[-1], 8)
        self.assertEqual(
            {r["layer_split"] for r in got} - {"even"}, {r["layer_split"] for r in got}
        )
        self.assertEqual({r["method"] for r in got}, {"epp", "batch", "seq1f1b", "chunkflow"})
        first = [r for r in got if r["step"] == 0]
        self.assertTrue(all("layer_split_candidates" in r for r in first))
        self.assertFalse(any("layer_split_candidates" in r for r in got if r["step"] == 1))
        candidates = first[0]["layer_split_candidates"]
        self.assertEqual(candidates[0]["name"], "balanced")
        self.assertEqual(sum(c["chosen"] for c in candidates), 1)
        chosen = next(c for c in candidates if c["chosen"])
        self.assertEqual(chosen["layers_per_stage"], split)
        epp = [r for r in got if r["method"] == "epp"]
        self.assertAlmostEqual(
            sum(r["step_time_s"] for r in epp) / len(epp), chosen["mean_step_s"], places=9
        )
        table = run("--method", "epp", "--layers-per-stage", "balanced").stdout
        self.assertIn("layer splits weighed", table)
        self.assertIn(" ".join(map(str, split)) + ", " + chosen["name"] + ")", table)

    def test_even_and_given_splits_are_named(self):
        self.assertEqual({r["layer_split"] for r in rows("--method", "epp")}, {"even"})
        given = rows("--method", "epp", "--layers-per-stage", "9,8,8,7")
        self.assertEqual({r["layer_split"] for r in given}, {"given"})
        self.assertEqual(given[0]["layers_per_stage"], [9, 8, 8, 7])

    def test_bad_values_exit_2(self):
        for value, words in [
            ("balanced,3", ["--layers-per-stage balanced: expected", "'balanced'"]),
            ("x", ["--layers-per-stage x"]),
            ("8,8,8", ["3 stages"]),
        ]:
            with self.subTest(value=value):
                r = run("--method", "epp", "--layers-per-stage", value)
                self.assertEqual(r.returncode, 2, r.stderr)
                for w in words:
                    self.assertIn(w, r.stderr)


class CostFileSplit(unittest.TestCase):
    """A cost model file is planned only on its own layer split, as the trainer plans with it
    (cost/cost_model.h, check_cost_file_split): a [2, 6] file was planned even on 2 stages and
    a [4, 4] file on 3 stages, both files the trainer refuses."""

    def cost_file(self, split: list[int]) -> str:
        with open(COST_FILE) as f:
            cost = json.load(f)
        cost["layers_per_stage"] = split
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        path = os.path.join(directory.name, "cost.json")
        with open(path, "w") as f:
            json.dump(cost, f)
        return path

    def plan(self, path: str, *args: str) -> subprocess.CompletedProcess:
        steps = ["--distribution", "wikipedia", "--batch", "4", "--context", "512"]
        return subprocess.run(
            [TOOL, *steps, "--model", path, "--method", "epp", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def test_another_split_is_refused_naming_both(self):
        for split, args, said in [
            (
                [2, 6],
                ["--stages", "2"],
                "splits the layers as [2, 6] but --stages 2 (even) as [4, 4]",
            ),
            (
                [4, 4],
                ["--stages", "3"],
                "splits the layers as [4, 4] but --stages 3 (even) as [2, 3, 3]",
            ),
            (
                [2, 6],
                ["--stages", "2", "--layers-per-stage", "4,4"],
                "splits the layers as [2, 6] but --layers-per-stage as [4, 4]",
            ),
            (
                [4, 4],
                ["--stages", "2", "--layers-per-stage", "balanced"],
                "give --layers-per-stage 4,4",
            ),
        ]:
            with self.subTest(split=split, args=args):
                path = self.cost_file(split)
                r = self.plan(path, *args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"the cost model {path} ", r.stderr)
                self.assertIn(said, r.stderr)

    def test_the_files_own_split_is_planned(self):
        for split, args in [
            ([4, 4], ["--stages", "2"]),
            ([2, 6], ["--stages", "2", "--layers-per-stage", "2,6"]),
        ]:
            with self.subTest(split=split):
                r = self.plan(self.cost_file(split), *args, "--json")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(json.loads(r.stdout.splitlines()[0])["layers_per_stage"], split)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
