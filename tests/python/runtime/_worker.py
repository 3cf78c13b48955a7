"""One rank of launcher.run_ranks: runs module:function(**args), saves its result, exits.

The launcher forks ranks from a server that imported this module once (multiprocessing's
forkserver with this module preloaded): a fresh interpreter spends about 4 s of CPU importing
torch and infinipipe, most of a small test's cost on two cores. Each rank is still a process of
its own, forked from that clean server (nothing of a test is in it), its environment, working
directory, path and output set here as `python _worker.py TARGET TMP` would have them.
`python _worker.py TARGET TMP` itself still runs one rank in a fresh interpreter."""

import atexit
import importlib
import os
import pickle
import sys
import traceback

# Read by the OpenMP runtime when torch loads it: one intra-op thread per rank, as the launcher
# sets for fresh ranks too.
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402

import infinipipe.training.trainer  # noqa: E402, F401 - preloaded for the forked ranks


def run(target: str, tmp: str) -> int:
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


def exit_now(code: int) -> None:
    # Without the interpreter's finalization: a Gloo worker thread that drops its last work's
    # tensors during it aborts the process ("terminate called without an active exception",
    # pytorch/pytorch#190489). Trainer.close, run by the exit handlers for a trainer left open,
    # ends the trainer's groups' threads before it (docs/runtime.md, "Exits"), but not after a
    # lost peer, whose survivors the tests leave to exit this way too.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def forked(target: str, tmp: str, env: dict, cwd: str, out: str, err: str) -> None:
    """A forked rank: the fresh rank's environment, directory, path and output, then run()."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout.reconfigure(line_buffering=True, write_through=True)
    sys.stderr.reconfigure(line_buffering=True, write_through=True)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [cwd] + paths
    sys.argv = [os.path.abspath(__file__), target, tmp]
    torch.set_num_threads(1)
    exit_now(run(target, tmp))


if __name__ == "__main__":
    exit_now(run(sys.argv[1], sys.argv[2]))
