#pragma once
// Point-to-point pipes between pipeline stages over a c10d process group (Gloo on CPU, NCCL on
// GPU: the code only sees c10d::ProcessGroup). Shapes come from the plan, so a receive is posted
// into a buffer the caller allocated and no shape handshake travels.
//
// Every message of a step has its own tag, derived from (chunk, direction), so a receive can
// never match the wrong message whatever order the backend matches in (Gloo matches by tag;
// NCCL ignores tags and matches in order, which the validated schedule keeps consistent).
//
// Every wait is bounded by a timeout. A timeout or a backend error (a peer that died closes its
// connections), whether the backend reports it when the operation starts or when it is waited
// for, becomes a PeerError naming the peer, so no rank hangs on a lost peer and no backend error
// leaks raw. The backend's own text stays out of the message (it carries source paths and, with
// some backends, stack traces) and is kept in PeerError::backend_detail for a debug log.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe::runtime {

// A wait on other ranks that failed. `rank` is the peer this rank was waiting for, or -1 for a
// collective (any rank may be the one missing). The trainer uses it to find the rank that was
// lost first (docs/design.md, "Failures").
class PeerError : public Error {
 public:
  PeerError(const std::string& message, int rank, std::string backend_detail, bool timed_out)
      : Error(message),
        rank_(rank),
        backend_detail_(std::move(backend_detail)),
        timed_out_(timed_out) {}
  int rank() const { return rank_; }
  const std::string& backend_detail() const { return backend_detail_; }
  // The wait ran out its timeout (the peer is silent: stopped, hung or slow), rather than
  // failing early (its connection closed: it exited or died).
  bool timed_out() const { return timed_out_; }

 private:
  int rank_;
  std::string backend_detail_;
  bool timed_out_;
};

// What a message carries; each has its own tags, so no receive matches another kind's message.
// kHeadHidden and kHeadGradient are the spread head's (docs/design.md, "Spread head"): a chunk's
// last hidden state from the last stage to its head stage, and that state's gradient back.
enum class Direction {
  kActivation = 0,
  kGradient = 1,
  kTiedGradient = 2,
  kHeadHidden = 3,
  kHeadGradient = 4,
};
constexpr int kDirections = 5;  // the values of Direction

// Starts a collective with `op` and waits for it at most `timeout`. A timeout or a backend error,
// thrown when it starts or when it is waited for, becomes a PeerError about `what` naming
// `peer_text` and carrying `peer` (-1 with an empty text: any rank of the group may be the one
// missing). Pipes' collectives and the sequence-parallel all-to-all (sequence_parallel.h) use it.
void wait_collective(const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
                     std::chrono::milliseconds timeout, const std::string& what, int peer = -1,
                     const std::string& peer_text = "");

// Whether the group's backend takes host memory only for point-to-point messages and
// all-to-alls (Gloo; its all-reduce copies CUDA tensors itself: torch.distributed's backend
// table), so a CUDA tensor goes through a host copy on each side (ranks sharing a GPU;
// docs/runtime.md).
bool takes_host_memory_only(const c10d::ProcessGroup& group);

// Tag of the message carrying chunk `chunk`'s activation (forward), input gradient (backward),
// head hidden state or head gradient, or, for kTiedGradient, the gradient of tied weight number
// `chunk`.
int message_tag(int chunk, Direction direction);

class Pipes {
 public:
  // describe_peer(rank) names a peer in error messages, e.g. "rank 1 (stage 1)".
  Pipes(c10::intrusive_ptr<c10d::ProcessGroup> group, std::chrono::milliseconds timeout,
        std::function<std::string(int rank)> describe_peer);
  Pipes(const Pipes&) = delete;
  Pipes& operator=(const Pipes&) = delete;

  // Posts the receive of message `tag` from `from_rank` into `buffer` (its shape is the
  // message's). Error when a receive with this tag is already pending.
  void post_recv(int tag, at::Tensor buffer, int from_rank);
  // Blocks until message `tag` has arrived and returns its buffer. Error when none was posted,
  // on timeout, or when the transfer failed.
  at::Tensor wait_recv(int tag);
  // Starts sending `tensor` (kept alive until the send completes) to `to_rank`.
  void send(int tag, const at::Tensor& tensor, int to_rank);
  // Drops the sends that have completed (non-blocking), so their tensors can be freed.
  void reap_sends();
  // Blocks until every send started so far has completed.
  void wait_sends();
  // Sum of `value` over all ranks of the group, with the same timeout; `what` names it in errors.
  double all_reduce_sum(double value, at::Device device,
                        const std::string& what = "all-reduce of the step's loss");
  // Every rank's `mine`, in rank order (the step's agreement: config, batch and plan digests).
  // Done here rather than with torch.distributed.all_gather_object so that no tensor the backend
  // holds on to belongs to Python: Gloo keeps its last finished work alive, and releasing a
  // Python-owned tensor during interpreter shutdown aborts the process.
  std::vector<std::string> all_gather_text(const std::string& mine, at::Device device);
  // Forgets every pending operation (after an error: their buffers are released with them).
  void clear();

  int pending_recvs() const { return static_cast<int>(recvs_.size()); }
  int pending_sends() const { return static_cast<int>(sends_.size()); }
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }

  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // takes_host_memory_only(group()): CUDA tensors go through a host copy.
  bool stages_through_host() const { return stages_through_host_; }

 private:
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor tensor;
    at::Tensor device_buffer;  // a host-staged receive's destination on the GPU, else undefined
    int peer = 0;
    int tag = 0;
  };
  // Waits for `op`, turning a timeout or backend error into a PeerError naming the peer.
  void wait(const Pending& op, const char* what);
  // Starts a transfer with `peer`; a backend that fails at once (a closed connection) becomes a
  // PeerError naming it.
  c10::intrusive_ptr<c10d::Work> start(const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
                                       int peer, int tag, const char* what);

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::chrono::milliseconds timeout_;
  std::function<std::string(int)> describe_peer_;
  bool stages_through_host_ = false;
  std::map<int, Pending> recvs_;  // by tag
  std::vector<Pending> sends_;
  int64_t bytes_sent_ = 0;
  int64_t bytes_received_ = 0;
};

// Formats a duration for messages: "30 s", "1.5 s", "250 ms".
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace infinipipe::runtime
