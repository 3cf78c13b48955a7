#!/usr/bin/env bash
# pip's route, checked from outside the checkout (CI runs it after the test tiers): builds the
# wheel against .venv's torch (`pip wheel --no-build-isolation`, as a user's environment would
# build it), makes a fresh virtualenv elsewhere holding the same torch, installs the wheel there,
# and from a folder outside the checkout runs `python -m infinipipe --version` and the example
# trainer for 3 steps on 2 processes. About 10 minutes on 2 cores, most of it the compile.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$SECONDS
.venv/bin/pip wheel -q --no-build-isolation --no-deps -w "$WORK/wheels" .
echo "wheel_check: built $(basename "$WORK"/wheels/*.whl) in $((SECONDS - started)) s"
python3 -m venv "$WORK/venv"
TORCH=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')
"$WORK/venv/bin/pip" install -q "torch==$TORCH" "$WORK"/wheels/infinipipe-*.whl
cd "$WORK"
venv/bin/python -m infinipipe --version
venv/bin/python -c 'import infinipipe, sys; p = infinipipe.__file__
sys.exit(0 if p.startswith(sys.argv[1]) else "imported from %s, not the fresh venv" % p)' "$WORK/venv"
venv/bin/torchrun --nproc_per_node=2 "$REPO/examples/train_llama.py" --steps 3 --eval-every 100 \
  --cost-model analytic
echo "wheel_check: OK in $((SECONDS - started)) s"
