#!/usr/bin/env bash
# Sets weft up and runs its main job, `weft selftest`: the GPU suite on every visible GPU (one
# process per GPU, then one process driving all of them). On a machine without a GPU it says
# so and runs the CPU part (NVRTC compiles, layout probe, bootstrap). Set-up includes the `weft`
# Python package: its release wheel, installed into .deps/venv (scripts/python-wheel.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ ! -e /usr/local/cuda/lib64/libnvrtc.so.13 ] && [ -z "${WEFT_CUDA_HOME:-}" ]; then
  WEFT_CUDA_HOME="$(scripts/cuda-wheels.sh)"
  export WEFT_CUDA_HOME
fi
cargo build --release --locked -p weft-cli
scripts/python-wheel.sh --release > /dev/null
exec target/release/weft selftest "$@"
