"""Test bodies that run inside the ranks started by launcher.run_ranks (one process per stage)."""

from __future__ import annotations

import atexit
import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist

import infinipipe
from infinipipe import _C
from infinipipe.models import llama
from infinipipe.planning.cost_model import model_shape_json

# Tiny on purpose: 8 layers split over 2 or 4 stages, hidden 32, grouped-query attention.
MODEL = dict(vocab=97, hidden=32, layers=8, heads=4, kv_heads=2, ffn=64)

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def model_config(dtype: str) -> llama.LlamaConfig:
    """The tiny model in `dtype` ("float64", ...); "float64-lean" and so on: with the lean layer
    (LlamaConfig.lean_layer)."""
    name, _, variant = dtype.partition("-")
    return llama.LlamaConfig(**MODEL, dtype=DTYPES[name], lean_layer=variant == "lean")


def make_batch(lengths: list[int], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, MODEL["vocab"], (n,), generator=g) for n in lengths]


def frozen_optimizer(params):
    """SGD with lr 0: the step leaves the weights (and the gradients) as they were."""
    return torch.optim.SGD(params, lr=0.0)


def recompute_pattern(plan: Any) -> list[list[int]]:
    """A recompute table with every count from 0 to all layers across (stage, chunk) pairs."""
    table = []
    for stage, layers in enumerate(plan.layers_per_stage):
        table.append([(stage + 2 * chunk) % (layers + 1) for chunk in range(plan.num_chunks)])
    return table


def _recomputes(plan: Any) -> bool:
    return any(n > 0 for row in plan.recompute for n in row)


# Properties a budget search looks for: memory pressure that the planner answers with
# checkpointing, or with several waves.
WANTED = {
    "recompute": _recomputes,
    "waves": lambda plan: len(plan.waves) >= 2,
}


def search_budget(lengths: list[int], cost: Any, want: str) -> Any:
    """The EPP plan at the largest budget (lowering it by 5% steps from one that needs no
    recompute) whose plan shows `want`; so the case does not hang on the cost model's constants."""
    budget = max(_C.plan.plan_step(lengths, cost, 1e12, "epp", max_k=8).peak_memory_bytes)
    while budget > 1e5:
        budget *= 0.95
        try:
            plan = _C.plan.plan_step(lengths, cost, budget, "epp", max_k=8)
        except infinipipe.Error:
            continue
        if WANTED[want](plan):
            return plan
    raise AssertionError(f"no budget gives a plan with {want} for lengths {lengths}")


def make_plan(trainer: infinipipe.Trainer, lengths: list[int], spec: dict) -> Any:
    """A plan of `lengths` from a case's spec: the planner (method, budget, setting), a budget
    search (search=...), or given chunks and waves; optionally with the recompute replaced."""
    if "chunks" in spec:
        plan = _C.plan.build_plan(
            lengths,
            spec["chunks"],
            spec["waves"],
            trainer.cost,
            overlap_waves=spec.get("overlap_waves", False),
            zero_bubble=spec.get("zero_bubble", "off"),
        )
    elif "epp_k" in spec:  # EPP's chunking at a fixed K, one wave
        chunks = _C.plan.epp_chunks(lengths, spec["epp_k"], trainer.cost)
        plan = _C.plan.build_plan(
            lengths,
            chunks,
            [list(range(len(chunks)))],
            trainer.cost,
            zero_bubble=spec.get("zero_bubble", "off"),
        )
    elif "search" in spec:
        plan = search_budget(lengths, trainer.cost, spec["search"])
    else:
        plan = _C.plan.plan_step(
            lengths,
            trainer.cost,
            float(spec.get("budget", 1e9)),
            spec.get("method", "epp"),
            k=spec.get("k", 1),
            token_cap=spec.get("token_cap", max(lengths)),
            chunk_tokens=spec.get("chunk_tokens", 0),
            max_k=spec.get("max_k", 8),
            baseline_chunkings=spec.get("baseline_chunkings", True),
            spread_head=spec.get("spread_head", False),
            zero_bubble=spec.get("zero_bubble", "off"),
        )
    if spec.get("recompute") == "pattern":
        plan.recompute = recompute_pattern(plan)
    return plan


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return float((value - reference).abs().max() / reference.abs().max())


