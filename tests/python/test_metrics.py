"""MetricsLog: step records to JSON Lines (rank 0, or every rank with {rank}), the console bar,
and TensorBoard only when it is installed."""

import json
import math
import sys

import pytest

from infinipipe.training.metrics import MetricsLog, step_record
from infinipipe.training.trainer import EvalResult, StepResult


def result(loss: float = 2.5, step_s: float = 0.5, cost_model: str = "analytic") -> StepResult:
    plan = {"method": "epp", "setting": "k=2", "predicted_step_s": 0.4, "cost_model": cost_model}
    return StepResult(loss=loss, plan=plan, tokens=1000, planning_s=0.01, step_s=step_s)


def test_a_step_record_holds_what_the_user_watches():
    record = step_record(3, result(), lr=0.1)
    assert record["step"] == 3 and record["loss"] == 2.5 and record["lr"] == 0.1
    assert record["tokens_per_s"] == pytest.approx(2000.0)
    assert (record["measured_step_s"], record["predicted_step_s"]) == (0.5, 0.4)
    assert record["planning_s"] == 0.01 and record["method"] == "epp"
    assert record["cost_model"] == "analytic" and record["planning_hidden_s"] == 0.0
    assert record["peak_memory_bytes"] > 0


def test_json_lines_are_valid_json_even_for_a_non_finite_loss(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    with MetricsLog(jsonl=path, console=False, rank=0) as log:
        log.step(1, result())
        log.step(2, result(loss=math.inf))
        log.evaluation(2, EvalResult(loss=1.0, tokens=10, batches=1))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 2]
    assert lines[1]["loss"] == "inf"
    assert lines[2]["eval_perplexity"] == pytest.approx(math.e)


def test_only_rank_0_writes_unless_the_path_names_the_rank(tmp_path):
    with MetricsLog(jsonl=tmp_path / "shared.jsonl", console=False, rank=1) as log:
        log.step(1, result())
    assert not (tmp_path / "shared.jsonl").exists()
    with MetricsLog(jsonl=tmp_path / "r{rank}.jsonl", console=False, rank=1) as log:
        log.step(1, result())
    assert json.loads((tmp_path / "r1.jsonl").read_text())["step"] == 1


def test_the_console_bar_shows_loss_and_times_and_names_the_cost_model_when_it_changes(capsys):
    with MetricsLog(console=True, total=4, rank=0) as log:
        log.step(1, result())
        log.step(2, result())
        log.step(3, result(cost_model="profiled again"))  # a stale cached profile replaced
        log.step(4, result(cost_model="profiled again"))
    captured = capsys.readouterr()
    assert "loss=2.5000" in captured.err and "step_s=0.50/0.40" in captured.err
    assert captured.out.count("predicted step times: analytic") == 1
    assert captured.out.count("predicted step times: profiled again") == 1


def test_tensorboard_is_written_when_installed(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed")
    with MetricsLog(tensorboard=tmp_path / "tb", console=False, rank=0) as log:
        log.step(1, result())
    assert any((tmp_path / "tb").iterdir())


def test_without_tensorboard_a_warning_and_nothing_written(tmp_path, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with MetricsLog(tensorboard=tmp_path / "tb", console=False, rank=0) as log:
        log.step(1, result())
    assert "TensorBoard is not installed" in caplog.text
    assert not (tmp_path / "tb").exists()
