"""Training state on disk: checkpoints (docs/runtime.md, "Checkpoints").

checkpoint.py  save and load the whole training state, atomically, with DCP
contents.py    what a checkpoint holds of a trainer, and handing a loaded state back
files.py       a checkpoint directory: step directories, `latest`, publishing and pruning
"""
