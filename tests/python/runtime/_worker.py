"""One rank of launcher.run_ranks: runs module:function(**args), saves its result, exits."""

import atexit
import importlib
import os
import pickle
import sys
import traceback

import torch


def main() -> int:
    target, tmp = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    module_name, function_name = target.split(":")
    with open(f"{tmp}/args.pkl", "rb") as f:
        args = pickle.load(f)
    value, error, code = None, None, 0
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        value = function(**args)
    except BaseException as e:  # noqa: BLE001 - reported to the test
        traceback.print_exc()
        error, code = (type(e).__name__, str(e)), 1
    torch.save({"value": value, "error": error}, f"{tmp}/rank{rank}.pt")
    return code


if __name__ == "__main__":
    exit_code = main()
    # Without the interpreter's finalization: a Gloo worker thread that drops its last work's
    # tensors during it aborts the process ("terminate called without an active exception",
    # pytorch/pytorch#190489). Trainer.close, run by the exit handlers for a trainer left open,
    # ends the trainer's groups' threads before it (docs/runtime.md, "Exits"), but not after a
    # lost peer, whose survivors the tests leave to exit this way too.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
