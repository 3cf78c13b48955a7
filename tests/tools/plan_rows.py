"""The plan tool's JSON rows for one command line, every method (`--method all --json`): what the
planner checks of tests/tools read. Only the standard library."""

from __future__ import annotations

import json
import subprocess


def plan_rows(tool: str, args: list[str]) -> list[dict]:
    out = subprocess.run(
        [tool, *args, "--method", "all", "--json"], check=True, capture_output=True, text=True
    ).stdout
    return [json.loads(line) for line in out.splitlines()]
