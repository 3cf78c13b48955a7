#pragma once
// 0.1.0's path of this header, kept until 0.2: infinipipe/recompute/memory_check.h.
#warning \
    "infinipipe/checkpoint/memory_check.h is deprecated: include infinipipe/recompute/memory_check.h"
#include "infinipipe/recompute/memory_check.h"
