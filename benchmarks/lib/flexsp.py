"""FlexSP (Wang et al., ASPLOS 2025, arXiv 2412.01523), simulated on the planning core's cost
model, and homogeneous Ulysses SP on the same machinery: peers for the FlexSP study
(benchmarks/experiments/flexsp_study.py, docs/cluster_study.md "Against FlexSP (simulated)").

No pipeline: N GPUs, model state ZeRO-3 over all N. A step's batch is cut into micro-batches
(FlexSP's "sequence blaster", as read here: the fewest micro-batches whose tokens fit the
cluster's memory, cost-balanced, and one or two more if that is faster); for each micro-batch
the GPUs are split into Ulysses groups of power-of-two sizes d (dividing the heads, at most N)
and every sequence goes to one group. A group runs its sequences as one packed chunk of the
whole model (forward and backward) with d-way Ulysses; every rank of the cluster gathers each
layer's parameters together (ZeRO-3), so a micro-batch ends with its slowest group and the
step is the sum of its micro-batches. The group sizes and the assignment come from a MILP per
micro-batch (FlexSP's formulation as read here, over length buckets; solved by CBC through
PuLP with a time limit); homogeneous SP fixes the groups at one size and balances the
assignment greedily (longest processing time).

Every time and byte is the C++ cost model's (`_C.plan.CostModel.analytic` with a one-stage
layout: sequence = d, data = N / d, ZeRO-3, so model state is sharded over the N GPUs), read
through `build_plan` on a one-chunk plan: compute / d, the all-to-alls over NVLink when d fits
a node and over InfiniBand otherwise, the per-layer overhead, embedding and LM head.
"""

import json
import math
import sys

from infinipipe import _C

P = _C.plan
GIB = float(1 << 30)

# LLaMA shapes as the plan tool has them (src/cost/model_shape.cc, Touvron et al. 2023, Table 2).
SHAPES = {
    "llama-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008),
    "llama-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824),
    "llama-30b": dict(layers=60, hidden=6656, heads=52, kv_heads=52, ffn=17920),
}


def shape_json(model):
    s = SHAPES[model]
    return json.dumps(dict(name=model, vocab=32000, bytes_per_element=2, **s))


def parameters(model):
    """Parameter count of a LLaMA shape: attention 4 h^2, MLP 3 h ffn, two norms per layer; the
    embedding and the untied LM head."""
    s = SHAPES[model]
    h = s["hidden"]
    return s["layers"] * (4 * h * h + 3 * h * s["ffn"] + 2 * h) + 2 * 32000 * h + h


def group_sizes(model, n_gpus):
    """Ulysses group sizes FlexSP may use: powers of two up to N dividing the (KV) heads."""
    s = SHAPES[model]
    d, out = 1, []
    while d <= n_gpus:
        if s["heads"] % d == 0 and s["kv_heads"] % d == 0:
            out.append(d)
        d *= 2
    return out


class GroupCost:
    """One rank of a d-GPU Ulysses group running the whole model, ZeRO-3 over n_gpus."""

    def __init__(self, model, d, n_gpus, budget_bytes, recompute=False, gpus_per_node=8):
        self.d = d
        self.layers = SHAPES[model]["layers"]
        self.recompute = recompute
        self.cost = P.CostModel.analytic(
            shape_json(model),
            "a800",
            [self.layers],
            sequence=d,
            data=n_gpus // d,
            zero=3,
            gpus_per_node=gpus_per_node,
        )
        self.budget = budget_bytes
        self.state = self.cost.model_state_bytes(0)
        self._time = {}
        # Peak memory is affine in the chunk's tokens (activations, K/V, logits per token):
        # two probes give the slope, used by the MILP; chunks are checked exactly.
        lo, hi = 1024, 8192
        p_lo, p_hi = self.evaluate([lo])[1], self.evaluate([hi])[1]
        self.bytes_per_token = (p_hi - p_lo) / (hi - lo)
        self.fixed_bytes = p_lo - lo * self.bytes_per_token
        self.token_capacity = max(0, int((budget_bytes - self.fixed_bytes) / self.bytes_per_token))
        # A packed chunk's time is a fixed part (per-layer overheads, all-to-all latencies) plus
        # each sequence's own. With a size-aware GPU a sequence's own part depends on the chunk
        # it joins (a bigger GEMM runs faster): it is taken as what it adds to a chunk of `hi`
        # tokens, so that a short sequence is not charged the penalty of running alone.
        self.reference = hi
        self._work = {}
        self.fixed_s = self.seconds(hi) - self.work(hi)

    def evaluate(self, lengths):
        """(seconds, peak bytes) of one rank running these sequences as one packed chunk."""
        chunk = [(i, 0, n) for i, n in enumerate(lengths)]
        rec = [[self.layers]] if self.recompute else []
        plan = P.build_plan(list(lengths), [chunk], [[0]], self.cost, rec)
        return plan.step_time_s, plan.predicted_peaks(self.cost)[0]

    def seconds(self, n):
        """One sequence alone (its own chunk); cached."""
        if n not in self._time:
            self._time[n] = self.evaluate([n])[0]
        return self._time[n]

    def work(self, n):
        """A sequence's part of a packed chunk's time: what it adds to a chunk of `reference`
        tokens; cached."""
        if n not in self._work:
            self._work[n] = self.evaluate([self.reference, n])[0] - self.seconds(self.reference)
        return self._work[n]

    def fits(self, tokens):
        return tokens <= self.token_capacity


