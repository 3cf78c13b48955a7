"""scripts/gpu_check.sh, the GPU machine's one command (docs/runtime.md, "Running the GPU
check"): its help names the steps and the device call, a step it does not have is a usage error,
and without a GPU it stops before building anything, saying so, with exit status 3 and its
summary and environment log written (the dry run with --no-gpu builds: too slow for the suite)."""

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_help_names_the_steps_and_the_device_call():
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    for word in ("--no-gpu", "--steps", "kernels_cuda", "nccl_parity", 'carry=[".gpu_deps"]'):
        assert word in proc.stdout


def test_a_step_it_does_not_have_is_a_usage_error(tmp_path):
    proc = run("--steps", "build,nope", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "no step 'nope'" in proc.stderr


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has a GPU: the script would go on to build"
)
def test_without_a_gpu_it_stops_before_building(tmp_path):
    out, build = tmp_path / "out", tmp_path / "build"
    proc = run("--python", sys.executable, "--out", str(out), "--build-dir", str(build))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "NO GPU: torch.cuda.is_available() is False" in proc.stdout
    summary = (out / "summary.txt").read_text()
    assert "NO GPU" in summary and "--no-gpu" in summary
    assert f"torch {torch.__version__}" in summary
    assert not (build / "cmake").exists() and not (build / "deps-prefix").exists()
    with tarfile.open(out / "logs.tar.gz") as logs:
        assert logs.getnames() == ["logs", "logs/env.log"]
