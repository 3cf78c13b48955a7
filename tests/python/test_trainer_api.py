"""The Trainer's public face in one process (a world of one): it is built from its configs and its
three parts; 0.1.0's keywords, attributes and module names still work with a DeprecationWarning
naming their new place and mean what they meant; its progress goes through state_dict."""

import importlib
import sys
import warnings

import pytest
import torch
import torch.distributed as dist

import infinipipe
from infinipipe.models import cpp, llama
from infinipipe.models.llama import LlamaConfig

CONFIG = LlamaConfig.tiny(vocab=97, hidden=32, layers=4, heads=4, kv_heads=2, ffn=64)


@pytest.fixture(scope="module", autouse=True)
def _one_process_group():
    # The trainers make a one-rank Gloo group in this pytest process: the tests after this
    # module must not find it.
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_trainer_is_its_configs_and_three_parts():
    trainer = infinipipe.Trainer(
        CONFIG,
        plan=infinipipe.PlanConfig(method="chunkflow", chunk_tokens=16),
        parallel=infinipipe.Parallel(layer_split=[4]),
        runtime=infinipipe.RuntimeConfig(dtype=torch.float64, seed=4, timeout_s=30),
    )
    with trainer:
        # the configs as given, with the model's dtype and the master default resolved
        assert trainer.runtime.dtype == trainer.config.dtype == torch.float64
        assert trainer.runtime.master_dtype is None  # float64: the optimizer steps the model
        assert trainer.runtime.seed == 4 and trainer.plan_config.method == "chunkflow"
        assert trainer.layers_per_stage == [4]
        # the parts, and what the trainer reads from them
        assert trainer.module is trainer.stage.module
        assert trainer.optimizer is trainer.stage.optimizer
        assert trainer.cost is trainer.planner.cost
        assert isinstance(trainer.gradients, infinipipe.training.gradient_sync.GradientSync)
        result = trainer.step([torch.randint(0, CONFIG.vocab, (n,)) for n in (40, 9)])
        assert result.loss > 0 and trainer.steps == 1 and not result.skipped
        assert trainer.state_dict() == {"step": 1, "skipped": 0, "in_a_row": 0}
        trainer.load_state_dict({"step": 7, "skipped": 2, "in_a_row": 1})
        assert trainer.steps == 7 and trainer.skipped_steps == 2
        trainer.load_state_dict({"step": 3})  # a checkpoint from before the skip counts
        assert trainer.state_dict() == {"step": 3, "skipped": 0, "in_a_row": 0}


def test_a_16_bit_runtime_gets_float32_masters_by_default():
    runtime = infinipipe.RuntimeConfig(dtype=torch.bfloat16).resolved(torch.float32)
    assert runtime.dtype == torch.bfloat16 and runtime.master_dtype == torch.float32
    assert infinipipe.RuntimeConfig().resolved(torch.float16).master_dtype == torch.float32
    kept = infinipipe.RuntimeConfig(master_dtype=None).resolved(torch.bfloat16)
    assert kept.master_dtype is None


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), 1e300, "soon", None])
def test_a_bad_timeout_is_refused_when_the_config_is_made(timeout):
    # inf was a raw OverflowError from a timedelta when the trainer made its process group.
    with pytest.raises(
        ValueError,
        match=r"timeout_s must be a positive number of seconds up to "
        r"31,536,000 \(a year\), got .*give a long one",
    ):
        infinipipe.RuntimeConfig(timeout_s=timeout)
    assert infinipipe.RuntimeConfig(timeout_s=365 * 24 * 3600).timeout_s == 31_536_000


def test_an_endless_timeout_through_the_old_keyword_is_refused_as_clearly():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="got inf"):
        infinipipe.Trainer(CONFIG, timeout_s=float("inf"))


@pytest.mark.parametrize("skips", [-1, 1.5, True, "3"])
def test_a_bad_number_of_nonfinite_skips_is_refused(skips):
    with pytest.raises(ValueError, match="max_nonfinite_skips must be a whole number >= 0"):
        infinipipe.RuntimeConfig(max_nonfinite_skips=skips)


