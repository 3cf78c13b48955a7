#include "infinipipe/runtime/pipe.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <ATen/ATen.h>

#include "infinipipe/core/error.h"
#include "infinipipe/core/log.h"

namespace infinipipe::runtime {

int message_tag(int chunk, Direction direction) {
  check(chunk >= 0, "message_tag: chunk must be non-negative, got " + std::to_string(chunk));
  return kDirections * chunk + static_cast<int>(direction);
}

bool takes_host_memory_only(const c10d::ProcessGroup& group) {
  return group.getBackendName() == "gloo";
}

std::string format_duration(std::chrono::milliseconds duration) {
  const double ms = static_cast<double>(duration.count());
  std::ostringstream os;
  if (ms < 1000) {
    os << ms << " ms";
  } else {
    os << ms / 1000 << " s";
  }
  return os.str();
}

Pipes::Pipes(c10::intrusive_ptr<c10d::ProcessGroup> group, std::chrono::milliseconds timeout,
             std::function<std::string(int rank)> describe_peer)
    : group_(std::move(group)), timeout_(timeout), describe_peer_(std::move(describe_peer)) {
  check(group_.defined(), "Pipes: the process group is null");
  check(timeout_.count() > 0, "Pipes: the timeout must be positive");
  if (!describe_peer_) describe_peer_ = [](int rank) { return "rank " + std::to_string(rank); };
  stages_through_host_ = takes_host_memory_only(*group_);
}

void Pipes::post_recv(int tag, at::Tensor buffer, int from_rank) {
  check(recvs_.count(tag) == 0, "Pipes: a receive with tag " + std::to_string(tag) +
                                    " is already pending (the schedule posts it twice)");
  Pending op;
  if (stages_through_host_ && buffer.is_cuda()) {
    op.device_buffer = buffer;
    buffer = at::empty(buffer.sizes(), buffer.options().device(at::kCPU));
  }
  std::vector<at::Tensor> tensors{buffer};
  op.work = start([&] { return group_->recv(tensors, from_rank, tag); }, from_rank, tag, "send");
  op.tensor = std::move(buffer);
  op.peer = from_rank;
  op.tag = tag;
  recvs_.emplace(tag, std::move(op));
}

at::Tensor Pipes::wait_recv(int tag) {
  auto it = recvs_.find(tag);
  check(it != recvs_.end(), "Pipes: no receive with tag " + std::to_string(tag) +
                                " was posted (the schedule computes before its RECV)");
  Pending op = std::move(it->second);
  recvs_.erase(it);
  wait(op, "send");
  bytes_received_ += static_cast<int64_t>(op.tensor.nbytes());
  if (op.device_buffer.defined()) return op.device_buffer.copy_(op.tensor);
  return op.tensor;
}

void Pipes::send(int tag, const at::Tensor& tensor, int to_rank) {
  reap_sends();
  // The host copy waits for the kernels that computed the tensor.
  at::Tensor contiguous = stages_through_host_ && tensor.is_cuda()
                              ? tensor.contiguous().to(at::kCPU)
                              : tensor.contiguous();
  std::vector<at::Tensor> tensors{contiguous};
  Pending op;
  op.work = start([&] { return group_->send(tensors, to_rank, tag); }, to_rank, tag, "receive");
  op.tensor = std::move(contiguous);
  op.peer = to_rank;
  op.tag = tag;
  bytes_sent_ += static_cast<int64_t>(op.tensor.nbytes());
  sends_.push_back(std::move(op));
}

void Pipes::reap_sends() {
  std::vector<Pending> still;
  for (Pending& op : sends_) {
    if (op.work->isCompleted()) {
      // A completed send that failed must not be dropped silently.
      if (!op.work->isSuccess()) wait(op, "receive");
    } else {
      still.push_back(std::move(op));
    }
  }
  sends_ = std::move(still);
}

void Pipes::wait_sends() {
  std::vector<Pending> sends = std::move(sends_);
  sends_.clear();
  for (const Pending& op : sends) wait(op, "receive");
}

namespace {

// What a backend's error says in a few words: its first sentence, without the "[file:line] "
// prefix Gloo puts in front or the advice that follows (the full text goes to
// PeerError::backend_detail).
std::string short_detail(const std::string& detail) {
  std::string line = detail.substr(0, detail.find('\n'));
  if (!line.empty() && line.front() == '[') {
    const auto close = line.find("] ");
    if (close != std::string::npos) line = line.substr(close + 2);
  }
  return line.substr(0, line.find(". "));
}

// The backend's whole message (stack traces included) goes to the debug log only: the error
// carries its first sentence (docs/design.md, "Failures").
PeerError logged(PeerError error) {
  if (log::enabled(log::Level::kDebug))
    log::debug(std::string(error.what()) + "; the backend said: " + error.backend_detail());
  return error;
}

}  // namespace

void wait_collective(const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
                     std::chrono::milliseconds timeout, const std::string& what, int peer,
                     const std::string& peer_text) {
  const auto started = std::chrono::steady_clock::now();
  std::string detail;
  try {
    if (op()->wait(timeout)) return;
    detail = "the collective was aborted";
  } catch (const std::exception& e) {
    detail = e.what();
  }
  const bool timed_out =
      std::chrono::steady_clock::now() - started + std::chrono::milliseconds(50) >= timeout;
  const std::string who = peer_text.empty()
                              ? "another rank may have died or failed; check the other ranks' logs"
                              : peer_text + " may have died, hung or failed; check its log";
  throw logged(PeerError("the " + what + " " +
                             (timed_out ? "did not complete within " + format_duration(timeout)
                                        : std::string("failed")) +
                             ": " + who + " (" + short_detail(detail) + ")",
                         peer, detail, timed_out));
}

c10::intrusive_ptr<c10d::Work> Pipes::start(
    const std::function<c10::intrusive_ptr<c10d::Work>()>& op, int peer, int tag,
    const char* what) {
  try {
    return op();
  } catch (const std::exception& e) {
    throw logged(PeerError("lost the connection to " + describe_peer_(peer) + " before it could " +
                               what + " (message tag " + std::to_string(tag) +
                               "): it may have died or failed; check its log (" +
                               short_detail(e.what()) + ")",
                           peer, e.what(), false));
  }
}

double Pipes::all_reduce_sum(double value, at::Device device, const std::string& what) {
  if (stages_through_host_) device = at::kCPU;  // a scalar: no reason to ask Gloo for CUDA
  std::vector<at::Tensor> tensors{
      at::full({1}, value, at::TensorOptions().dtype(at::kDouble).device(device))};
  wait_collective([&] { return group_->allreduce(tensors); }, timeout_, what);
  return tensors[0].item<double>();
}

std::vector<std::string> Pipes::all_gather_text(const std::string& mine, at::Device device) {
  if (stages_through_host_) device = at::kCPU;  // bytes made on the host and read back there
  const int ranks = group_->getSize();
  // Lengths first, so every rank pads its bytes to the longest (all_gather needs equal shapes).
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  std::vector<at::Tensor> length{at::full({1}, static_cast<int64_t>(mine.size()), longs)};
  std::vector<std::vector<at::Tensor>> lengths{std::vector<at::Tensor>(ranks)};
  for (at::Tensor& t : lengths[0]) t = at::empty({1}, longs);
  wait_collective([&] { return group_->allgather(lengths, length); }, timeout_,
                  "all-gather of the step's agreement");
  std::vector<int64_t> sizes(ranks);
  int64_t longest = 0;
  for (int r = 0; r < ranks; ++r) {
    sizes[r] = lengths[0][r].item<int64_t>();
    longest = std::max(longest, sizes[r]);
  }

  at::Tensor padded = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::memcpy(padded.data_ptr<uint8_t>(), mine.data(), mine.size());
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(device);
  std::vector<at::Tensor> input{padded.to(device)};
  std::vector<std::vector<at::Tensor>> outputs{std::vector<at::Tensor>(ranks)};
  for (at::Tensor& t : outputs[0]) t = at::empty({padded.numel()}, bytes);
  wait_collective([&] { return group_->allgather(outputs, input); }, timeout_,
                  "all-gather of the step's agreement");
  std::vector<std::string> texts(ranks);
  for (int r = 0; r < ranks; ++r) {
    const at::Tensor host = outputs[0][r].cpu();
    texts[r].assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), sizes[r]);
  }
  return texts;
}

void Pipes::clear() {
  recvs_.clear();
  sends_.clear();
}

void Pipes::wait(const Pending& op, const char* what) {
  const auto started = std::chrono::steady_clock::now();
  std::string detail;
  try {
    if (op.work->wait(timeout_)) return;
    detail = "the transfer was aborted";
  } catch (const std::exception& e) {
    detail = e.what();
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  const std::string peer = describe_peer_(op.peer);
  const bool timed_out = waited + std::chrono::milliseconds(50) >= timeout_;
  std::string message;
  if (timed_out) {
    message = peer + " did not " + what + " within " + format_duration(timeout_) +
              " (message tag " + std::to_string(op.tag) +
              "): it may have died, hung or be much slower than this rank; check its log, or "
              "raise the timeout if its work legitimately takes longer";
  } else {
    message = "lost the connection to " + peer + " while waiting for it to " + what +
              " (message tag " + std::to_string(op.tag) +
              "): it may have died or failed; check its log";
  }
  throw logged(PeerError(message + " (" + short_detail(detail) + ")", op.peer, detail, timed_out));
}

}  // namespace infinipipe::runtime
