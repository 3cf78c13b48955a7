// The chunks a plan's setting stands for (planner.h: epp_chunking, setting_chunks).
#include "infinipipe/core/error.h"
#include "infinipipe/planner/planner.h"

namespace infinipipe {

EppChunkingOptions epp_chunking(const Setting& setting) {
  EppChunkingOptions chunking;
  chunking.k = setting.epp_k;
  chunking.max_chunk_tokens = setting.epp_token_cap;
  chunking.relax_time_target = !setting.strict_packing;
  chunking.packed_light_first = true;
  chunking.drain_chunks = setting.drain_chunks;
  chunking.drain_split = setting.drain_split;
  return chunking;
}

std::vector<Chunk> setting_chunks(Method method, const std::vector<int64_t>& lengths,
                                  const Setting& setting, const CostModel& cost) {
  if (method == Method::kEpp && setting.chunker != Method::kEpp) method = setting.chunker;
  switch (method) {
    case Method::kEpp:
      return epp_chunks(lengths, epp_chunking(setting), cost);
    case Method::kBatch:
      return batch_chunks(lengths, setting.token_cap);
    case Method::kSeq1F1B:
      return seq1f1b_chunks(lengths, setting.token_cap, setting.k, cost);
    case Method::kChunkFlow:
      return fixed_size_chunks(lengths, setting.chunk_tokens);
  }
  throw Error("unknown method");
}

}  // namespace infinipipe
