"""Measures the numbers of the built-in "cpu" hardware description (src/cost/hardware.cc).

Run with the project venv:  /work/venv/bin/python benchmarks/measure_cpu.py
Shapes are those of the "tiny" model (hidden 128, 4 heads, 2 KV heads, ffn 352, fp32). One
thread per process, because the CPU examples run one pipeline stage per core.
"""

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HIDDEN, HEADS, KV_HEADS, FFN = 128, 4, 2, 352
HEAD_DIM = HIDDEN // HEADS
KV_DIM = KV_HEADS * HEAD_DIM
# (in, out) of the layer's seven GEMMs: q, k, v, o, gate, up, down.
GEMMS = [
    (HIDDEN, HIDDEN),
    (HIDDEN, KV_DIM),
    (HIDDEN, KV_DIM),
    (HIDDEN, HIDDEN),
    (HIDDEN, FFN),
    (HIDDEN, FFN),
    (FFN, HIDDEN),
]
LINEAR_FLOPS_PER_TOKEN = 2 * sum(i * o for i, o in GEMMS)


def best_time(fn, repeats=15, min_seconds=0.05):
    """Fastest of `repeats` timings: other jobs on the machine only ever add time."""
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        samples.append(elapsed / n)
    return min(samples)


def gemm_flops(tokens):
    xs = {i: torch.randn(tokens, i) for i, _ in GEMMS}
    ws = [torch.randn(i, o) for i, o in GEMMS]

    def run():
        for (i, _), w in zip(GEMMS, ws):
            torch.mm(xs[i], w)

    return LINEAR_FLOPS_PER_TOKEN * tokens / best_time(run)


def attention_flops(tokens):
    q = torch.randn(1, HEADS, tokens, HEAD_DIM)
    k = torch.randn(1, HEADS, tokens, HEAD_DIM)  # KV heads already expanded for GQA
    v = torch.randn(1, HEADS, tokens, HEAD_DIM)

    def run():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    # Same count as the cost model: 4*hidden FLOPs per (query, key) pair, T(T+1)/2 pairs.
    return 4 * HIDDEN * tokens * (tokens + 1) / 2 / best_time(run)


class Layer(torch.nn.Module):
    """A LLaMA decoder layer (RMSNorm, GQA attention with rotary, SwiGLU) in plain torch."""

    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.RMSNorm(HIDDEN)
        self.norm2 = torch.nn.RMSNorm(HIDDEN)
        self.q, self.k, self.v, self.o, self.gate, self.up, self.down = (
            torch.nn.Linear(i, o, bias=False) for i, o in GEMMS
        )

    @staticmethod
    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def forward(self, x):
        t = x.shape[0]
        h = self.norm1(x)
        q = self.q(h).view(t, HEADS, HEAD_DIM).transpose(0, 1)
        k = self.k(h).view(t, KV_HEADS, HEAD_DIM).transpose(0, 1)
        v = self.v(h).view(t, KV_HEADS, HEAD_DIM).transpose(0, 1)
        pos = torch.arange(t, dtype=torch.float32)[:, None]
        inv = 10000 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        angle = torch.cat((pos * inv, pos * inv), dim=-1)
        q, k = self.rotate(q, angle.cos(), angle.sin()), self.rotate(k, angle.cos(), angle.sin())
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=0)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(0, 1).reshape(t, HIDDEN))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def layer_overhead(peak, attention_rate, tokens=8):
    layer = Layer()
    x = torch.randn(tokens, HIDDEN)
    with torch.no_grad():
        elapsed = best_time(lambda: layer(x))
    flop_time = (
        LINEAR_FLOPS_PER_TOKEN * tokens / peak
        + 4 * HIDDEN * tokens * (tokens + 1) / 2 / attention_rate
    )
    return elapsed - flop_time, elapsed


def p2p_worker(rank, sizes, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=2)
    results = {}
    for n in sizes:
        buf = torch.zeros(n // 4, dtype=torch.float32)

        def ping_pong():
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)

        for _ in range(3):
            ping_pong()
        samples = []
        for _ in range(9):
            dist.barrier()
            reps = 20
            start = time.perf_counter()
            for _ in range(reps):
                ping_pong()
            samples.append((time.perf_counter() - start) / reps / 2)  # one direction
        results[n] = min(samples)
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def p2p():
    sizes = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=p2p_worker, args=(r, sizes, queue)) for r in range(2)]
    for p in procs:
        p.start()
    times = queue.get()
    for p in procs:
        p.join()
    # t = latency + bytes / bandwidth: the slope between the two largest messages gives the
    # bandwidth, the small messages (nearly all latency) then give the latency. A least-squares
    # fit over all sizes would let the large messages' noise swamp the latency.
    big1, big2 = sizes[-2], sizes[-1]
    bandwidth = (big2 - big1) / (times[big2] - times[big1])
    latency = min(times[n] - n / bandwidth for n in sizes[:2])
    return bandwidth, latency, times


def main():
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpu {os.cpu_count()}")
    rates = {t: gemm_flops(t) for t in (64, 256, 1024, 4096, 16384)}
    for t, r in rates.items():
        print(f"gemm tokens={t:6d}: {r / 1e9:7.2f} GFLOP/s")
    peak = max(rates.values())
    att = {t: attention_flops(t) for t in (256, 1024, 4096)}
    for t, r in att.items():
        print(f"attention tokens={t:6d}: {r / 1e9:7.2f} GFLOP/s")
    attention_rate = att[4096]
    overhead, elapsed = layer_overhead(peak, attention_rate)
    print(f"peak_flops = {peak:.4g}")
    print(f"attention_efficiency = {attention_rate / peak:.3f}")
    print(f"layer_overhead_s = {overhead:.4g}  (8-token layer forward {elapsed:.4g} s)")
    bandwidth, latency, times = p2p()
    for n, t in times.items():
        print(f"p2p {n:9d} B: {t * 1e6:9.1f} us")
    print(f"link_bandwidth = {bandwidth:.4g}")
    print(f"link_latency_s = {latency:.4g}")


if __name__ == "__main__":
    main()
