#pragma once
// Virtual stages (docs/design.md, "Virtual stages"): a schedule's stages placed on fewer ranks,
// each rank running its stages' actions in one merged order (Schedule::ranks).
#include <vector>

#include "infinipipe/schedule/action.h"

namespace infinipipe {

// The V shape's placement of 2r stages on r ranks (Qi et al., "Pipeline Parallelism with
// Controllable Memory", NeurIPS 2024, arXiv 2405.15362; its V-ZB is ZB-V): stage s goes on
// rank s below r and on rank 2r-1-s from r on, so the data goes down the ranks and back up. The
// turn (stages r-1 and r) is on one rank, and the first stage (the embedding) shares rank 0 with
// the last (the LM head and the loss).
std::vector<int> v_shape(int num_ranks);

// `schedule`, whose stages each ran on a rank of their own, with stage s placed on rank
// rank_of_stage[s] and each rank's order merged from its stages' lists. The merge runs the step
// without time (action.h's semantics) in rounds, as if every compute took as long: in a round a
// rank posts every RECV and makes every SEND it can, then runs one ready compute, B before F
// before W (a B is what the stage before waits for; a W waits for no one), the later stage first
// among equals (nearer the loss). Any order taken so runs without deadlock, on any timing,
// because a rank only takes a step that could run. With `start_s` (per stage and action, a
// timing such as the simulator's SimResult::start_s of the stages unplaced, or placed once
// already) the merge instead takes, over all ranks, the ready step that started first there: a
// list schedule guided by real durations. Error when the ranks would be left without stages, or
// when the stages deadlock before they are merged.
Schedule place_on_ranks(const Schedule& schedule, const std::vector<int>& rank_of_stage,
                        int num_chunks, const std::vector<std::vector<double>>& start_s = {});

}  // namespace infinipipe
