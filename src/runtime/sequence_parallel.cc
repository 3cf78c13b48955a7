#include "infinipipe/runtime/sequence_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "infinipipe/core/error.h"
#include "infinipipe/runtime/next_token_loss.h"
#include "infinipipe/runtime/pipe.h"

namespace infinipipe::runtime {

namespace {

// torch 2.13 renamed c10d::ProcessGroup::alltoall_base to all_to_all_single (the old name stays,
// deprecated); torch 2.11, the GPU machine's, has only alltoall_base. Whichever the headers have,
// found by overload resolution rather than a version number (the rename's release is not pinned).
template <typename Group, typename = void>
struct HasAllToAllSingle : std::false_type {};
template <typename Group>
struct HasAllToAllSingle<
    Group, std::void_t<decltype(std::declval<Group&>().all_to_all_single(
               std::declval<at::Tensor&>(), std::declval<at::Tensor&>(),
               std::declval<std::vector<int64_t>&>(), std::declval<std::vector<int64_t>&>()))>>
    : std::true_type {};

template <typename Group>
c10::intrusive_ptr<c10d::Work> all_to_all_equal(Group& group, at::Tensor& output,
                                                at::Tensor& input) {
  std::vector<int64_t> equal;  // empty split sizes: equal parts along dim 0
  if constexpr (HasAllToAllSingle<Group>::value) {
    return group.all_to_all_single(output, input, equal, equal);
  } else {
    return group.alltoall_base(output, input, equal, equal);
  }
}

// What the exchange's backward needs: the group (alive as long as the graph) and the name.
struct ExchangeState : torch::CustomClassHolder {
  std::shared_ptr<const SequenceParallel> group;
  std::string what;
};

// all-to-all as an autograd function. With equal parts the inverse of "part i to rank i" is the
// same exchange: the gradient of what came from rank i goes back to rank i.
class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<ExchangeState> state) {
    at::Tensor in = x.contiguous();
    at::Tensor out = at::empty_like(in);
    state->group->exchange(out, in, state->what);
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state =
        c10::static_intrusive_pointer_cast<ExchangeState>(ctx->saved_data["state"].toCapsule());
    at::Tensor in = grads[0].contiguous();
    at::Tensor out = at::empty_like(in);
    state->group->exchange(out, in, state->what + " (backward)");
    return {out, at::Tensor()};
  }
};

}  // namespace

at::Tensor shard_tokens(const ShardRows& rows, const std::vector<at::Tensor>& sequences) {
  std::vector<at::Tensor> parts;
  for (const Slice& s : rows.pieces) {
    check(s.seq >= 0 && s.seq < static_cast<int>(sequences.size()) && sequences[s.seq].defined(),
          "shard_tokens: sequence " + std::to_string(s.seq) + " was not given");
    parts.push_back(sequences[s.seq].slice(0, s.start, s.end));
  }
  if (rows.padding() > 0 || parts.empty()) {
    check(!sequences.empty() && sequences[0].defined(), "shard_tokens: no sequences given");
    parts.push_back(at::zeros({rows.padding()}, sequences[0].options()));
  }
  return parts.size() == 1 ? parts[0] : at::cat(parts);
}

at::Tensor shard_targets(const ShardRows& rows, const std::vector<at::Tensor>& sequences) {
  at::Tensor targets;
  if (!rows.pieces.empty()) targets = next_token_targets(rows.pieces, sequences);
  if (rows.padding() == 0) return targets;
  check(!sequences.empty() && sequences[0].defined(), "shard_targets: no sequences given");
  at::Tensor padding = at::full({rows.padding()}, kIgnoreIndex, sequences[0].options());
  return targets.defined() ? at::cat({targets, padding}) : padding;
}

SequenceParallel::SequenceParallel(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                   SequenceParallelOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  check(group_.defined(), "sequence parallelism: the sequence group is null");
  check(options_.timeout.count() > 0, "sequence parallelism: the timeout must be positive");
  rank_ = group_->getRank();
  size_ = group_->getSize();
  stages_through_host_ = takes_host_memory_only(*group_);
  if (options_.global_ranks.empty()) {
    // Learn the members' global ranks once, for messages that name a lost peer.
    check(options_.global_rank >= 0,
          "sequence parallelism: give the members' global ranks or this rank's");
    const auto longs = at::TensorOptions().dtype(at::kLong);
    std::vector<at::Tensor> mine{at::full({1}, options_.global_rank, longs)};
    std::vector<std::vector<at::Tensor>> all{std::vector<at::Tensor>(size_)};
    for (at::Tensor& t : all[0]) t = at::empty({1}, longs);
    wait_collective(
        [&] { return group_->allgather(all, mine); }, options_.timeout,
        "all-gather of the sequence group's ranks (stage " + std::to_string(options_.stage) + ")");
    for (const at::Tensor& t : all[0]) options_.global_ranks.push_back(t.item<int64_t>());
  }
  check(static_cast<int>(options_.global_ranks.size()) == size_,
        "sequence parallelism: the sequence group has " + std::to_string(size_) + " ranks but " +
            std::to_string(options_.global_ranks.size()) + " global ranks were given");
  check(options_.global_rank < 0 || options_.global_ranks[rank_] == options_.global_rank,
        "sequence parallelism: this process is global rank " +
            std::to_string(options_.global_rank) + " but the sequence group's rank " +
            std::to_string(rank_) + " is global rank " +
            std::to_string(options_.global_ranks[rank_]));
}

