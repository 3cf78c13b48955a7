"""examples/train_llama.py's config file: every option settable in a TOML file (names as the
flags'), the command line winning over it, an unknown or bad option a usage error naming the
file, and the options in effect saved beside the checkpoints and read back by a resumed run."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import train_llama  # noqa: E402

pytest.importorskip("tomli_w")


def test_a_file_sets_options_and_the_command_line_wins(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('steps = 7\nspread-head = true\nmethod = "seq1f1b"\nlr = 0.005\n')
    args = train_llama.parse_args(["--config", str(config), "--lr", "0.02"])
    assert (args.steps, args.spread_head, args.method, args.lr) == (7, True, "seq1f1b", 0.02)
    assert train_llama.parse_args([]).steps == 40  # no file: the defaults


@pytest.mark.parametrize(
    "text, says",
    [
        ("stepz = 3\n", "unknown option 'stepz'; the options are checkpoint-dir"),
        ('method = "bogus"\n', "invalid choice: 'bogus'"),
        ("steps = \n", "config file"),
    ],
)
def test_a_bad_file_is_a_usage_error(tmp_path, capsys, text, says):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(SystemExit) as exited:
        train_llama.parse_args(["--config", str(config)])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_the_saved_options_are_read_back_by_a_resumed_run(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    args = train_llama.parse_args(
        ["--checkpoint-dir", str(checkpoints), "--steps", "9", "--k", "2"]
    )
    train_llama.save_config(args)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["config.toml"]
    resumed = train_llama.parse_args(["--checkpoint-dir", str(checkpoints)])
    assert vars(resumed) == vars(args)
    longer = train_llama.parse_args(["--checkpoint-dir", str(checkpoints), "--steps", "12"])
    assert (longer.steps, longer.k) == (12, 2)
