#!/usr/bin/env bash
# Builds the `weft` wheel (PyO3 abi3: one wheel for CPython 3.11 and later) with maturin and
# installs it into the project's virtual environment, .deps/venv (made on first use, with
# maturin, pytest and numpy from PyPI; numpy is a real DLPack producer for the tests). Prints the
# wheel's path.
#   scripts/python-wheel.sh [--release]    (default: the dev profile, which reuses cargo test's build)
# The wheel lands in ${CARGO_TARGET_DIR:-target}/wheels; carry it to a GPU machine and install it
# there with `pip install --no-deps` (scripts/gpu-suite.sh, step `python`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/venv
if ! "$venv/bin/python" -c 'import maturin, pytest, numpy' 2> /dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check maturin==1.16.0 pytest==9.2.0 numpy==2.4.6 >&2
fi
out="$(realpath -m "${CARGO_TARGET_DIR:-target}")/wheels"
rm -f "$out"/weft-*.whl
"$venv/bin/maturin" build --quiet --locked --interpreter "$venv/bin/python" --out "$out" "$@" >&2
wheel="$(ls "$out"/weft-*.whl)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
echo "$wheel"