def buckets(lengths, count):
    """FlexSP-style length buckets: the lengths sorted decreasing, cut into at most `count`
    contiguous runs of about equal tokens (a long sequence is then a bucket of its own). Returns
    lists of indices into `lengths`."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    total = sum(lengths)
    target = total / count
    out, run, acc = [], [], 0
    for i in order:
        run.append(i)
        acc += lengths[i]
        if acc >= target * (len(out) + 1) and len(out) < count - 1:
            out.append(run)
            run = []
    if run:
        out.append(run)
    return out


def mean_time(cost, lengths, members):
    return sum(cost.work(lengths[i]) for i in members) / len(members)


def solve_milp(lengths, costs, n_gpus, bucket_count, time_limit_s):
    """FlexSP's per-micro-batch program, as read here. Variables: u_g (group slot g of size d_g
    used), x_bg (sequences of bucket b in slot g, integer), T. Minimise T subject to: every
    bucket's sequences placed; sum_b x_bg t_b(d_g) <= T (t_b: the bucket's mean time at d_g);
    sum_b x_bg L_b <= C(d_g) u_g (L_b: the bucket's longest length, C: the group's token
    capacity, so the memory constraint holds for any sequence of the bucket); sum_g d_g u_g
    <= N. Returns {slot size: [sequence indices]} per used slot as a list of (d, indices), or
    None when infeasible or unsolved."""
    import pulp

    bs = buckets(lengths, bucket_count)
    sizes = sorted(costs)
    slots = []
    for d in sizes:
        for k in range(min(n_gpus // d, len(lengths))):
            slots.append((d, k))
    prob = pulp.LpProblem("flexsp", pulp.LpMinimize)
    T = pulp.LpVariable("T", lowBound=0)
    u = {g: pulp.LpVariable("u_%d_%d" % g, cat="Binary") for g in slots}
    x = {}
    tokens = [sum(lengths[i] for i in members) for members in bs]
    for b, members in enumerate(bs):
        longest = max(lengths[i] for i in members)
        for g in slots:
            if costs[g[0]].fits(longest):
                x[b, g] = pulp.LpVariable("x_%d_%d_%d" % (b, *g), 0, len(members), cat="Integer")
        if not any((b, g) in x for g in slots):
            return None  # a sequence fits no group: more micro-batches will not help
    prob += T
    for b, members in enumerate(bs):
        prob += pulp.lpSum(x[b, g] for g in slots if (b, g) in x) == len(members)
    for g in slots:
        d = g[0]
        terms = [(b, x[b, g]) for b in range(len(bs)) if (b, g) in x]
        mean_t = {b: mean_time(costs[d], lengths, bs[b]) for b, _ in terms}
        prob += costs[d].fixed_s * u[g] + pulp.lpSum(v * mean_t[b] for b, v in terms) <= T
        prob += (
            pulp.lpSum(v * (tokens[b] / len(bs[b])) for b, v in terms)
            <= costs[d].token_capacity * u[g]
        )
        if g[1] > 0:  # symmetry: slots of one size are used in order
            prob += u[g] <= u[(d, g[1] - 1)]
    prob += pulp.lpSum(g[0] * u[g] for g in slots) <= n_gpus
    # The area bound (implied by the constraints above for integer u; it tightens the LP
    # relaxation): each group's d GPUs are busy for its load, which is at most T.
    prob += (
        pulp.lpSum(g[0] * v * mean_time(costs[g[0]], lengths, bs[b]) for (b, g), v in x.items())
        + pulp.lpSum(g[0] * costs[g[0]].fixed_s * u[g] for g in slots)
        <= n_gpus * T
    )
    # Warm start: the best homogeneous assignment (one group size, longest processing time), so
    # the solver's answer within its time limit is never worse than homogeneous SP's.
    bucket_of = {i: b for b, members in enumerate(bs) for i in members}
    start = None
    for d in sizes:
        groups = lpt_groups(lengths, costs[d], n_gpus // d)
        if groups is None:
            continue
        counts = {}
        for k, (_, idx) in enumerate(groups):
            for i in idx:
                key = (bucket_of[i], (d, k))
                counts[key] = counts.get(key, 0) + 1
        if any(key not in x for key in counts):
            continue
        loads = [
            costs[d].fixed_s
            + sum(
                c * mean_time(costs[d], lengths, bs[b])
                for (b, g), c in counts.items()
                if g == (d, k)
            )
            for k in range(len(groups))
        ]
        if start is None or max(loads) < start[0]:
            start = (max(loads), d, len(groups), counts)
    if start is not None:
        T.setInitialValue(start[0])
        for g in slots:
            u[g].setInitialValue(1 if g[0] == start[1] and g[1] < start[2] else 0)
        for key, v in x.items():
            v.setInitialValue(start[3].get(key, 0))
    solver = pulp.PULP_CBC_CMD(
        msg=False, timeLimit=time_limit_s, threads=1, warmStart=start is not None
    )
    try:
        prob.solve(solver)
    except pulp.PulpSolverError as e:
        # Seen once in a 16-step run on a loaded 2-core machine: the CBC binary ended without a
        # solution file. Solved again, cold; a second failure stops the study (dropping FlexSP's
        # MILP would leave it weaker than it is).
        print("flexsp: CBC failed (%s); solving again without the warm start" % e, file=sys.stderr)
        prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=1))
    if pulp.LpStatus[prob.status] != "Optimal" and T.value() is None:
        return None
    if any(v.value() is None for v in x.values()):
        return None
    # Disaggregate: each bucket's sequences, longest first, to the slot with quota left and the
    # least load so far.
    groups = {g: [] for g in slots if u[g].value() > 0.5}
    load = {g: 0.0 for g in groups}
    held = {g: 0 for g in groups}
    for b, members in enumerate(bs):
        quota = {g: round(x[b, g].value()) for g in groups if (b, g) in x}
        for i in sorted(members, key=lambda i: (-lengths[i], i)):
            open_ = [g for g in quota if quota[g] > 0 and costs[g[0]].fits(held[g] + lengths[i])]
            if not open_:  # the quotas of the bucket's mean length overflow a group: any room
                open_ = [
                    g for g in groups if (b, g) in x and costs[g[0]].fits(held[g] + lengths[i])
                ]
            if not open_:
                return None
            g = min(open_, key=lambda g: (load[g], g))
            groups[g].append(i)
            held[g] += lengths[i]
            quota[g] = quota.get(g, 0) - 1
            load[g] += costs[g[0]].work(lengths[i])
    return [(g[0], idx) for g, idx in groups.items() if idx]


def flexsp_groups(lengths, costs, n_gpus, bucket_count, time_limit_s):
    """The MILP's groups, or the best homogeneous assignment (its warm start) when that is
    faster by the exact cost model (the buckets' means can mislead the MILP)."""
    candidates = [solve_milp(lengths, costs, n_gpus, bucket_count, time_limit_s)]
    candidates += [lpt_groups(lengths, costs[d], n_gpus // d) for d in costs]
    best = None
    for groups in candidates:
        done = evaluate_groups(lengths, groups, costs) if groups else None
        if done is not None and (best is None or done[0] < best[0]):
            best = (done[0], groups)
    return best[1] if best else None


def lpt_groups(lengths, cost, count):
    """Homogeneous SP: `count` groups of one size, sequences longest-processing-time first to
    the least-loaded group that has memory left. None when one does not fit."""
    loads, tokens, groups = [0.0] * count, [0] * count, [[] for _ in range(count)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        ok = [j for j in range(count) if cost.fits(tokens[j] + lengths[i])]
        if not ok:
            return None
        j = min(ok, key=lambda j: (loads[j], j))
        groups[j].append(i)
        loads[j] += cost.work(lengths[i])
        tokens[j] += lengths[i]
    return [(cost.d, g) for g in groups if g]


def micro_batches(lengths, m, weight):
    """The step's sequences in m micro-batches: longest processing time on `weight`."""
    loads, out = [0.0] * m, [[] for _ in range(m)]
    for i in sorted(range(len(lengths)), key=lambda i: (-weight(lengths[i]), i)):
        j = min(range(m), key=lambda j: (loads[j], j))
        out[j].append(i)
        loads[j] += weight(lengths[i])
    return [sorted(b) for b in out if b]


def evaluate_groups(lengths, groups, costs):
    """Exact (cost model) time of a micro-batch, its slowest group's, and the largest peak per
    rank; None if a group overflows its memory."""
    worst, top = 0.0, 0.0
    for d, idx in groups:
        t, peak = costs[d].evaluate([lengths[i] for i in idx])
        if peak > costs[d].budget * (1 + 1e-9):
            return None
        worst, top = max(worst, t), max(top, peak)
    return worst, top


def plan_step(lengths, costs, n_gpus, assign, recompute_costs=None, extra_micro_batches=1):
    """A step's best schedule over the micro-batch counts tried: dict with step_time_s,
    micro_batches, groups (per micro-batch, the sizes of its groups), recomputed_micro_batches;
    None when nothing fits. `assign(sub_lengths, costs)` returns the micro-batch's groups (d,
    indices) or None; a micro-batch that does not fit without recompute is planned with
    `recompute_costs` (every layer checkpointed) when given."""
    d1 = min(costs)
    capacity = (n_gpus // d1) * costs[d1].token_capacity  # tokens the cluster holds at once
    first = max(1, math.ceil(sum(lengths) / capacity))
    best, tried = None, 0
    m = first
    while m <= len(lengths) and tried <= extra_micro_batches:
        parts = micro_batches(lengths, m, costs[d1].work)
        total, peak, shapes, recomputed = 0.0, 0.0, [], 0
        for part in parts:
            sub = [lengths[i] for i in part]
            groups = assign(sub, costs)
            done = evaluate_groups(sub, groups, costs) if groups else None
            if done is None and recompute_costs and recompute_costs is not costs:
                groups = assign(sub, recompute_costs)
                done = evaluate_groups(sub, groups, recompute_costs) if groups else None
                recomputed += 1
            if done is None:
                total = None
                break
            total += done[0]
            recomputed += costs[min(costs)].recompute
            peak = max(peak, done[1])
            shapes.append(sorted((d for d, _ in groups), reverse=True))
        if total is not None:
            tried += 1
            if best is None or total < best["step_time_s"]:
                best = dict(
                    step_time_s=total,
                    micro_batches=len(parts),
                    groups=shapes,
                    peak_bytes=peak,
                    recomputed_micro_batches=recomputed,
                )
        elif best is None and m > first + 8:
            break
        m += 1
    return best


def flexsp_step(lengths, costs, n_gpus, bucket_count=16, time_limit_s=1.0, recompute_costs=None):
    return plan_step(
        lengths,
        costs,
        n_gpus,
        lambda sub, c: flexsp_groups(sub, c, n_gpus, bucket_count, time_limit_s),
        recompute_costs,
    )


def ulysses_step(lengths, cost, n_gpus, recompute_cost=None):
    return plan_step(
        lengths,
        {cost.d: cost},
        n_gpus,
        lambda sub, c: lpt_groups(sub, c[cost.d], n_gpus // cost.d),
        {cost.d: recompute_cost} if recompute_cost else None,
    )
