"""python -m infinipipe <command> [options]

Commands:
  profile   time one layer on this machine and write a calibrated cost JSON
            (python -m infinipipe profile --help)
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
    if command == "profile":
        from infinipipe.profiling import (
            cli,
        )  # imports torch and the compiled module: only when asked

        return cli.main(rest)
    print(f"unknown command {command!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
