#!/usr/bin/env bash
# Installs NVRTC and the CUDA headers (PyPI wheels, CUDA 13.0.x, no GPU needed) into
# .deps/cuda13 unless they are already there, and prints the folder to use as WEFT_CUDA_HOME.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/cuda13"
home="$dest/nvidia/cu13"
if [ ! -f "$home/lib/libnvrtc.so.13" ] || [ ! -f "$home/include/cuda_fp16.h" ] || [ ! -d "$home/include/cccl" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 >&2
fi
echo "$home"
