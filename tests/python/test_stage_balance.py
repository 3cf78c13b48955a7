"""infinipipe.balanced_layer_split and choose_layer_split (planner/stage_balance.h) from Python: a
large vocabulary moves layers off the last stage, a small one keeps the even split, and the
choice through the planner is deterministic and names what it weighed."""

from __future__ import annotations

import pytest
import torch

import infinipipe
from infinipipe import PlanConfig
from infinipipe.models.llama import LlamaConfig, even_layer_split

# LLaMA-3-8B's shape (the planner's llama3-8b preset): its 128K vocabulary's head is about two
# decoder layers.
LLAMA3_8B = LlamaConfig(
    vocab=128256, hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, dtype=torch.bfloat16
)
STEPS = [[4096, 900, 300, 12000, 64] * 8, [30000, 2000, 500] * 4]
A800 = PlanConfig(hardware="a800")


def test_large_vocabulary_lightens_the_last_stage():
    split = infinipipe.balanced_layer_split(LLAMA3_8B, STEPS, 8, plan=A800)
    assert sum(split) == 32 and len(split) == 8 and min(split) >= 1
    assert split[-1] < 4
    # One step's lengths alone are accepted too.
    assert infinipipe.balanced_layer_split(LLAMA3_8B, STEPS[0], 8, plan=A800) == (
        infinipipe.balanced_layer_split(LLAMA3_8B, [STEPS[0]], 8, plan=A800)
    )


def test_small_vocabulary_keeps_the_even_split():
    config = LlamaConfig(vocab=97, hidden=32, layers=8, heads=4, kv_heads=2, ffn=64)
    assert infinipipe.balanced_layer_split(config, STEPS, 4) == even_layer_split(8, 4)


def test_choice_through_the_planner():
    a = infinipipe.choose_layer_split(LLAMA3_8B, STEPS, 4, 80 * (1 << 30), plan=A800)
    b = infinipipe.choose_layer_split(LLAMA3_8B, STEPS, 4, 80 * (1 << 30), plan=A800)
    assert a == b
    names = [c["name"] for c in a["candidates"]]
    assert names[0] == "balanced" and a["name"] in names
    chosen = next(c for c in a["candidates"] if c["layers_per_stage"] == a["layers_per_stage"])
    assert chosen["planned"] and chosen["feasible_steps"] == len(STEPS)
    assert chosen["mean_step_s"] >= chosen["bound_s"]


def test_bad_steps_are_refused():
    with pytest.raises(ValueError, match="at least one step"):
        infinipipe.balanced_layer_split(LLAMA3_8B, [], 8)
    with pytest.raises(ValueError, match="every stage needs a layer"):
        infinipipe.balanced_layer_split(LLAMA3_8B, STEPS, 40, plan=A800)
