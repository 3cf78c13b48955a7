"""How a trainer's steps are planned (the planner itself is C++: infinipipe._C.plan).

config.py         PlanConfig: method, memory budget, search options, cost model source
cost_model.py     the cost model a trainer plans with, and the memory its budget comes from
stage_balance.py  layer splits from per-stage costs (the head's stage lighter)
ahead.py          PlanAhead, Prefetching: planning the next batches while a step runs
"""