std::string SequenceParallel::describe(int sequence_rank) const {
  return "rank " + std::to_string(options_.global_ranks.at(sequence_rank)) + " (sequence rank " +
         std::to_string(sequence_rank) + " of stage " + std::to_string(options_.stage) + ")";
}

void SequenceParallel::check_heads(int64_t heads, int64_t kv_heads) const {
  check(heads % size_ == 0 && kv_heads % size_ == 0,
        "sequence parallelism: the sequence-parallel degree " + std::to_string(size_) +
            " must divide both the attention heads (" + std::to_string(heads) +
            ") and the key/value heads (" + std::to_string(kv_heads) +
            "): each rank attends with heads / d_s of them; use a degree that divides " +
            std::to_string(kv_heads));
}

void SequenceParallel::exchange(at::Tensor& out, const at::Tensor& in,
                                const std::string& what) const {
  check(in.is_contiguous() && out.is_contiguous() && in.dim() >= 1 && in.size(0) == size_ &&
            out.sizes() == in.sizes(),
        "sequence parallelism: an all-to-all needs contiguous [" + std::to_string(size_) +
            ", ...] tensors");
  const auto started = std::chrono::steady_clock::now();
  // With two ranks the one peer is named; with more, any of them may be the one missing.
  const int peer = size_ == 2 ? 1 - rank_ : -1;
  std::string peer_text;
  if (size_ == 2) {
    peer_text = describe(peer);
  } else {
    std::string ranks;
    for (int g : options_.global_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(g);
    peer_text = "one of ranks " + ranks + " (the sequence group of stage " +
                std::to_string(options_.stage) + ")";
  }
  const bool staged = in.is_cuda() && stages_through_host_;
  at::Tensor output = staged ? at::empty_like(out, out.options().device(at::kCPU)) : out;
  at::Tensor input = staged ? in.cpu() : in;
  wait_collective([&] { return all_to_all_equal(*group_, output, input); }, options_.timeout,
                  "all-to-all of " + what, size_ == 2 ? options_.global_ranks[peer] : -1,
                  peer_text);
  if (staged) out.copy_(output);
  exchange_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - started)
                      .count();
  exchange_bytes_ += static_cast<int64_t>(in.nbytes() / size_ * (size_ - 1));
}

at::Tensor SequenceParallel::all_to_all(const at::Tensor& x, const std::string& what) const {
  auto state = c10::make_intrusive<ExchangeState>();
  state->group = shared_from_this();
  state->what = what;
  return AllToAllFunction::apply(x, std::move(state));
}

at::Tensor SequenceParallel::attention(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const std::vector<Slice>& slices,
                                       const ShardRows& rows, const kernels::SliceBuffers& kv,
                                       double scale, kernels::Backend backend,
                                       const std::string& what) const {
  const int64_t n = size_, local = rows.local;
  check(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes() &&
            q.size(0) == local && k.size(0) == local && q.size(2) == k.size(2),
        "sequence parallelism: " + what + ": q must be [" + std::to_string(local) +
            ", heads, d] and k, v [" + std::to_string(local) + ", kv_heads, d] (this rank's rows)");
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(2);
  check_heads(heads, kv_heads);
  const int64_t h = heads / n, kvh = kv_heads / n, width = h + 2 * kvh;
  // One exchange for q, k and v: the part for rank i holds its heads of each, side by side.
  // [local, heads, d] -> [n, local, heads / n, d]: head i * (heads / n) + c is rank i's c-th.
  auto by_rank = [&](const at::Tensor& x) {
    return x.reshape({local, n, x.size(1) / n, d}).transpose(0, 1);
  };
  at::Tensor packed = at::cat({by_rank(q), by_rank(k), by_rank(v)}, 2).contiguous();
  // Part i came from rank i: its rows, this rank's heads; in rank order they are the padded rows.
  at::Tensor gathered =
      all_to_all(packed, what).reshape({rows.padded, width, d}).narrow(0, 0, rows.tokens);
  at::Tensor out = kernels::chunk_attention(
      gathered.narrow(1, 0, h).contiguous(), gathered.narrow(1, h, kvh).contiguous(),
      gathered.narrow(1, h + kvh, kvh).contiguous(), slices, kv, scale, backend);  // [T, h, d]
  if (rows.padded > rows.tokens)
    out = at::cat({out, at::zeros({rows.padded - rows.tokens, h, d}, out.options())});
  // Back: part i (rank i's rows) goes to rank i; part i received holds rank i's heads.
  at::Tensor back = all_to_all(out.reshape({n, local, h, d}).contiguous(), what);
  return back.transpose(0, 1).reshape({local, heads, d});
}

}  // namespace infinipipe::runtime
