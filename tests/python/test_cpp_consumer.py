"""An out-of-tree C++ project on the installed tree (examples/cpp_consumer/): `cmake --install
build` into a fresh prefix, find_package(infinipipe CONFIG REQUIRED) from that project, and its
two programs run: plan_step (infinipipe::planner) plans the plan tool's step, the same plan to the
hash, and stage_step (infinipipe::runtime) trains one step of a C++ LLaMA stage."""

import json
import math
import re
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
TOOL = BUILD / "infinipipe-plan"

pytestmark = [
    pytest.mark.slow,  # compiles a LibTorch program (about 40 s of CPU)
    pytest.mark.skipif(not TOOL.exists(), reason="build/ is not built (./setup.sh --all)"),
]


def run(*command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, "%s failed:\n%s\n%s" % (command, done.stdout, done.stderr)
    return done.stdout


def test_an_installed_tree_plans_and_trains_from_another_project(tmp_path):
    prefix, consumer = tmp_path / "prefix", tmp_path / "consumer"
    run("cmake", "--install", str(BUILD), "--prefix", str(prefix))
    assert (prefix / "lib" / "cmake" / "infinipipe" / "infinipipeConfig.cmake").exists()
    run(
        "cmake",
        "-S",
        str(ROOT / "examples" / "cpp_consumer"),
        "-B",
        str(consumer),
        "-G",
        "Ninja",
        "-DCMAKE_PREFIX_PATH=%s;%s" % (prefix, torch.utils.cmake_prefix_path),
    )
    run("cmake", "--build", str(consumer))

    planned = run(str(consumer / "plan_step"))
    found = re.search(r"step ([\d.]+) s .* plan ([0-9a-f]{16})", planned)
    assert found, planned
    row = json.loads(
        run(
            str(TOOL),
            *"--distribution wikipedia --batch 512 --context 98304 --seed 0 --model llama-13b "
            "--hardware a800 --stages 8 --memory-gib 80 --steps 1 --method epp --json".split(),
        ).splitlines()[0]
    )
    assert found.group(2) == row["hash"]
    assert float(found.group(1)) == pytest.approx(row["step_time_s"], rel=1e-3)

    trained = run(str(consumer / "stage_step"))
    found = re.search(r"loss ([\d.]+) .* gradient norm ([\d.]+)", trained)
    assert found, trained
    loss, norm = float(found.group(1)), float(found.group(2))
    assert abs(loss - math.log(512)) < 0.5  # random weights: about uniform over the vocabulary
    assert math.isfinite(norm) and norm > 0