def assert_matches_unpipelined(
    losses: dict[int, float],
    grads: dict[str, torch.Tensor],
    reference_loss: float,
    reference_grads: dict[str, torch.Tensor],
    tolerance: float,
) -> None:
    """A pipelined step against the unpipelined model: the loss every stage returned (by stage)
    and every parameter's gradient (by name, one per parameter of the whole model) within
    `tolerance`, relative (max |pipelined - reference| / max |reference| per parameter)."""
    for stage, loss in losses.items():
        assert abs(loss - reference_loss) <= tolerance * abs(reference_loss), (
            stage,
            loss,
            reference_loss,
        )
    assert set(grads) == set(reference_grads), set(grads) ^ set(reference_grads)
    errors = {n: relative_error(grads[n], reference_grads[n]) for n in reference_grads}
    worst = max(errors, key=errors.get)
    assert errors[worst] < tolerance, f"{worst}: relative error {errors[worst]:.3g} >= {tolerance}"
    assert all(g.abs().max() > 0 for g in reference_grads.values())


def run_cases(cases: list[dict], new_trainer, measure_memory: bool = False):
    """Runs every case (a batch and a plan spec) as one step of a trainer made by
    new_trainer(dtype), one trainer per dtype. Yields per case the trainer, the step's result and
    a record of the case's name, this rank's loss, parameter gradients (by name) and the plan's
    chunk kinds and recompute."""
    trainers: dict[str, infinipipe.Trainer] = {}
    for case in cases:
        dtype = case["dtype"]
        if dtype not in trainers:
            trainers[dtype] = new_trainer(dtype)
        trainer = trainers[dtype]
        batch = make_batch(case["lengths"], case["seed"])
        plan = make_plan(trainer, case["lengths"], case["plan"])
        result = trainer.step(batch, plan=plan, measure_memory=measure_memory)
        grads = {name: p.grad.detach().clone() for name, p in trainer.module.named_parameters()}
        record = dict(
            name=case["name"],
            loss=result.loss,
            grads=grads,
            kinds=list(plan.chunk_kinds),
            recompute=plan.recompute,
        )
        yield trainer, result, record


def parity(cases: list[dict], timeout_s: float = 60.0, share_gpus: bool = False) -> list[dict]:
    """Runs every case as one step (run_cases); returns per case its record with the plan
    summary, the stats (measured memory included) and this rank's stage."""

    def new_trainer(dtype: str) -> infinipipe.Trainer:
        return infinipipe.Trainer(
            model_config(dtype),
            frozen_optimizer,
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s, share_gpus=share_gpus),
        )

    return [
        dict(record, summary=result.plan, stats=result.stats, stage=trainer.stage_index)
        for trainer, result, record in run_cases(cases, new_trainer, measure_memory=True)
    ]


# --------------------------------------------------------------------------------------------
# Errors


def world_mismatch(layer_split: list[int]) -> None:
    infinipipe.Trainer(
        model_config("float32"),
        frozen_optimizer,
        parallel=infinipipe.Parallel(layer_split=layer_split),
        runtime=infinipipe.RuntimeConfig(timeout_s=20),
    )


def _outcome(fn) -> tuple[str, str] | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return (type(e).__name__, str(e))
    return None


