#!/usr/bin/env bash
# NCCL's device-API host calls on weft's libnccl.so.2, with kernels on weft's device API, on a
# GPU machine: crates/weft-nccl/tests/gpu/device_api_test.cu, built here with nvcc. Runs a thread
# per rank with a GPU each (one node: the LSA backend), the same with a virtual node per rank
# (WEFT_RANKS_PER_NODE=1: the proxy), two ranks sharing GPU 0 in one node (WEFT_SHARE_GPUS=1),
# every GPU from one thread inside groups (with 2 GPUs or more), and the trap of an ncclDevComm
# weft did not make. Each run ends with `device_api_test <mode>: N checks, M failed`; the script
# fails when a run does.
#   scripts/nccl-device-api-test.sh [OUT_DIR]        (default OUT_DIR: target/nccl-device-api)
# nccl.h and nccl_device.h: $NCCL_INCLUDE, .deps/nccl (scripts/nccl-header.sh: 2.28.9), or the pip
# nvidia-nccl-cu13 of /opt/torch/.venv. The library: ${WEFT_NCCL:-target/nccl/libnccl.so.2}.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/nccl-device-api}"
mkdir -p "$out"
lib="${WEFT_NCCL:-$root/target/nccl/libnccl.so.2}"
[ -f "$lib" ] || { echo "no $lib: build it with scripts/package-nccl.sh, or set WEFT_NCCL" >&2; exit 2; }
nccl_inc=""
for d in "${NCCL_INCLUDE:-}" "$root/.deps/nccl/nvidia/nccl/include" /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/include; do
  if [ -n "$d" ] && [ -f "$d/nccl_device.h" ]; then nccl_inc="$d"; break; fi
done
[ -n "$nccl_inc" ] || { echo "no nccl_device.h: set NCCL_INCLUDE or run scripts/nccl-header.sh" >&2; exit 2; }
libdir="$(cd "$(dirname "$lib")" && pwd)"
exe="$out/device_api_test"
nvcc -std=c++17 -O2 -arch=sm_90 -I"$nccl_inc" -I"$root/device/include" \
  "$root/crates/weft-nccl/tests/gpu/device_api_test.cu" -o "$exe" \
  -L"$libdir" -l:"$(basename "$lib")" -Xlinker -rpath,"$libdir" || { echo "device_api_test: build failed"; exit 2; }
unset WEFT_NCCL_FALLBACK_LIB WEFT_NCCL_FORCE_FALLBACK
export NCCL_NVLS_ENABLE=0
gpus="$(nvidia-smi -L | wc -l)"
failed=0
run() {  # NAME ARGS... (the environment of the call applies)
  local name="$1"; shift
  timeout 120 "$exe" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "$name: rc=$rc $(grep -h 'checks,' "$out/$name.txt" | tail -1)"
  [ $rc -eq 0 ] || { failed=1; grep -h '^FAIL' "$out/$name.txt" | head -5; }
}
if [ "$gpus" -ge 2 ]; then
  run lsa-threads threads "$gpus" "$gpus" "$gpus"
  WEFT_RANKS_PER_NODE=1 run proxy-threads threads "$gpus" "$gpus" 1
  run lsa-group group "$gpus"
fi
WEFT_SHARE_GPUS=1 run lsa-shared-gpu threads 2 1 2
WEFT_RANKS_PER_NODE=1 run proxy-shared-gpu threads 2 1 1
run trap trap
exit $failed
