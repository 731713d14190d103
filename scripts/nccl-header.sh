#!/usr/bin/env bash
# Installs the reference NCCL (PyPI wheel nvidia-nccl-cu13 2.28.9, no GPU needed) into
# .deps/nccl unless it is already there, and prints its include folder (holding nccl.h).
# weft-nccl's tests compile C probes against this header and compare our exports with the
# library's; set WEFT_NCCL_HEADER_DIR to use another include folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/nccl"
home="$dest/nvidia/nccl"
if [ ! -f "$home/include/nccl.h" ] || [ ! -f "$home/lib/libnccl.so.2" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-nccl-cu13==2.28.9 >&2
fi
echo "$home/include"
