"""python -m infinipipe <command> [options]

Commands:
  profile   time one layer on this machine and write a calibrated cost JSON
            (python -m infinipipe profile --help)
  --version the version, and the torch, CUDA and NCCL infinipipe._C was built with
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command, rest = argv[0], argv[1:]
    if command == "--version":
        return version()
    if command == "profile":
        from infinipipe.profiling import (
            cli,
        )  # imports torch and the compiled module: only when asked

        return cli.main(rest)
    print(f"unknown command {command!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


def version() -> int:
    """Prints what was built and what runs; 1 when they differ (the module must be rebuilt)."""
    import torch

    import infinipipe

    print(f"infinipipe {infinipipe.__version__}")
    try:
        from infinipipe import _build_info as built
    except ImportError:
        print("infinipipe._C: not built (./setup.sh, or pip install --no-build-isolation .)")
        return 1
    print(f"built with torch {built.TORCH}, CUDA {built.CUDA}, NCCL {built.NCCL}")
    print(f"running torch {torch.__version__}")
    if torch.__version__ != built.TORCH:
        print(
            "infinipipe._C was built against another torch: rebuild it in this environment "
            "(pip install --no-build-isolation .)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
