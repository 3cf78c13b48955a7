#!/usr/bin/env bash
# Fails when a tracked source is not formatted as .clang-format (C++) and ruff.toml (Python) say,
# when ruff's lint finds something, or when a shell script does not parse (bash -n; no shell
# linter is installed here). Fix with: clang-format -i FILES; .venv/bin/ruff format;
# .venv/bin/ruff check --fix.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
.venv/bin/ruff format --check --quiet
.venv/bin/ruff check --quiet
git ls-files '*.sh' | xargs -n1 bash -n
echo "format: C++ and Python as .clang-format and ruff.toml say; shell scripts parse"
