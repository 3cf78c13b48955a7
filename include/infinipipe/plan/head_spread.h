#pragma once
// 0.1.0's path of this header, kept until 0.2: the planner is its own part now (planner/), the
// plan as data stays in plan/.
#warning "infinipipe/plan/head_spread.h is deprecated: include infinipipe/planner/head_spread.h"
#include "infinipipe/planner/head_spread.h"
