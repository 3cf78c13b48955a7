#pragma once
// EPP's workload-balanced chunking and the baselines' chunking, built from the same parts.
#include <cstdint>
#include <vector>

#include "infinipipe/core/chunk.h"
#include "infinipipe/cost/cost_model.h"

namespace infinipipe {

// Cut points of the longest sequence into K slices of equal per-layer forward cost, found from
// the tail (later slices attend to more context, so they are shorter).
struct SplitMesh {
  std::vector<int64_t> boundaries;  // 0 = b_0 < b_1 < ... < b_K = longest
  double time_target = 0;           // T_t: per-layer time of one slice (total / K)
  int64_t token_cap = 0;            // T_m: tokens of the longest slice (the first)
};
SplitMesh cost_balanced_mesh(int64_t longest, int k, const CostModel& cost);

// EPP: split along the mesh, tails seed buckets, best-fit-decreasing packing of the short
// sequences under T_t and T_m, hybrid chunks for tails. Never two slices of split sequences in
// one chunk. Chunks come out chain by chain (a long sequence's split chunks, then its hybrid).
std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths, int k, const CostModel& cost);

// The mesh with every slice longer than `max_slice_tokens` cut into the fewest pieces of equal
// cost that each hold at most that many tokens; slices within the cap are left as they are, so
// the mesh stays cost-balanced wherever the cap does not bind. Where equal-cost pieces would
// need more than 4 times the fewest count the cap allows (long slices with little context, whose
// cost is mostly attention), or no count works, the slice gets that many pieces at their
// equal-cost places moved within the cap: every piece 1 to max_slice_tokens tokens, in bounded
// work. token_cap becomes the longest slice; time_target is kept. Needs max_slice_tokens >= 1.
SplitMesh cap_mesh_slices(const SplitMesh& mesh, int64_t max_slice_tokens, const CostModel& cost);

struct EppChunkingOptions {
  int k = 1;  // slices of the longest sequence in the cost-balanced mesh
  // 0: chunks are capped by the mesh's token cap T_m alone. Otherwise also by this many tokens:
  // short sequences are packed under min(T_m, max_chunk_tokens), and mesh slices longer than it
  // are cut further (cap_mesh_slices), so every chunk holds at most this many tokens. Smaller
  // chunks keep fewer tokens in flight, so a step can fit one pipeline without recompute.
  int64_t max_chunk_tokens = 0;
  // true (the paper's step 4): when a short sequence fits no bucket under T_t but some bucket
  // has the token room, raise T_t just enough for the cheapest such bucket. false: open a new
  // bucket instead, so no chunk runs over T_t; more chunks, but balanced ones (a chunk over T_t
  // in a long chain stalls the 1F1B pipeline on every backward of that chain).
  bool relax_time_target = true;
  // Packed chunks (whole short sequences) in increasing token order instead of the packing's.
  // The first of them are in flight together with the long sequences' slices, where memory peaks.
  bool packed_light_first = false;
  // Drain taper (0: none): the short sequences of the last drain_chunks packed chunks are packed
  // again into drain_split times as many chunks, heaviest first, and placed last. The pipeline's
  // drain after the last stage finishes runs the last few chunks' backwards through every other
  // stage, so finer chunks there shorten it; the rest of the step keeps its fewer, fuller chunks.
  int drain_chunks = 0;
  int drain_split = 1;
};
std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths,
                              const EppChunkingOptions& options, const CostModel& cost);
// What epp_chunks did, for a caller about to chunk the same step with other options.
struct EppChunkingReport {
  // relax_time_target raised T_t for some sequence. When it did not, the same options with
  // relax_time_target false give the same chunks (the packing never reached the choice where the
  // two differ): EPP's search then skips chunking the strict setting.
  bool time_target_relaxed = false;
};
std::vector<Chunk> epp_chunks(const std::vector<int64_t>& lengths,
                              const EppChunkingOptions& options, const CostModel& cost,
                              EppChunkingReport& report);

// Batch-level: whole sequences, best-fit-decreasing into micro-batches of at most `token_cap`
// tokens. Error when a sequence is longer than the cap.
std::vector<Chunk> batch_chunks(const std::vector<int64_t>& lengths, int64_t token_cap);

// Seq1F1B: micro-batches packed as batch_chunks, each cut into k slices of equal forward cost
// (a slice may hold pieces of several sequences).
std::vector<Chunk> seq1f1b_chunks(const std::vector<int64_t>& lengths, int64_t token_cap, int k,
                                  const CostModel& cost);

// ChunkFlow style: sequences longer than `chunk_tokens` cut into pieces of that size; the short
// sequences and the long ones' last pieces packed into chunks of at most that size.
std::vector<Chunk> fixed_size_chunks(const std::vector<int64_t>& lengths, int64_t chunk_tokens);

// Error unless lengths is non-empty and every length is positive (names the first bad index).
void check_lengths(const std::vector<int64_t>& lengths);

}  // namespace infinipipe
