"""The cost model measured on the machine at hand (docs/runtime.md, "Profiled by the trainer").

layer_profile.py  one decoder layer timed as a pipeline stage runs it, and the fit
neighbours.py     processes doing the same work beside it, as the other ranks do
cli.py            `python -m infinipipe profile`
profiled_cost.py  PlanConfig(cost_model="profile"): the trainer profiles, caches and checks
alltoall.py       the Ulysses all-to-all measured on its process group
"""
