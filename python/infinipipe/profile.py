"""Profile one decoder layer and fit the cost model's per-layer coefficients (issue 4, item 1).

    PYTHONPATH=python python -m infinipipe.profile --grid quick --output cost.json

Times the forward and backward of one real LlamaStage decoder layer on a (tokens, context) grid,
measures the bytes it saves for its backward per token, fits a1, a2, b and the backward ratio g
by least squares, reports the relative error on held-out grid points, and writes a cost JSON
that _C.plan.CostModel.load and PlanConfig(cost_model=...) accept. Coefficients not measured
here (embedding, head, p2p, memory terms other than activation_bytes) keep their analytic values.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from infinipipe import _C
from infinipipe.models import llama
from infinipipe.runtime import model_shape_json

GRIDS = {
    "quick": dict(tokens=[32, 64, 128], contexts=[0, 64, 192], repeats=3),
    "full": dict(tokens=[64, 128, 256, 512, 1024], contexts=[0, 256, 512, 1024, 2048], repeats=7),
}


def attention_work(tokens: int, context: int) -> int:
    """The a1 regressor: (c + s)^2 - c^2."""
    return (context + tokens) ** 2 - context ** 2


def fit_forward(points: Sequence[tuple[int, int]], times: Sequence[float]) -> tuple[float, float, float]:
    """Least squares a1, a2, b of t = a1 * ((c+s)^2 - c^2) + a2 * s + b.

    Relative least squares (rows scaled by 1/t) so that small chunks count as much as big ones:
    the planner cares about relative error across the whole range."""
    x = np.array([[attention_work(s, c), s, 1.0] for s, c in points], dtype=float)
    t = np.asarray(times, dtype=float)
    w = 1.0 / t
    coef, *_ = np.linalg.lstsq(x * w[:, None], t * w, rcond=None)
    a1, a2, b = (max(float(v), 0.0) for v in coef)  # the loader rejects negative coefficients
    return a1, a2, b


def fit_backward_ratio(forward: Sequence[float], backward: Sequence[float]) -> float:
    """g minimizing sum ((bwd - g * fwd) / bwd)^2."""
    f, bw = np.asarray(forward, float), np.asarray(backward, float)
    r = f / bw
    return float(np.sum(r) / np.sum(r * r))


def predict(a1: float, a2: float, b: float, points: Sequence[tuple[int, int]]) -> np.ndarray:
    return np.array([a1 * attention_work(s, c) + a2 * s + b for s, c in points])


def relative_errors(pred: np.ndarray, measured: Sequence[float]) -> np.ndarray:
    m = np.asarray(measured, float)
    return np.abs(pred - m) / m


class LayerBench:
    """One decoder layer of the real model, run on a chunk holding one slice of a sequence."""

    def __init__(self, config: llama.LlamaConfig, device: str = "cpu") -> None:
        torch.manual_seed(0)
        self.config, self.device = config, device
        self.layer = llama.DecoderLayer(config, device).train()
        self.inv_freq = llama.rotary_inv_freq(config.head_dim, config.rope_theta, config.dtype)

    def _inputs(self, tokens: int, context: int):
        cfg = self.config
        ctx = llama.ChunkContext.from_slices([(0, context, tokens)])
        if context:
            # Earlier slices' K/V, as the chunk attention would hold them (no grad to them).
            k = torch.randn(context, cfg.kv_heads, cfg.head_dim, dtype=cfg.dtype)
            v = torch.randn(context, cfg.kv_heads, cfg.head_dim, dtype=cfg.dtype)
            ctx.state[("kv", 0, 0)] = {0: (k, v)}
        pos = torch.arange(context, context + tokens)
        cos, sin = llama.rotary_cos_sin(pos, self.inv_freq, cfg.dtype)
        x = torch.randn(tokens, cfg.hidden, dtype=cfg.dtype, requires_grad=True)
        attn = llama.varlen_causal_attention if context == 0 else llama.reference_chunk_attention
        return x, cos, sin, ctx, attn

    def run(self, tokens: int, context: int) -> tuple[float, float]:
        """(forward seconds, backward seconds) of one run."""
        x, cos, sin, ctx, attn = self._inputs(tokens, context)
        t0 = time.perf_counter()
        out = self.layer(x, cos, sin, ctx, attn, 0)
        t1 = time.perf_counter()
        grad = torch.ones_like(out)
        t2 = time.perf_counter()
        out.backward(grad)
        t3 = time.perf_counter()
        self.layer.zero_grad(set_to_none=True)
        return t1 - t0, t3 - t2

    def saved_bytes(self, tokens: int, context: int) -> int:
        """Bytes of the distinct storages autograd keeps for the backward (the input excluded)."""
        x, cos, sin, ctx, attn = self._inputs(tokens, context)
        storages: dict[int, int] = {}
        skip = {x.untyped_storage().data_ptr()}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = t.untyped_storage()
            if st.data_ptr() not in skip:
                storages[st.data_ptr()] = st.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = self.layer(x, cos, sin, ctx, attn, 0)
        del out
        return sum(storages.values())


def profile(config: llama.LlamaConfig, grid: str, holdout: float = 0.25, seed: int = 0,
            progress: bool = True) -> dict:
    spec = GRIDS[grid]
    points = [(s, c) for s in spec["tokens"] for c in spec["contexts"]]
    bench = LayerBench(config)
    for s, c in points[:2]:  # warm up allocator and kernels
        bench.run(s, c)
    fwd, bwd = [], []
    with tqdm(total=len(points) * spec["repeats"], desc="profile", disable=not progress) as bar:
        for s, c in points:
            runs = []
            for _ in range(spec["repeats"]):
                runs.append(bench.run(s, c))
                bar.update()
            fwd.append(statistics.median(r[0] for r in runs))
            bwd.append(statistics.median(r[1] for r in runs))
    rng = np.random.default_rng(seed)
    n_hold = max(1, round(holdout * len(points)))
    held = set(rng.choice(len(points), size=n_hold, replace=False).tolist())
    fit_idx = [i for i in range(len(points)) if i not in held]
    hold_idx = sorted(held)
    a1, a2, b = fit_forward([points[i] for i in fit_idx], [fwd[i] for i in fit_idx])
    g = fit_backward_ratio([fwd[i] for i in fit_idx], [bwd[i] for i in fit_idx])
    hp = [points[i] for i in hold_idx]
    fwd_err = relative_errors(predict(a1, a2, b, hp), [fwd[i] for i in hold_idx])
    bwd_err = relative_errors(g * predict(a1, a2, b, hp), [bwd[i] for i in hold_idx])
    # Activation bytes per token: the linear term of saved bytes over token counts at context 0
    # (the constant, the weights, cancels). The CPU SDPA kernel also saves an s^2 attention
    # matrix, which the cost model has no term for: fitted apart and recorded in the metadata.
    ts = spec["tokens"]
    saved = [bench.saved_bytes(s, 0) for s in ts]
    quad, act_per_token, _ = (float(v) for v in np.polyfit(np.asarray(ts, float),
                                                          np.asarray(saved, float), 2))
    return dict(points=points, forward_s=fwd, backward_s=bwd, held_out=[points[i] for i in hold_idx],
                a1=a1, a2=a2, b=b, backward_ratio=g, activation_bytes=max(act_per_token, 0.0),
                attention_bytes_per_token_squared=quad,
                forward_heldout_median=float(np.median(fwd_err)),
                forward_heldout_max=float(np.max(fwd_err)),
                backward_heldout_median=float(np.median(bwd_err)),
                backward_heldout_max=float(np.max(bwd_err)))


def cost_json(config: llama.LlamaConfig, dtype: torch.dtype, layers_per_stage: Sequence[int],
              result: dict, hardware: str = "cpu") -> dict:
    """The analytic cost model's JSON for the shape and split, with the measured coefficients."""
    base = json.loads(_C.plan.CostModel.analytic(model_shape_json(config, dtype), hardware,
                                                 list(layers_per_stage)).to_json())
    for key in ("a1", "a2", "b", "backward_ratio", "activation_bytes"):
        base["coefficients"][key] = result[key]
    return base


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infinipipe.profile", description=__doc__.split("\n")[0])
    tiny = llama.LlamaConfig.tiny()
    for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(tiny, name))
    p.add_argument("--layers-per-stage", type=str, default=None,
                   help="comma-separated layers per stage (default: two even stages)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float64"], default="float32")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--grid", choices=list(GRIDS), default="quick")
    p.add_argument("--output", type=Path, default=Path("cost.json"))
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    config = llama.LlamaConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers,
                               heads=args.heads, kv_heads=args.kv_heads, ffn=args.ffn, dtype=dtype)
    if args.layers_per_stage:
        split = [int(x) for x in args.layers_per_stage.split(",")]
    else:
        half = config.layers // 2
        split = [half, config.layers - half] if half else [config.layers]
    result = profile(config, args.grid, progress=not args.no_progress)
    cost = cost_json(config, dtype, split, result)
    args.output.write_text(json.dumps(cost, indent=2))
    _C.plan.CostModel.load(str(args.output))  # fail here, not in the planner
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                device=f"cpu ({platform.processor() or platform.machine()}), "
                       f"{torch.get_num_threads()} threads",
                torch=torch.__version__, grid=args.grid, dtype=args.dtype, **result)
    meta_path = args.output.with_suffix(".meta.json")
    meta_path.write_text(json.dumps(meta, indent=2))
    print(f"a1={result['a1']:.4g} a2={result['a2']:.4g} b={result['b']:.4g} "
          f"g={result['backward_ratio']:.3f} activation_bytes/token/layer={result['activation_bytes']:.0f}")
    print(f"held-out forward error: median {result['forward_heldout_median']:.1%}, "
          f"max {result['forward_heldout_max']:.1%}; backward: median "
          f"{result['backward_heldout_median']:.1%}, max {result['backward_heldout_max']:.1%}")
    print(f"wrote {args.output} and {meta_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
