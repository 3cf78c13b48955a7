"""The plan tool's own-lengths options: --lengths FILE samples --batch lengths per step from the
file (seeded, --steps steps, truncated to --context) as --distribution does; --step-lengths FILE
is one whole step; both read plain text and JSON Lines (--lengths-field). Bad files exit 2 with
FILE:LINE in the message.

    python3 tests/tools/plan_tool_lengths.py build/infinipipe-plan

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
# Small enough to plan in well under a second.
SMALL = ["--model", "tiny", "--stages", "2", "--checkpoint-seconds", "0"]
LENGTHS = [3000, 200, 150, 90, 40, 1500, 700]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=120)


def rows(r: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines()]


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def file(self, name: str, text: str) -> str:
        path = pathlib.Path(self.dir.name) / name
        path.write_text(text)
        return str(path)


class Sampled(Files):
    def test_samples_batch_lengths_per_step_truncated_to_the_context(self):
        path = self.file("corpus.txt", "".join(f"{n}\n" for n in LENGTHS))
        plan = pathlib.Path(self.dir.name) / "plan.json"
        args = ["--lengths", path, "--batch", "6", "--context", "1024", "--steps", "3"]
        r = run(*args, *SMALL, "--method", "all", "--json", "--plan", str(plan))
        self.assertEqual(r.returncode, 0, r.stderr)
        got = rows(r)
        self.assertEqual({row["step"] for row in got}, {0, 1, 2})
        self.assertTrue(all(row["num_sequences"] == 6 for row in got))
        # Static baselines are chosen over the sampled steps, as for --distribution: a static
        # row and a per-step best row per baseline and step.
        self.assertEqual(sum(row["method"] == "batch" and row["static"] for row in got), 3)
        self.assertEqual(sum(row["method"] == "batch" and not row["static"] for row in got), 3)
        lengths = json.loads(plan.read_text())["lengths"]
        self.assertEqual(len(lengths), 6)
        self.assertTrue(set(lengths) <= {min(n, 1024) for n in LENGTHS}, lengths)

    def test_the_seed_decides_the_steps(self):
        path = self.file("corpus.txt", "".join(f"{n}\n" for n in LENGTHS))

        def tokens(seed: str) -> list[int]:
            r = run("--lengths", path, "--batch", "5", "--context", "4096", "--steps", "4",
                    "--seed", seed, *SMALL, "--method", "epp", "--json")  # fmt: skip
            self.assertEqual(r.returncode, 0, r.stderr)
            return [row["tokens"] for row in rows(r)]

        self.assertEqual(tokens("7"), tokens("7"))
        self.assertNotEqual(tokens("7"), tokens("8"))

    def test_json_lines_with_the_default_or_a_named_field(self):
        records = "".join(json.dumps({"num_tokens": n, "n": 2 * n}) + "\n" for n in LENGTHS)
        path = self.file("corpus.jsonl", records)
        common = ["--batch", "40", "--context", "100000", *SMALL, "--method", "epp", "--json"]
        plan = pathlib.Path(self.dir.name) / "plan.json"
        for field, scale in ((None, 1), ("n", 2)):
            with self.subTest(field=field):
                named = ["--lengths-field", field] if field else []
                r = run("--lengths", path, *named, *common, "--plan", str(plan))
                self.assertEqual(r.returncode, 0, r.stderr)
                lengths = json.loads(plan.read_text())["lengths"]
                self.assertTrue(set(lengths) <= {scale * n for n in LENGTHS}, lengths)


class OneStep(Files):
    def test_step_lengths_is_the_whole_file_as_one_step(self):
        path = self.file("step.txt", "# one step\n" + "".join(f"{n}\n" for n in LENGTHS))
        r = run("--step-lengths", path, *SMALL, "--method", "all", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = rows(r)
        self.assertTrue(all(row["step"] == 0 for row in got))
        self.assertTrue(all(row["num_sequences"] == len(LENGTHS) for row in got))
        self.assertTrue(all(row["tokens"] == sum(LENGTHS) for row in got))

    def test_sampling_options_with_step_lengths_are_errors(self):
        path = self.file("step.txt", "100\n")
        for option, value in (("--batch", "4"), ("--context", "64"), ("--seed", "1"),
                              ("--steps", "2")):  # fmt: skip
            with self.subTest(option=option):
                r = run("--step-lengths", path, option, value, *SMALL)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"drop {option}", r.stderr)


class BadInput(Files):
    CASES = {
        "empty.txt": ("", ": no lengths found"),
        "comments.txt": ("# nothing\n\n", ": no lengths found"),
        "word.txt": ("12\nabc\n", ":2: expected one positive integer"),
        "negative.txt": ("12\n7\n-3\n", ":3: expected one positive integer"),
        "zero.txt": ("0\n", ":1: sequence length must be positive"),
        "missing.jsonl": ('{"length": 4}\n\n{"text": "a"}\n', ':3: no field "length"'),
        "no_field.jsonl": ('{"text": "a"}\n', ":1: no length field"),
        "invalid.jsonl": ('{"length": 4}\n{"length": 4\n', ":2: not valid JSON"),
        "zero.jsonl": ('{"length": 0}\n', ':1: field "length" must be a positive'),
        "negative.jsonl": ('{"length": -3}\n', ':1: field "length" must be a positive'),
        "text.jsonl": ('{"length": "12"}\n', ':1: field "length" must be a positive integer'),
    }

    def test_bad_files_exit_2_naming_file_and_line(self):
        for name, (text, says) in self.CASES.items():
            path = self.file(name, text)
            for option in ("--lengths", "--step-lengths"):
                with self.subTest(file=name, option=option):
                    r = run(option, path, *SMALL)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn(f"infinipipe-plan: error: {path}{says}", r.stderr)
                    self.assertEqual(r.stdout, "", "nothing is planned after a bad file")

    def test_a_missing_file_is_named(self):
        missing = str(pathlib.Path(self.dir.name) / "nowhere.txt")
        r = run("--lengths", missing, *SMALL)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"cannot open lengths file '{missing}'", r.stderr)

    def test_conflicting_sources_are_errors(self):
        path = self.file("corpus.txt", "100\n")
        for args in (["--lengths", path, "--step-lengths", path],
                     ["--lengths", path, "--distribution", "uniform"],
                     ["--step-lengths", path, "--distribution", "uniform"]):  # fmt: skip
            with self.subTest(args=args):
                r = run(*args, *SMALL)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("excludes", r.stderr)
        r = run("--distribution", "uniform", "--lengths-field", "n", *SMALL)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--lengths-field", r.stderr)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