def test_the_layer_split_is_the_layouts():
    assert infinipipe.Parallel().stage_layers(8, 2) == [4, 4]
    assert infinipipe.Parallel(layer_split=2).stage_layers(8, 2) == [4, 4]
    assert infinipipe.Parallel(layer_split=(5, 3)).stage_layers(8, 2) == [5, 3]
    with pytest.raises(ValueError, match="summing to the model's 8 layers"):
        infinipipe.Parallel(layer_split=[5, 4]).stage_layers(8, 2)
    with pytest.raises(infinipipe.Error, match="--nproc_per_node=3"):
        infinipipe.Parallel(layer_split=[3, 3, 2]).stage_layers(8, 2)


def test_old_keywords_warn_and_land_in_the_configs():
    def factory(stage, split):
        return llama.build_stage(CONFIG, split, stage, seed=2)

    with pytest.warns(DeprecationWarning) as caught:
        trainer = infinipipe.Trainer(
            factory,
            model_config=CONFIG,
            layer_split=[4],
            seed=2,
            timeout_s=25,
            dtype=torch.float64,
            spread_head=None,  # 0.1.0's "keep the plan config's": no warning
        )
    with trainer:
        said = [str(w.message) for w in caught]
        for name, where in [
            ("layer_split", "parallel=infinipipe.Parallel"),
            ("seed", "runtime=infinipipe.RuntimeConfig"),
            ("timeout_s", "runtime=infinipipe.RuntimeConfig"),
            ("dtype", "runtime=infinipipe.RuntimeConfig"),
        ]:
            assert any(f"Trainer({name}=...)" in s and where in s for s in said), name
        assert any("infinipipe.StageFactory(factory, config)" in s for s in said)
        assert not any("spread_head" in s for s in said)
        assert trainer.layers_per_stage == [4]
        assert trainer.runtime.seed == 2 and trainer.runtime.timeout_s == 25
        assert trainer.config.dtype == torch.float64
        with pytest.warns(
            DeprecationWarning, match=r"Trainer\.executor .* Trainer\.stage\.executor"
        ):
            assert trainer.executor is trainer.stage.executor
        with pytest.warns(DeprecationWarning, match=r"Trainer\.cost_model_name"):
            assert trainer.cost_model_name == trainer.planner.cost_model_name
        with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
            trainer.no_such_thing  # noqa: B018


def test_an_unknown_keyword_and_a_factory_without_its_shape_are_refused():
    with pytest.raises(TypeError, match="unexpected keyword arguments: layers"):
        infinipipe.Trainer(CONFIG, layers=3)
    with pytest.raises(ValueError, match="StageFactory"):
        infinipipe.Trainer(lambda stage, split: None)
    with pytest.raises(TypeError, match="a LlamaConfig or a StageFactory"):
        infinipipe.Trainer("llama")


def test_the_cpp_stage_factory_carries_its_shape():
    factory = cpp.stage_factory(CONFIG)
    assert factory.config is CONFIG
    stage = factory(0, [2, 2])
    assert int(stage.num_layers) == 2 and bool(stage.has_embedding)


@pytest.mark.parametrize(
    "old, name, new",
    [
        ("trainer", "Trainer", "infinipipe.training.trainer"),
        ("layout", "Parallel", "infinipipe.distributed.layout"),
        ("plan_config", "PlanConfig", "infinipipe.planning.config"),
        ("checkpoint", "save", "infinipipe.state.checkpoint"),
        ("rendezvous", "at_exit", "infinipipe.distributed.exit_hooks"),
        ("stage_group", "sum_gradients", "infinipipe.distributed.gradient_group"),
        ("profile", "profile", "infinipipe.profiling.layer_profile"),
    ],
)
def test_old_module_names_warn_and_hold_the_same_objects(old, name, new):
    sys.modules.pop(f"infinipipe.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(f"infinipipe.{old}")
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
