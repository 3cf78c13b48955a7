// infinipipe-plan: plans sampled or given steps with EPP and the baselines and prints what the
// simulator predicts for each (plan_tool.cc; exit codes in plan_tool.h).
#include <iostream>

#include "plan_tool.h"

int main(int argc, char** argv) {
  return infinipipe::tools::plan_tool(argc, argv, std::cout, std::cerr);
}
