#!/usr/bin/env bash
# Installs the reference NCCL (PyPI wheel nvidia-nccl-cu13 2.28.9: nccl.h and the real
# libnccl.so.2) and the CUDA headers nccl.h includes (runtime, crt, cccl 13.0.x), no GPU needed,
# into .deps/nccl unless they are already there, and prints the folder holding nccl.h. The CUDA
# headers land in .deps/nccl/nvidia/cu13/include. weft-nccl's tests compile C programs against
# them and compare our exports with the header's declarations.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/nccl"
nccl="$dest/nvidia/nccl"
cuda="$dest/nvidia/cu13/include"
if [ ! -f "$nccl/include/nccl.h" ] || [ ! -f "$nccl/lib/libnccl.so.2" ] || [ ! -f "$cuda/crt/host_config.h" ] \
  || [ ! -f "$cuda/cuda_runtime.h" ] || [ ! -d "$cuda/cccl/nv" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-nccl-cu13==2.28.9 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 >&2
fi
echo "$nccl/include"
