#pragma once
// 0.1.0's path of this header, kept until 0.2: the planner is its own part now (planner/), the
// plan as data stays in plan/.
#warning "infinipipe/plan/stage_balance.h is deprecated: include infinipipe/planner/stage_balance.h"
#include "infinipipe/planner/stage_balance.h"
