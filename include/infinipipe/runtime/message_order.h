#pragma once
// NCCL matches the point-to-point messages between two ranks in the order they are issued,
// whatever their tags (Gloo matches by tag: pipe.h). On NCCL a schedule must therefore send, for
// every ordered pair of stages, its messages of every kind in the order the receiver posts their
// receives. Without the spread head each pair carries one kind; with it the last stage and the
// stage before it can exchange two kinds each way (SEND_B and SEND_H, SEND_F and SEND_HG), all
// [rows, hidden], so a different order would swap their data silently. No LibTorch here.
#include <string>

#include "infinipipe/schedule/action.h"

namespace infinipipe::runtime {

// The first message, over the ordered pairs of stages, that a stage sends in another place of
// its sends to a peer than the peer posts its receive in, described; empty when every pair's
// sends and receives are in the same order. heads_apart: the head's messages travel on a group of
// their own (ExecutorOptions::head_group), ordered apart from the activations and gradients.
std::string message_order_conflict(const Schedule& schedule, bool heads_apart = false);

}  // namespace infinipipe::runtime
