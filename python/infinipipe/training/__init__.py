"""Training: the Trainer (trainer.py) composed of its parts, one job each.

trainer.py        Trainer: the public API (step, forward_backward, optimizer_step, evaluate, ...)
config.py         RuntimeConfig: how a rank runs its stage (dtypes, timeout, seed, kernels)
step_planner.py   StepPlanner: cost model, memory budget, a replica's share, planning ahead
stage_runtime.py  StageRuntime: the stage module, its optimizer and the executor
gradient_sync.py  GradientSync: gradients summed over the layout, global norm, clipping
step_input.py     what a step accepts: the batch, a given plan
results.py        StepResult, EvalResult
metrics.py        MetricsLog: progress bar, JSON Lines, TensorBoard
memory_meter.py   MemoryMeter: measured activation memory of a stage
mixed_precision.py  MasterWeights: float32 masters for a 16-bit stage
gc_pause.py       Python's garbage collector held off around a pipeline run
deprecated.py     0.1.0's Trainer keywords and attributes, mapped onto the parts
"""
