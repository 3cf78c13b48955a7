"""The plan tool's parallel layout flags: --sp (Ulysses ranks per stage), --dp (data-parallel
replicas, the batch split by predicted cost), --zero and --gpus-per-node, and the per-rank memory
and communication fields of its JSON rows.

    python3 tests/tools/plan_tool_layout.py build/infinipipe-plan

Only the standard library, so ctest runs it with any python3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import unittest

TOOL = ""
STEPS = ["--distribution", "wikipedia", "--batch", "24", "--context", "16384", "--steps", "2"]
STEPS += ["--stages", "4", "--checkpoint-seconds", "0"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=300)


def rows(*args: str) -> list[dict]:
    r = run(*STEPS, "--model", "llama-7b", "--json", *args)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


class Layout(unittest.TestCase):
    def test_sequence_parallelism_reports_alltoalls_and_memory_per_rank(self):
        plain = rows("--method", "epp")
        sp = rows("--method", "epp", "--sp", "8")
        for a, b in zip(plain, sp):
            self.assertEqual(a["layout"]["sequence"], 1)
            self.assertEqual(b["layout"], {"sequence": 8, "data": 1, "zero": 1, "gpus_per_node": 8})
            self.assertEqual(a["alltoall_s_per_stage"], [0, 0, 0, 0])
            self.assertTrue(all(s > 0 for s in b["alltoall_s_per_stage"]))
            self.assertEqual(len(b["p2p_s_per_stage"]), 4)
            self.assertEqual(b["peak_memory_gib_per_rank"], b["peak_memory_gib"])
            # An eighth of the work per rank, its GEMMs at an eighth of the rows (slower per row
            # on the A800's curve), plus all-to-alls and the SP group's gradient sync.
            sync = max(b["gradient_sync_s_per_stage"])
            self.assertGreater(sync, 0)
            self.assertEqual(a["gradient_sync_s_per_stage"], [0, 0, 0, 0])
            self.assertLess(b["step_time_s"], a["step_time_s"] / 2)
            self.assertGreater(b["step_time_s"] - sync, a["step_time_s"] / 8)
            self.assertLess(max(b["peak_memory_gib"]), max(a["peak_memory_gib"]))
            # d_s x d_r = 8 ranks share the optimizer state (ZeRO-1).
            self.assertLess(max(b["model_state_gib_per_rank"]), max(a["model_state_gib_per_rank"]))

    def test_data_replicas_split_the_batch_and_take_the_slowest(self):
        for row in rows("--method", "all", "--dp", "2"):
            with self.subTest(method=row["method"], step=row["step"], static=row["static"]):
                self.assertTrue(row["feasible"], row.get("reason"))
                replicas = row["replicas"]
                self.assertEqual(len(replicas), 2)
                self.assertEqual(sum(r["sequences"] for r in replicas), 24)
                self.assertEqual(sum(r["tokens"] for r in replicas), row["tokens"])
                self.assertEqual(row["step_time_s"], max(r["step_time_s"] for r in replicas))

    def test_zero_levels_shrink_the_model_state(self):
        state = {}
        for zero in ("0", "1", "2", "3"):
            row = rows("--method", "epp", "--sp", "2", "--dp", "2", "--zero", zero)[0]
            state[zero] = max(row["model_state_gib_per_rank"])
        self.assertGreater(state["0"], state["1"])
        self.assertGreater(state["1"], state["2"])
        self.assertGreater(state["2"], state["3"])

    def test_the_table_names_the_layout(self):
        r = run(*STEPS, "--model", "llama-7b", "--method", "epp", "--sp", "8", "--dp", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("layout d_s=8 x d_p=4 x d_r=2, ZeRO-1, 8 GPUs per node", r.stdout)
        self.assertIn("all-to-all s per stage", r.stdout)
        self.assertIn("replicas   step time s", r.stdout)

    def test_bad_layouts_are_clear_errors(self):
        cases = [
            (["--model", "llama-30b", "--sp", "8"], ["52 heads", "--sp 8"]),
            (["--model", "llama-7b", "--sp", "0"], ["--sp must be at least 1"]),
            (["--model", "llama-7b", "--zero", "4"], ["--zero must be 0, 1, 2 or 3"]),
            (["--model", "llama-7b", "--dp", "30"], ["fewer sequences than the 30 replicas"]),
            (["--model", "llama-7b", "--gpus-per-node", "0"], ["--gpus-per-node must be at least"]),
        ]
        for extra, parts in cases:
            with self.subTest(args=extra):
                r = run(*STEPS, "--method", "epp", *extra)
                self.assertEqual(r.returncode, 2, r.stdout)
                for part in parts:
                    self.assertIn(part, r.stderr)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