def bad_inputs() -> dict:
    """Every rank tries several bad steps in the same order, then a good one; returns what
    each raised (type, message) or None."""
    rank = int(os.environ["RANK"])
    trainer = infinipipe.Trainer(
        model_config("float32"), frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=20)
    )
    good = make_batch([30, 12, 7], seed=1)
    results: dict[str, Any] = {}
    results["out_of_vocab"] = _outcome(lambda: trainer.step([[1, 2, 3], [4, MODEL["vocab"], 5]]))
    results["negative_id"] = _outcome(lambda: trainer.step([[1, -4, 3]]))
    results["empty_batch"] = _outcome(lambda: trainer.step([]))
    results["empty_sequence"] = _outcome(lambda: trainer.step([[1, 2], []]))
    results["float_tokens"] = _outcome(lambda: trainer.step([torch.rand(5)]))
    # Only rank 1 holds a bad token: it rejects the step and every other rank says so.
    bad_on_one = [list(t) for t in good]
    if rank == 1:
        bad_on_one[0][3] = 1000
    results["one_rank_bad"] = _outcome(lambda: trainer.step(bad_on_one))
    # Rank 1 got a different batch (same lengths, other tokens).
    other = make_batch([30, 12, 7], seed=2) if rank == 1 else good
    results["different_batch"] = _outcome(lambda: trainer.step(other))
    # Rank 1 runs a different plan of the same batch.
    plan = trainer.plan(good)
    if rank == 1:
        plan.recompute = recompute_pattern(plan)
    results["different_plan"] = _outcome(lambda: trainer.step(good, plan=plan))
    # Every rank gives a plan made for another layer split.
    other_split = _C.plan.CostModel.analytic(
        model_shape_json(trainer.config, trainer.config.dtype), "cpu", [2, 6]
    )
    foreign = _C.plan.plan_step(
        [30, 12, 7], other_split, float(trainer.planner.memory_budget_bytes), "epp"
    )
    results["plan_for_other_split"] = _outcome(lambda: trainer.step(good, plan=foreign))
    # After all that, a good step runs.
    results["good_loss"] = trainer.step(good).loss
    # Rank 1 configured a different method: the configurations differ.
    method = "batch" if rank == 1 else "epp"
    other_config = infinipipe.Trainer(
        model_config("float32"),
        frozen_optimizer,
        plan=infinipipe.PlanConfig(method=method),
        runtime=infinipipe.RuntimeConfig(timeout_s=20),
    )
    results["different_config"] = _outcome(lambda: other_config.step(good))
    return results


def gather_text() -> list[bytes]:
    """Every rank's bytes through the executor's all-gather: rank r sends r copies of
    (r, 0, 255), so lengths differ, rank 0 sends nothing, and the bytes are not text."""
    rank = int(os.environ["RANK"])
    trainer = infinipipe.Trainer(
        model_config("float32"), frozen_optimizer, runtime=infinipipe.RuntimeConfig(timeout_s=20)
    )
    return trainer.stage.executor.all_gather_text(bytes([rank, 0, 255]) * rank)


def factory_raises(victim: int, timeout_s: float, slow_reader: int | None = None) -> None:
    """Rank `victim`'s model factory raises; every rank's Trainer must fail naming it. Rank
    `slow_reader` takes 0.5 s over each call to the rendezvous store while the ranks agree, so
    rank 0 (hosting the store) is done reading long before it."""
    config = model_config("float32")
    if int(os.environ["RANK"]) == slow_reader:
        from infinipipe.distributed import agreement

        bounded = agreement.bounded

        def slow(*args, **kwargs):
            time.sleep(0.5)
            return bounded(*args, **kwargs)

        agreement.bounded = slow

    def factory(stage, split):
        if stage == victim:
            raise RuntimeError("no such checkpoint: /missing/stage.pt")
        return llama.build_stage(config, split, stage)

    infinipipe.Trainer(
        infinipipe.StageFactory(factory, config),
        frozen_optimizer,
        runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
    )


def report_groups_at_exit() -> None:
    """Registered before the Trainer, so it runs after the Trainer's own exit handlers: prints
    whether a process group was left for the interpreter's end."""
    atexit.register(lambda: print(f"at exit: groups left {dist.is_initialized()}", flush=True))


def exits_without_closing() -> float:
    """Trains one step and returns without closing the trainer or destroying a group, as a
    short script would. Returns the loss."""
    report_groups_at_exit()
    trainer = infinipipe.Trainer(model_config("float32"), frozen_optimizer)
    return trainer.step(make_batch([30, 12, 7], seed=1)).loss


def closes_at_once(late: int) -> None:
    """Builds a Trainer and closes it at once; rank `late` opens its connections to the other
    ranks' failure boards a second after the others (a loaded machine's scheduling)."""
    from infinipipe.distributed.failure_board import FailureBoard

    if int(os.environ["RANK"]) == late:
        connect = FailureBoard.connect

        def late_connect(self, addresses):
            time.sleep(1.0)
            connect(self, addresses)

        FailureBoard.connect = late_connect
    infinipipe.Trainer(model_config("float32"), frozen_optimizer).close()


