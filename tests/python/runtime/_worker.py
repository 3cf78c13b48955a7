"""One rank of launcher.run_ranks: runs module:function(**args), saves its result, exits."""

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
    if error is None and torch.distributed.is_initialized():
        # A body that made the default group itself: ended here, not in the interpreter's
        # finalization, where Gloo's threads can abort the process (rendezvous.at_exit).
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
