"""The benchmark scripts' smoke paths: cluster_study --smoke, balance_study --smoke, cluster_sp_study
--smoke, flexsp_study --smoke, corpus_study --smoke (each renders docs/cluster_study.md into a temporary directory with its
own results), gpu_cost_plans --smoke, plot_timeline on a small trace, and measured_comparison --smoke under a parallel layout (4
processes: pipeline 2 x SP 2 and pipeline 2 x data 2) with its docs subsection."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "build" / "infinipipe-plan"
BENCHMARKS = ROOT / "benchmarks"
EXPERIMENTS = BENCHMARKS / "experiments"
STAGES = 4

pytestmark = pytest.mark.skipif(
    not TOOL.exists(), reason="%s is not built (ninja -C build infinipipe-plan)" % TOOL
)


@pytest.mark.parametrize("study", ["cluster_study", "balance_study"])
def test_cluster_study_smoke(study):
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / (study + ".py")), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(study + " smoke:"), done.stdout
    assert len(done.stdout.strip().splitlines()) == 1


def rendered_page(study):
    """`study --smoke` run from benchmarks/: the page it rendered into a temporary folder."""
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / (study + ".py")), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCHMARKS,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1].split()[1]).read_text()


def test_cluster_sp_study_smoke():
    page = rendered_page("cluster_sp_study")
    assert "## With sequence parallelism" in page
    assert "| LLaMA-7B, 48K, d_s=8 x d_p=4 |" in page


def test_flexsp_study_smoke():
    pytest.importorskip("pulp")
    page = rendered_page("flexsp_study")
    assert "## Against FlexSP (simulated)" in page
    assert "| LLaMA-7B, 48K |" in page


def test_corpus_study_smoke_renders_both_distributions_side_by_side():
    page = rendered_page("corpus_study")
    section = page[page.index("## Code lengths") :]
    assert "| SP 8 x 4 | 7B, 48K |" in section
    assert "wikipedia: EPP (s)" in section and "code: EPP (s)" in section
    assert "per distribution: wikipedia: Seq1F1B median" in section


def smoke_result(script: str, tmp_path: Path, *args: str) -> dict:
    """`script --smoke` of a GPU experiment, run on the CPU (the code path only; the GPU machine
    runs it for real through scripts/gpu_check.sh): the result it wrote."""
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / script), "--smoke", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def test_gpu_efficiency_smoke_writes_every_size(tmp_path):
    data = smoke_result("gpu_efficiency.py", tmp_path)
    assert [p["rows"] for p in data["gemm"]["tiny"]] == [16, 32]
    assert all(
        p["forward_tflops"] > 0 and p["weight_grad_tflops"] > 0 for p in data["gemm"]["tiny"]
    )
    assert [p["length"] for p in data["attention"]] == [16, 32]
    # The curves it is compared with, as hardware.cc cites them (XLA's 412.03 TFLOP/s at 256 rows).
    assert data["published"]["gemm_forward"][0] == [256.0, pytest.approx(412.03)]


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    subprocess.run(
        [
            str(TOOL),
            "--distribution",
            "wikipedia",
            "--batch",
            "32",
            "--context",
            "8192",
            "--seed",
            "0",
            "--model",
            "llama-7b",
            "--hardware",
            "a800",
            "--stages",
            str(STAGES),
            "--memory-gib",
            "80",
            "--method",
            "epp",
            "--trace",
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def test_parsed_events_cover_every_stage(small_trace):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from lib import timeline_plot
    finally:
        sys.path.remove(str(BENCHMARKS))
    trace = json.loads(small_trace.read_text())
    events = timeline_plot.parse_events(trace)
    assert {e["stage"] for e in events} == set(range(STAGES))
    assert {"forward", "backward"} <= {e["cat"] for e in events}
    # A measured trace has no memory counters and no thread names: tid is the stage.
    bare = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["tid"] < STAGES]
    assert {e["stage"] for e in timeline_plot.parse_events({"traceEvents": bare})} == set(
        range(STAGES)
    )


def test_plot_timeline_cli_writes_png(small_trace, tmp_path):
    out = tmp_path / "timeline.png"
    subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "tools" / "plot_timeline.py"),
            str(small_trace),
            str(small_trace),
            "--labels",
            "A",
            "B",
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert out.exists() and out.stat().st_size > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # 4 processes, every method and peer
@pytest.mark.parametrize("flag", ["--sequence", "--replicas"])
def test_measured_comparison_smoke_under_a_layout(flag, tmp_path):
    """One tiny step of every same-executor method under the layout (the script stops unless
    their first-step losses agree with the unpipelined model's); the JSON names the layout and
    why torch.distributed.pipelining is not run, and lib/layout_report renders its subsection."""
    out = tmp_path / ("measured_sp2.json" if flag == "--sequence" else "measured_dp2.json")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    command += [str(EXPERIMENTS / "measured_comparison.py"), "--smoke", flag, "2"]
    command += ["--cost-model", str(BENCHMARKS / "results" / "cost_cpu.json")]
    command += ["--output", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    res = json.loads(out.read_text())
    layout = res["case"]["layout"]
    assert layout["pipeline"] == 2 and layout["gpus_per_node"] == 4
    assert (layout["sequence"], layout["data"]) == ((2, 1) if flag == "--sequence" else (1, 2))
    assert "omitted" in res["torch_config"] and "torch_1f1b" not in res["rows"]
    assert set(res["rows"]) == {"epp", "seq1f1b", "batch", "chunkflow", "unpipelined"}
    for name in ("epp", "seq1f1b", "batch", "chunkflow"):
        assert len(res["rows"][name][0]["memory_bytes"]) == 4
        assert ("all_to_all_share" in res["summary"][name]) == (flag == "--sequence")
    flags = res["static"]["command"].split()
    assert flags[flags.index("--gpus-per-node") + 1] == "4"
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from lib import layout_report
    finally:
        sys.path.remove(str(BENCHMARKS))
    page = "\n".join(layout_report.layout_sections(tmp_path))
    title = "SP 2" if flag == "--sequence" else "data 2"
    assert (
        f"### With {'sequence parallelism' if flag == '--sequence' else 'data-parallel replicas'} (pipeline 2 x {title})"
        in page
    )
    assert "| EPP | planned per step |" in page and "n/a" in page


def test_step_breakdown_parts_add_up_to_the_step_and_the_busy_time():
    """lib/step_breakdown: per stage, compute + recompute is the plan's busy time, and with fill,
    drain and stalls the parts make the step (every step planned alone with --trace)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from lib import step_breakdown
        from lib.plan_tool import run_tool, tool_args
    finally:
        sys.path.remove(str(BENCHMARKS))
    case = dict(distribution="wikipedia", batch=32, context=8192, seed=0, model="llama-7b")
    case.update(hardware="a800", stages=STAGES, memory_gib=30, steps=2)
    got = step_breakdown.run(str(TOOL), case, ["--checkpoint-seconds", "0"])
    rows = run_tool([str(TOOL)] + tool_args(case, "epp") + ["--checkpoint-seconds", "0"])
    busy = sum(sum(r["busy_s"]) / len(r["busy_s"]) for r in rows) / len(rows)
    step = sum(r["step_time_s"] for r in rows) / len(rows)
    assert got["step_s"] == pytest.approx(step, rel=1e-12)
    assert got["compute_s"] + got["recompute_s"] == pytest.approx(busy, rel=1e-9)
    assert sum(got[k] for k in step_breakdown.PARTS) == pytest.approx(step, rel=1e-9)
    assert all(got[k] >= -1e-9 for k in step_breakdown.PARTS), got
    assert got["recompute_s"] > 0 and got["stalls_s"] > 0, got  # 30 GiB makes it recompute


@pytest.mark.slow  # 2 processes, three trainers and torch's ZBV
def test_zero_bubble_measured_steps_every_mode_on_the_same_batches(tmp_path):
    """Three tiny steps of EPP with zero bubble off, forced (ZB-H1, ZB-H2) and tried, and torch's ZBV on the
    packed peer: forced splits every timed step, the modes train alike (the split's gradients are
    the plain ones), ZBV steps the same tokens, and the summary is relative to "off"."""
    out = tmp_path / "zero_bubble_measured.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(EXPERIMENTS / "zero_bubble_measured.py"), "--steps", "3", "--batch", "4"]
    command += ["--context", "2048", "--cost-model", str(BENCHMARKS / "results" / "cost_cpu.json")]
    command += ["--output", str(out), "--torch", "zbv"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "python"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    res = json.loads(out.read_text())
    assert set(res["summary"]) == {"off", "h1", "h2", "try", "torch zbv"}
    assert [r["tokens"] for r in res["rows"]["torch zbv"]] == [
        r["tokens"] for r in res["rows"]["off"]
    ]
    assert res["summary"]["torch zbv"]["tokens_per_s"] > 0
    assert res["summary"]["off"]["speedup_over_off"] == 1.0
    assert res["summary"]["off"]["split_steps"] == 0
    for mode in ("h1", "h2"):
        assert res["summary"][mode]["split_steps"] == 2
        for a, b in zip(res["rows"]["off"], res["rows"][mode]):
            assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
            assert b["weight_s"] > 0 and a["weight_s"] == 0


def test_gpu_cost_plans_smoke_plans_both_cost_models_of_both_models():
    done = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "gpu_cost_plans.py"), str(TOOL), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = Path(done.stdout.strip().splitlines()[-1].split()[-1])
    cases = json.loads(out.read_text())["cases"]
    assert [(c["model"], c["costs"]) for c in cases] == [
        (m, costs)
        for m in ("LLaMA-7B", "LLaMA-13B")
        for costs in ("analytic h100", "measured H200")
    ]
    for c in cases:
        assert c["means"]["epp"] > 0 and c["means"]["epp_chunks"] >= 1


def test_gpu_step_speed_smoke_trains_every_runner_alike(tmp_path):
    data = smoke_result("gpu_step_speed.py", tmp_path, "--steps", "2")
    assert set(data["cases"]) == {"packed", "split"}
    for case in data["cases"].values():
        runners = case["runners"]
        assert len(runners) == 3 and runners["plain"]["time_over_plain"] == 1.0
        # the same batch, weights and steps: every runner's model trains alike
        losses = [r["last_loss"] for r in runners.values()]
        assert max(losses) - min(losses) < 1e-4 * abs(losses[0])
    sys.path.insert(0, str(BENCHMARKS))
    from lib import gpu_report

    data["device"] = "a GPU"  # rendered as a GPU run's would be
    lines = gpu_report.speed_lines(data)
    assert sum(line.startswith("| packed") for line in lines) == 3


def test_gpu_host_link_smoke_times_every_copy_and_renders(tmp_path):
    data = smoke_result("gpu_host_link.py", tmp_path)
    assert data["bytes"] == 1 << 20
    for key in ("alone", "both_ways", "beside_gemms"):
        assert data[key]["device_to_host_gb_s"] > 0 and data[key]["host_to_device_gb_s"] > 0
    assert data["beside_gemms"]["gemm_tflops"] > 0 and data["beside_gemms"]["gemm_tflops_alone"] > 0
    assert data["gemm"]["count"] >= 4
    sys.path.insert(0, str(BENCHMARKS))
    from lib import gpu_report

    lines = gpu_report.host_link_lines(dict(data, device="a GPU"))
    rows = [line for line in lines if line.startswith("| ") and "GB/s" not in line]
    assert len(rows) == 3 and f"{2**20 / 2**30:g} GiB" in lines[0]


def test_gpu_memory_smoke_plans_and_predicts_every_case(tmp_path):
    data = smoke_result("gpu_memory.py", tmp_path)
    assert [c["batch"] for c in data["cases"]] == ["packed", "split"] * 2
    for c in data["cases"]:
        assert c["predicted_bytes"] > c["predicted_model_state_bytes"] > 0
    # the lean layer's stage is predicted to hold less, the same model state
    eager, lean = data["cases"][:2], data["cases"][2:]
    for e, n in zip(eager, lean, strict=True):
        assert n["model"] == "tiny, lean layer" and n["predicted_bytes"] < e["predicted_bytes"]
        assert n["predicted_model_state_bytes"] == e["predicted_model_state_bytes"]
    sys.path.insert(0, str(BENCHMARKS))
    from lib import gpu_report

    for c in data["cases"]:  # rendered as a GPU run's would be
        c.update(peak_bytes=c["predicted_bytes"], measured_over_predicted=1.0, reserved_bytes=0)
    lines = gpu_report.memory_lines(dict(data, device="a GPU"))
    assert sum(line.startswith("| tiny |") for line in lines) == 2
