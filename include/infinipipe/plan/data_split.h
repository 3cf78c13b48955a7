#pragma once
// 0.1.0's path of this header, kept until 0.2: the planner is its own part now (planner/), the
// plan as data stays in plan/.
#warning "infinipipe/plan/data_split.h is deprecated: include infinipipe/planner/data_split.h"
#include "infinipipe/planner/data_split.h"