def exits_before_setup(victim: int, timeout_s: float) -> float:
    """Rank `victim` exits before creating its Trainer; the others' setup must fail naming it.
    Returns (on the others) the seconds the setup took to fail."""
    if int(os.environ["RANK"]) == victim:
        os._exit(17)
    started = time.monotonic()
    try:
        infinipipe.Trainer(
            model_config("float32"),
            frozen_optimizer,
            runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
        )
    except Exception as e:
        print(f"setup failed after {time.monotonic() - started:.2f} s", flush=True)
        raise e from None


def dies_before_agreement(victim: int, timeout_s: float) -> None:
    """Rank `victim` exits (code 17) before the step; the others reach the agreement."""
    trainer = infinipipe.Trainer(
        model_config("float32"),
        frozen_optimizer,
        runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
    )
    if int(os.environ["RANK"]) == victim:
        os._exit(17)
    trainer.step(make_batch([30, 12, 7], seed=1))


class _DiesMidStep(llama.LlamaStage):
    """A stage that, at its `fail_at_call`-th layer call, kills its own process (os._exit, no
    cleanup), hangs (sleeps for `hang_s`, then exits), or sends itself `signal_number`
    (SIGKILL: dies as a crash would; SIGSTOP: stops, as a hung host would)."""

    fail_at_call = 0
    hang_s = 0.0
    signal_number = 0

    def layer(self, i, hidden, ctx):
        cls = type(self)
        cls.fail_at_call -= 1
        if cls.fail_at_call == 0:
            print(
                f"rank {os.environ['RANK']}: {'hanging' if cls.hang_s else 'dying'} now", flush=True
            )
            if cls.signal_number:
                os.kill(os.getpid(), cls.signal_number)
            time.sleep(cls.hang_s)
            os._exit(17)
        return super().layer(i, hidden, ctx)


def peer_dies(
    victim: int,
    timeout_s: float,
    lengths: list[int],
    hang_s: float = 0.0,
    signal_name: str = "",
    parallel: dict | None = None,
) -> float:
    """Rank `victim` dies (or hangs for hang_s) during its second layer call of the step; every
    other rank must fail with an error naming a lost peer. Prints the seconds from the step's
    start to the error. parallel: the layout's degrees (infinipipe.Parallel)."""
    rank = int(os.environ["RANK"])
    config = model_config("float32")
    report_groups_at_exit()

    def factory(stage, split):
        ranges = llama.layer_ranges(config, split)
        r = ranges[stage]
        module = _DiesMidStep(
            config, r.start, r.stop, has_embedding=stage == 0, has_head=stage == len(split) - 1
        )
        if rank == victim:
            _DiesMidStep.fail_at_call = 2
            _DiesMidStep.hang_s = hang_s
            _DiesMidStep.signal_number = getattr(signal, signal_name) if signal_name else 0
        return module

    trainer = infinipipe.Trainer(
        infinipipe.StageFactory(factory, config),
        frozen_optimizer,
        parallel=infinipipe.Parallel(**(parallel or {})),
        runtime=infinipipe.RuntimeConfig(timeout_s=timeout_s),
    )
    batch = make_batch(lengths, seed=3)
    plan = trainer.plan(batch)
    started = time.monotonic()
    try:
        trainer.step(batch, plan=plan)
    except Exception as e:
        print(
            f"rank {rank}: step failed after {time.monotonic() - started:.2f} s: "
            f"{type(e).__name__}: {e}",
            flush=True,
        )
        raise
    return time.monotonic() - started


def fails_setup_on_first_attempt() -> float:
    """Under torchrun --max-restarts 1: rank 1's model factory raises in the first attempt only;
    the restarted attempt must set up and step (the rendezvous store, torchrun's, outlives the
    attempt and still holds its keys)."""
    config = model_config("float32")

    def factory(stage, split):
        if stage == 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            raise RuntimeError("first attempt fails")
        return llama.build_stage(config, split, stage)

    trainer = infinipipe.Trainer(
        infinipipe.StageFactory(factory, config),
        frozen_optimizer,
        runtime=infinipipe.RuntimeConfig(timeout_s=20),
    )
    loss = trainer.step(make_batch([30, 12, 7], seed=1)).loss
    print(f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']} loss {loss:.4f}", flush=True)
    return loss
