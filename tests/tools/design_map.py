"""docs/design.md is the map of the code: every C++ source and header, every Python module and
subpackage, and every benchmark experiment is named there. A file added without a word in the
map fails this check (ctest runs it; only the standard library, so any python3 does).

    python3 tests/tools/design_map.py
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tracked(*patterns: str) -> list[pathlib.PurePosixPath]:
    out = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return [pathlib.PurePosixPath(line) for line in out.splitlines()]


def names_to_find() -> dict[str, str]:
    """What the map must name, and the file it stands for: a C++ source as `name.cc`, a header
    without a source of its own as `name.h`, a Python module as `name.py` (a package's
    `__init__.py` as its folder, `name/`), a benchmark experiment as `name.py`."""
    wanted: dict[str, str] = {}
    cpp = tracked("src/*.cc", "src/*.h", "include/*.h", "python/src/*.cc", "python/src/*.h")
    sources = {p.stem for p in cpp if p.suffix == ".cc"}
    for p in cpp:
        if p.suffix == ".cc" or p.stem not in sources:
            wanted.setdefault(p.name, str(p))
    for p in tracked("python/infinipipe/*.py", "benchmarks/experiments/*.py"):
        if p.name == "__init__.py":
            if p.parent.name != "infinipipe":
                wanted.setdefault(f"{p.parent.name}/", str(p.parent))
        elif not p.name.startswith("_"):
            wanted.setdefault(p.name, str(p))
    return wanted


def main() -> int:
    text = (ROOT / "docs" / "design.md").read_text()
    missing = sorted(
        f"{path} (as {name})" for name, path in names_to_find().items() if name not in text
    )
    if missing:
        print("docs/design.md does not name:\n  " + "\n  ".join(missing))
        print("Add each where its part, subpackage or experiment is described.")
        return 1
    print(f"docs/design.md names all {len(names_to_find())} files it maps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
